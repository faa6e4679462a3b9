"""Right-sizing: drop the scopes a key never used in a window (least scope, from observed use)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, func, literal, or_, select, tuple_

from apikey_tui.db import database_errors
from apikey_tui.db.models import USAGE_ALLOWED, USAGE_FORBIDDEN, UsageTable
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import INFO_COLUMNS, KEY_TABLE, SCOPE_TABLE, key_info
from apikey_tui.store.types import DEFAULT_WINDOW, KeyInfo
from apikey_tui.store.usage import (
    PREVIOUS,
    ForbiddenUse,
    P,
    U,
    chunks,
    gathered_by_id,
    ids_of,
    minute_of,
    owned_by,
    previous_ids,
    window_start,
)


@dataclass(frozen=True)
class Proposal:
    """Narrow a key to the scopes it used in the window; would_refuse: requests in the window
    the narrower key would have refused (0 for scopes never used, which are all it drops)."""

    info: KeyInfo
    drop: tuple[str, ...]
    keep: tuple[str, ...]
    would_refuse: int

    def to_json(self) -> dict[str, Any]:
        """One entry of `keys rightsize --json`'s "proposals"."""
        return {
            "owner": self.info.owner,
            "name": self.info.name,
            "public_id": self.info.public_id,
            "drop": list(self.drop),
            "keep": list(self.keep),
            "would_refuse": self.would_refuse,
        }


@dataclass(frozen=True)
class Refused:
    """A key that was refused (403) in the window for scopes it lacks."""

    info: KeyInfo
    missing: tuple[ForbiddenUse, ...]

    def to_json(self) -> dict[str, Any]:
        """One entry of `keys rightsize --json`'s "refused"."""
        return {
            "owner": self.info.owner,
            "name": self.info.name,
            "public_id": self.info.public_id,
            "missing": [m.to_json() for m in self.missing],
        }


@dataclass(frozen=True)
class Rightsizing:
    """Proposals for keys older than the window, and the keys refused for a missing scope."""

    since: datetime
    proposals: tuple[Proposal, ...]
    refused: tuple[Refused, ...]


PAGE = 500  # candidate keys read at a time, in (owner, name) order (at most)


def rightsize(
    ctx: StoreContext,
    window: timedelta = DEFAULT_WINDOW,
    *,
    owner: str | None = None,
    name: str | None = None,
) -> Rightsizing:
    """Proposals to drop the scopes keys older than the window never used in it.

    Only a key that used some scope in the window gets a proposal (it keeps at least one
    scope: a key unused altogether is a candidate for deletion, not narrowing). A key younger
    than the window gets none. Also lists the keys refused in the window for a missing scope.
    """
    now = ctx.clock()
    found = _walk(ctx, now, window, owner, name, None)
    return Rightsizing(
        window_start(now, window),
        tuple(sorted(found, key=_order)),
        tuple(sorted(_refusals(ctx, now, window, owner, name), key=_order)),
    )


def _order(value: Proposal | Refused) -> tuple[str, str]:
    return (value.info.owner, value.info.name)


def proposals(
    ctx: StoreContext,
    window: timedelta = DEFAULT_WINDOW,
    *,
    owner: str | None = None,
    name: str | None = None,
    limit: int | None = None,
) -> tuple[Proposal, ...]:
    """The first `limit` proposals (None: every one) in the database's (owner, name) order.

    Walks the keys in that order (the unique index), a page at a time, and reads usage only
    for the candidates: keys older than the window, with two scopes or more, and an allowed
    request in it (the database tests each key against the usage index). The first proposals
    take milliseconds however many keys and rows there are; all of them, one probe per key.
    """
    return _walk(ctx, ctx.clock(), window, owner, name, limit)


def _walk(
    ctx: StoreContext,
    now: datetime,
    window: timedelta,
    owner: str | None,
    name: str | None,
    limit: int | None,
) -> tuple[Proposal, ...]:
    first = minute_of(window_start(now, window))
    found: list[Proposal] = []
    after: tuple[str, str] | None = None
    # A first page of a few candidates for a few proposals, doubling up to PAGE.
    page = PAGE if limit is None else min(PAGE, max(limit, 1))
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        while limit is None or len(found) < limit:
            query = _candidates(first, now - window, owner, name, after, page)
            rows = conn.execute(query).all()
            found += _proposals_of(conn, rows, first, now)
            if len(rows) < page:
                break
            after = (rows[-1].owner, rows[-1].name)
            page = min(PAGE, page * 2)
    return tuple(found if limit is None else found[:limit])


