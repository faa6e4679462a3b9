"""The audit trail: recording every change, and reading it back."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_
from sqlmodel import Session, col, select

from apikey_tui.db.models import EventRow, KeyRow, PreviousIdRow
from apikey_tui.store.context import StoreContext
from apikey_tui.store.credentials import announce
from apikey_tui.store.records import key_row, like_escaped, like_pattern, read_info
from apikey_tui.store.types import Event, KeyDetail, KeyInfo

# A batch's events carry its id at the start of their detail ("batch 3f9c2e1a7b04: …"): the
# event table has no column for it, and a new column would need a schema version of its own.
_BATCH = re.compile(r"batch ([0-9a-f]{12})(?:: |$)")


def new_batch() -> str:
    """A new batch id: 12 hex digits, shared by every event of one bulk change."""
    return secrets.token_hex(6)


def with_batch(detail: str, batch: str | None) -> str:
    """An event's detail as stored: the batch id first, when the event belongs to one."""
    if batch is None:
        return detail
    return f"batch {batch}: {detail}" if detail else f"batch {batch}"


def batch_of(detail: str) -> str | None:
    """The batch id a stored detail starts with, or None for an event of its own."""
    found = _BATCH.match(detail)
    return found.group(1) if found else None


def undoing(batch: str) -> str:
    """How an undo's events name the batch they reverse ("undoes batch 3f9c2e1a7b04"), in
    their detail after their own batch id; `undone_by` finds them by it."""
    return f"undoes batch {batch}"


def batch_events(session: Session, batch: str) -> list[EventRow]:
    """Every event of one batch, oldest first. The id is in the detail text, so this reads the
    whole trail (as a key's history does): an undo from the trail is rare, the trail unindexed.
    """
    mine = or_(
        col(EventRow.detail) == f"batch {batch}",
        col(EventRow.detail).like(f"batch {like_escaped(batch)}: %", escape="\\"),
    )
    rows = session.exec(select(EventRow).where(mine).order_by(col(EventRow.id)))
    return [r for r in rows if batch_of(r.detail) == batch]  # LIKE ignores case; ids do not


def undone_by(session: Session, batch: str, since: int) -> EventRow | None:
    """The first event after event id `since` of an undo of the batch, if it was undone."""
    words = like_escaped(undoing(batch))
    query = (
        select(EventRow)
        .where(col(EventRow.id) > since, col(EventRow.detail).like(f"%{words}%", escape="\\"))
        .order_by(col(EventRow.id))
    )
    return next((r for r in session.exec(query) if undoing(batch) in r.detail), None)


def record(
    ctx: StoreContext,
    session: Session,
    action: str,
    key: KeyInfo | None = None,
    *,
    scope: str | None = None,
    detail: str = "",
    also: Iterable[str | None] = (),
    batch: str | None = None,
    owner: str | None = None,
) -> None:
    """Add an event to session's transaction: it is recorded if and when that commits.

    A change to a key also appends the ids it touched (the key's, its previous one's, and
    `also`: ids the change retired, or for a change to an owner the ids of its keys) to the
    change log, in the same transaction. batch: the id of the bulk change this event is part of
    (`new_batch`), kept in the detail. owner: the owner an event without a key is about.
    """
    # Verifiers are told of every event (PostgreSQL); the change log lists the ids it touched.
    ids = [key.public_id, key.old_public_id, *also] if key is not None else list(also)
    announce(session, ids, ctx.clock())
    session.add(
        EventRow(
            at=ctx.clock(),
            action=action,
            owner=key.owner if key else owner,
            key_name=key.name if key else None,
            public_id=key.public_id if key else None,
            scope=scope,
            detail=with_batch(detail, batch),
            actor=ctx.actor.user,
            actor_address=ctx.actor.address,
        )
    )


def events(
    ctx: StoreContext, limit: int = 50, *, key: str = "", actor: str = "", action: str = ""
) -> list[Event]:
    """Return the newest events first, optionally only those whose key (owner, name or
    public id), actor or action contains the given text (case-insensitive)."""
    conditions: list[Any] = []
    filters: list[tuple[str, tuple[Any, ...]]] = [
        (key, (EventRow.owner, EventRow.key_name, EventRow.public_id)),
        (actor, (EventRow.actor, EventRow.actor_address)),
        (action, (EventRow.action,)),
    ]
    for text, columns in filters:
        if text.strip():
            pattern = like_pattern(text.strip().lower())
            conditions.append(
                or_(*(func.lower(col(c)).like(pattern, escape="\\") for c in columns))
            )
    query = select(EventRow).where(*conditions).order_by(col(EventRow.id).desc())
    with ctx.session() as session:
        return [event_of(r) for r in session.exec(query.limit(limit))]


def event_of(r: EventRow) -> Event:
    """The event of a row."""
    return Event(
        r.id or 0,
        r.at,
        r.action,
        r.owner,
        r.key_name,
        r.public_id,
        r.scope,
        r.detail,
        r.actor,
        r.actor_address,
    )


def key_detail(ctx: StoreContext, owner: str, name: str, limit: int = 100) -> KeyDetail:
    """Return a key, the event that created or last recreated it, and its newest events.

    Events are matched by owner and name, so a key deleted and created again under the same
    name shares its history with the earlier one; and by the key's public ids (current and
    earlier), so a key transferred from another owner keeps the history it had there.
    """
    newest = col(EventRow.id).desc()
    with ctx.session() as session:
        row = key_row(session, owner, name)
        info = read_info(session, row, ctx.clock())
        ids = [
            row.public_id,
            *session.exec(select(PreviousIdRow.public_id).where(PreviousIdRow.key_id == row.id)),
        ]
        named = and_(col(EventRow.owner) == owner, col(EventRow.key_name) == name)
        mine = (or_(named, col(EventRow.public_id).in_(ids)),)
        origin = session.exec(
            select(EventRow)
            .where(*mine, col(EventRow.action).in_(("key.create", "key.recreate", "key.rotate")))
            .order_by(newest)
            .limit(1)
        ).first()
        rows = session.exec(select(EventRow).where(*mine).order_by(newest).limit(limit))
        found = tuple(event_of(r) for r in rows)
    return KeyDetail(info, event_of(origin) if origin else None, found)


def change_marker(ctx: StoreContext) -> tuple[int, datetime | None]:
    """A cheap value that changes whenever keys change (newest event) or are used."""
    with ctx.session() as session:
        newest = session.exec(select(func.max(EventRow.id))).one()
        used = session.exec(select(func.max(KeyRow.last_used_at))).one()
    return (newest or 0, used)
