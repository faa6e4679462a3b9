"""The lifetime policy: the longest a key may live, and the expiry each key gets under it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from apikey_tui.db.models import KeyRow, SchemaInfo
from apikey_tui.errors import DatabaseCorruptError, InvalidInputError, LifetimePolicyError
from apikey_tui.names import (
    DURATION_MAX,
    NEVER,
    check_span,
    expiry_moment,
    format_duration,
    format_moment,
    whole_second,
)
from apikey_tui.store import audit
from apikey_tui.store.context import StoreContext

if TYPE_CHECKING:
    from apikey_tui.names import Expiry

POLICY_KEY = "max_lifetime_seconds"  # the lifetime policy's row in apikey_tui_meta


second = whole_second  # expiries and graces fall on whole seconds (names.whole_second)


def expiry_note(expires_at: datetime | None) -> str:
    """'; expires <moment>' for an event's detail, or nothing for a key that never expires."""
    return f"; expires {format_moment(expires_at)}" if expires_at is not None else ""


def breaks(created_at: datetime, expires_at: datetime | None, maximum: timedelta) -> bool:
    """Whether a key's lifetime (creation or last rotation to expiry) exceeds the maximum."""
    return expires_at is None or expires_at - created_at > maximum


def lifetime_policy(ctx: StoreContext) -> timedelta | None:
    """The maximum lifetime of new keys, or None when no policy is set."""
    with ctx.session() as session:
        return stored_policy(session)


def set_lifetime_policy(ctx: StoreContext, maximum: timedelta | None) -> None:
    """Hold new keys to a maximum lifetime (None: no policy); existing keys stay as they are."""
    if maximum is not None and maximum <= timedelta(0):
        raise InvalidInputError("a maximum lifetime must be longer than 0")
    if maximum is not None:
        check_span(maximum, "maximum lifetime")
    with ctx.session(write=True) as session:
        row = session.get(SchemaInfo, POLICY_KEY)
        if maximum is None:
            if row is not None:
                session.delete(row)
        else:
            seconds = str(int(maximum.total_seconds()))
            if row is None:
                row = SchemaInfo(key=POLICY_KEY, value=seconds)
            row.value = seconds
            session.add(row)
        violators = _violators(session, maximum)
        detail = f"max-lifetime {format_duration(maximum) if maximum else 'none'}"
        if violators:
            detail += (
                "; 1 existing key breaks it"
                if violators == 1
                else (f"; {violators} existing keys break it")
            )
        audit.record(ctx, session, "policy.set", detail=detail)
        session.commit()


def stored_policy(session: Session) -> timedelta | None:
    """The policy as stored, read in session's transaction."""
    row = session.get(SchemaInfo, POLICY_KEY)
    if row is None:
        return None
    try:
        seconds = int(row.value)
    except ValueError:
        seconds = 0
    if seconds <= 0:  # raw SQL: a limit we cannot read is no limit we may assume
        raise DatabaseCorruptError(
            f"the stored max-lifetime policy {row.value[:30]!a} is not a positive number of "
            "seconds; set it again: apikey-tui policy set max-lifetime DURATION|none"
        )
    # One beyond the bound (raw SQL, past what timedelta holds) counts as the bound.
    return timedelta(seconds=min(seconds, int(DURATION_MAX.total_seconds())))


def _violators(session: Session, maximum: timedelta | None) -> int:
    if maximum is None:
        return 0
    rows = session.execute(sa_select(col(KeyRow.created_at), col(KeyRow.expires_at))).all()
    return sum(1 for created, expires in rows if breaks(created, expires, maximum))


def expiry(
    session: Session,
    expires: Expiry | None,
    *,
    start: datetime,
    now: datetime,
    inherited: timedelta | None = None,
) -> datetime | None:
    """The expiry a key gets, on whole seconds; refused rather than shortened.

    expires None asks for the default: the inherited lifetime (a rotation's) or none, either
    capped at the policy's maximum. An explicit request past the maximum, counted from
    start (the key's creation or last rotation), is refused with LifetimePolicyError:
    an admin who asked for a year must not silently get a month.
    """
    policy = stored_policy(session)
    if expires is None:
        spans = [span for span in (inherited, policy) if span is not None]
        # An inherited lifetime beyond the bound (an expiry stored by raw SQL or an older
        # release, such as 9999-12-31) counts as the bound: rotating must never overflow.
        return second(now + min(*spans, DURATION_MAX)) if spans else None
    allowed = f"the lifetime policy allows at most {format_duration(policy)}" if policy else ""
    if expires == NEVER:
        if policy is not None:
            raise LifetimePolicyError(f"a key that never expires is refused: {allowed}")
        return None
    moment = expiry_moment(expires, now)
    assert moment is not None  # NEVER was answered above
    if policy is not None and moment - start > policy:
        raise LifetimePolicyError(
            f"expiry {format_moment(moment)} is refused: {allowed}, "
            f"until {format_moment(start + policy)}"
        )
    return moment