def _candidates(
    first: int,
    old_enough: datetime,
    owner: str | None,
    name: str | None,
    after: tuple[str, str] | None,
    page: int,
) -> Any:
    """The next `page` keys that may get a proposal, after `after` in (owner, name) order."""
    key = KEY_TABLE.c

    in_window = (U.minute >= first, U.kind == USAGE_ALLOWED)
    used = select(literal(1)).where(U.public_id == key.public_id, *in_window).exists()
    # ... or used by a secret the key had before (an old secret's use is the key's).
    used_before = (
        select(literal(1))
        .select_from(PREVIOUS.join(UsageTable, U.public_id == P.public_id))
        .where(P.key_id == key.id, *in_window)
        .exists()
    )
    scopes = select(func.count()).where(SCOPE_TABLE.c.key_id == key.id).scalar_subquery()
    query = select(*INFO_COLUMNS).where(
        key.created_at <= old_enough, scopes >= 2, or_(used, used_before)
    )
    if owner is not None:
        query = query.where(key.owner == owner)
    if name is not None:
        query = query.where(key.name == name)
    if after is not None:
        query = query.where(tuple_(key.owner, key.name) > tuple_(*after))
    return query.order_by(key.owner, key.name).limit(page)


def _proposals_of(
    conn: Connection, rows: Sequence[Any], first: int, now: datetime
) -> list[Proposal]:
    """The proposals among these key rows (INFO_COLUMNS), in their order."""
    previous = previous_ids(conn, [row.id for row in rows])
    every: dict[int, list[str]] = {
        row.id: [row.public_id, *(i for i, _ in previous.get(row.id, ()))] for row in rows
    }
    ids = {i for key_ids in every.values() for i in key_ids}
    used: dict[str, dict[str, int]] = {}
    for chunk in chunks(ids):
        query = (
            select(U.public_id, U.scope, func.sum(U.requests))
            .where(U.public_id.in_(chunk), U.minute >= first, U.kind == USAGE_ALLOWED)
            .group_by(U.public_id, U.scope)
        )
        for public_id, scope_set, n in conn.execute(query):
            per_scope = used.setdefault(public_id, {})
            for scope in scope_set.split():  # counted under every scope it needed
                per_scope[scope] = per_scope.get(scope, 0) + int(n)
    held: dict[int, list[str]] = {}
    query = (
        select(SCOPE_TABLE.c.key_id, SCOPE_TABLE.c.scope)
        .where(SCOPE_TABLE.c.key_id.in_([row.id for row in rows]))  # PAGE ids at most
        .order_by(SCOPE_TABLE.c.key_id, SCOPE_TABLE.c.scope)
    )
    for entry in conn.execute(query):
        held.setdefault(entry.key_id, []).append(entry.scope)
    found = []
    for row in rows:
        counts: dict[str, int] = {}
        for i in every[row.id]:
            for scope, n in used.get(i, {}).items():
                counts[scope] = counts.get(scope, 0) + n
        scopes = held.get(row.id, [])
        keep = tuple(s for s in scopes if counts.get(s, 0) > 0)
        drop = tuple(s for s in scopes if counts.get(s, 0) == 0)
        if keep and drop:
            info = key_info(row, scopes, now)
            found.append(Proposal(info, drop, keep, sum(counts.get(s, 0) for s in drop)))
    return found


def _refusals(
    ctx: StoreContext, now: datetime, window: timedelta, owner: str | None, name: str | None
) -> list[Refused]:
    """The keys refused (403) in the window for scopes they lack, and how often for which."""
    first = minute_of(window_start(now, window))
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        query = (
            select(U.public_id, U.scope, func.sum(U.requests))
            .where(U.minute >= first, U.kind == USAGE_FORBIDDEN)
            .group_by(U.public_id, U.scope)
        )
        owned = owned_by(owner)
        if owned is not None:
            query = query.where(owned)
        if name is not None:
            mine = and_(KEY_TABLE.c.owner == owner, KEY_TABLE.c.name == name)
            query = query.where(U.public_id.in_(ids_of(mine)))
        refused: dict[str, dict[str, int]] = {}
        for public_id, scope_set, n in conn.execute(query):
            refused.setdefault(public_id, {})[scope_set] = int(n)
        keys = gathered_by_id(conn, refused, now)
    found = []
    for key in {k.info.public_id: k for k in keys.values()}.values():
        info = key.info
        if name is not None and (info.owner, info.name) != (owner, name):
            continue
        gaps: dict[str, int] = {}
        for i in key.ids:
            for scope, n in refused.get(i, {}).items():
                gaps[scope] = gaps.get(scope, 0) + n
        missing = sorted(
            (ForbiddenUse(tuple(s.split()), n) for s, n in gaps.items()),
            key=lambda f: (-f.requests, f.missing),
        )
        found.append(Refused(info, tuple(missing)))
    return found
