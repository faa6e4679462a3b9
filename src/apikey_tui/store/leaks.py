"""Leaked keys: stopping a key whose secret was found where it must not be, and its record."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from sqlalchemy import delete as sa_delete
from sqlalchemy import or_, update
from sqlmodel import Session, col, select

from apikey_tui.db.models import EventRow, KeyRow
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import ELLIPSIS, printable
from apikey_tui.store import audit
from apikey_tui.store.context import StoreContext
from apikey_tui.store.credentials import Credential, CredentialReads
from apikey_tui.store.records import (
    KEY_TABLE,
    in_grace,
    previous_until,
    read_info,
    secret_works,
)
from apikey_tui.store.types import LEAK_EVENT, LEAK_SOURCES, Leak, leak_reason, marks_leak

# A secret's newest reports compared against a new one: a replay is of a recent report, and a
# bound keeps a secret reported thousands of times from costing a scan of them all.
_REPORTS_COMPARED = 100
# Public ids asked of the audit trail in one read (`issued`): bound parameters stay far below
# any database's limit (SQLite's is 32,766; psycopg's 65,535).
_ISSUED_ASKED = 1000


def contain_leak(
    ctx: StoreContext, credential: Credential, *, source: str, where: str, delete: bool = False
) -> Leak | None:
    """Act on a key whose secret the caller proved leaked (it matched credential's hash).

    The leak marks the secret whatever the key's state: a live, disabled or expired key is
    disabled with the reason `leaked: <where>` (a disabled key keeps its disabled_at), so no
    enable, undo or new expiry brings that secret back; only a recreate or rotation (a new
    secret) does. With delete a live key is deleted instead. A `key.leak` event records the
    source and where, in the same transaction (verifiers hear of it at commit). The very same
    report again (source and where) writes nothing and comes back as `repeated`: a replayed
    report acts once. A rotated key's previous secret in grace counts as the key: the whole key
    is stopped. The key is found again by the credential's public id; None when no key holds it
    any more (deleted, recreated, or its grace ended meanwhile): the leaked secret then works
    nowhere.
    """
    if source not in LEAK_SOURCES:
        raise InvalidInputError(f"unknown leak source {source!r}")
    public_id = credential.info.public_id
    key = KEY_TABLE
    with ctx.session(write=True) as session:
        row = session.exec(
            select(KeyRow)
            .where(or_(key.c.public_id == public_id, key.c.old_public_id == public_id))
            .with_for_update()
        ).first()
        if row is None:
            return None
        # Public ids are never reused, so an id still naming this row means the same
        # secret; the stored hash may differ (a verifier re-hashed it) and does not matter.
        now = ctx.clock()
        until = row.expires_at
        if row.public_id != public_id:
            if not in_grace(row.old_public_id, row.grace_until, now):
                return None
            assert row.grace_until is not None
            until = previous_until(row.expires_at, row.grace_until)
        live = secret_works(row.disabled_at is not None, until, now)
        info = read_info(session, row, now)
        shown = printable(where)
        if marks_leak(row.disabled_reason) and _reported(session, public_id, source, shown):
            return Leak(now, source, "repeated", shown, info.owner, info.name, public_id)
        if delete and live:
            outcome = "deleted"
            session.delete(row)
        else:
            outcome = "recorded" if marks_leak(row.disabled_reason) else "disabled"
            row.disabled_at = row.disabled_at or now
            if outcome == "disabled":
                row.disabled_reason = leak_reason(where)
            session.add(row)
            info = read_info(session, row, now)
        leak = Leak(now, source, outcome, shown, info.owner, info.name, public_id)
        reported = replace(info, public_id=public_id)
        audit.record(ctx, session, LEAK_EVENT, reported, detail=leak.detail, also=[info.public_id])
        session.commit()
    return leak


# The id a start-up probe logs as changed, in a transaction rolled back: no key's, ever.
_PROBE_ID = "apikey-tui-probe"
# The most the probe waits for a lock (PostgreSQL): a lock held says nothing of the role, and
# the writes' own 10 s held serve-leaks' start as long.
_PROBE_LOCK_WAIT_S = 1.0


def check_containment(ctx: CredentialReads, *, delete: bool = False) -> None:
    """Raise the database's refusal (one line: a role that lacks a privilege, a read-only file)
    when a report could not stop a key here, before any leak arrives.

    The reads judging a report takes (`credential`, on no key) and contain_leak's writes run,
    on one key's row no other session holds (on none if there is none), and its event and
    change-log entry are written, then all is rolled back: no key, event or entry changes, and
    no verifier hears (NOTIFY is sent at commit only).
    """
    # Its one SELECT reads every table a report's key is read from (PostgreSQL checks each
    # table's privilege whether rows match or not): a role that may write but not read them
    # passed the writes below and met every report with 503.
    ctx.credential(_PROBE_ID)
    key = KEY_TABLE
    with ctx.session(write=True, wait=_PROBE_LOCK_WAIT_S) as session:
        conn = session.connection()
        # A real row: what stopping a key sets off runs only on rows (the key search's
        # trigger, as this role, on a delete), and an id no row has passed a role that then
        # failed every delete. SKIP LOCKED: no row another session holds is waited for.
        # Whole rows, as contain_leak reads them: column grants are checked column by column.
        first = select(*key.c).order_by(key.c.id).limit(1).with_for_update(skip_locked=True)
        row = conn.execute(first).first()
        target = key.c.id == row.id if row is not None else key.c.id < 0
        disabled = {"disabled_at": key.c.disabled_at, "disabled_reason": key.c.disabled_reason}
        conn.execute(update(key).where(target).values(disabled))
        if delete:
            conn.execute(sa_delete(key).where(target))
        events = EventRow.__table__  # type: ignore[attr-defined]
        conn.execute(select(*events.c).where(events.c.id < 0))  # a repeated report
        audit.record(ctx, session, LEAK_EVENT, owner="", also=[_PROBE_ID])
        session.flush()
        session.rollback()


def _reported(session: Session, public_id: str, source: str, where: str) -> bool:
    """Whether this very report (source and where) of this secret is already recorded."""
    rows = session.exec(
        select(EventRow)
        .where(EventRow.public_id == public_id, EventRow.action == LEAK_EVENT)
        .order_by(col(EventRow.id).desc())
        .limit(_REPORTS_COMPARED)
    )
    for row in rows:
        seen = Leak.from_event(audit.event_of(row))
        # A long where is stored cut short, ending in "…" (Leak.detail).
        same = seen.where == where or (
            seen.where.endswith(ELLIPSIS) and where.startswith(seen.where[:-1])
        )
        if seen.source == source and same:
            return True
    return False


def leaks(ctx: StoreContext, owner: str, name: str, limit: int = 20) -> list[Leak]:
    """Where and when a key was found leaked (its key.leak events), newest first.

    Matched by owner and name, like key_detail: a key recreated after a leak keeps the
    history of the leak that made its admin recreate it.
    """
    with ctx.session() as session:
        rows = session.exec(
            select(EventRow)
            .where(
                EventRow.owner == owner,
                EventRow.key_name == name,
                EventRow.action == LEAK_EVENT,
            )
            .order_by(col(EventRow.id).desc())
            .limit(limit)
        )
        return [Leak.from_event(audit.event_of(r)) for r in rows]


def issued(ctx: StoreContext, public_ids: Collection[str]) -> set[str]:
    """Those of these public ids this database ever made a key with (its events name them).

    No index serves a read of the trail by public id: each read scans it whole, so ids are
    asked _ISSUED_ASKED at a time, not one by one.
    """
    asked = list(dict.fromkeys(public_ids))
    found: set[str] = set()
    with ctx.session() as session:
        for start in range(0, len(asked), _ISSUED_ASKED):
            batch = asked[start : start + _ISSUED_ASKED]
            rows = session.exec(
                select(EventRow.public_id).where(col(EventRow.public_id).in_(batch)).distinct()
            )
            found.update(row for row in rows if row is not None)
    return found
