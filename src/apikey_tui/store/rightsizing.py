"""Right-sizing: drop the scopes a key never used in a window (least scope, from observed use)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select

from apikey_tui.db import database_errors
from apikey_tui.db.models import USAGE_ALLOWED, USAGE_WRONG_SECRET
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import KEY_TABLE
from apikey_tui.store.types import KeyInfo
from apikey_tui.store.usage import (
    DEFAULT_WINDOW,
    ForbiddenUse,
    U,
    keys_by_id,
    minute_of,
    owned_by,
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
    Reads follow the traffic: the keys with counts in the window, not every key.
    """
    now = ctx.clock()
    since = window_start(now, window)
    first = minute_of(since)
    old_enough = now - window
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        owned = owned_by(owner)
        query = (
            select(U.public_id, U.kind, U.scope, func.sum(U.requests))
            .where(U.minute >= first, U.kind != USAGE_WRONG_SECRET)
            .group_by(U.public_id, U.kind, U.scope)
        )
        if owned is not None:
            query = query.where(owned)
        if name is not None:
            mine = and_(KEY_TABLE.c.owner == owner, KEY_TABLE.c.name == name)
            query = query.where(
                or_(
                    U.public_id.in_(select(KEY_TABLE.c.public_id).where(mine)),
                    U.public_id.in_(select(KEY_TABLE.c.old_public_id).where(mine)),
                )
            )
        used: dict[str, dict[str, int]] = {}
        refused: dict[str, dict[str, int]] = {}
        for public_id, kind, scope_set, n in conn.execute(query):
            if kind == USAGE_ALLOWED:
                per_scope = used.setdefault(public_id, {})
                for scope in scope_set.split():  # counted under every scope it needed
                    per_scope[scope] = per_scope.get(scope, 0) + int(n)
            else:
                refused.setdefault(public_id, {})[scope_set] = int(n)
        keys = keys_by_id(conn, set(used) | set(refused), now)
    proposals: dict[str, Proposal] = {}
    refusals: dict[str, Refused] = {}
    for info in {k.public_id: k for k in keys.values()}.values():
        if name is not None and (info.owner, info.name) != (owner, name):
            continue
        ids = [i for i in (info.public_id, info.old_public_id) if i]
        counts: dict[str, int] = {}
        gaps: dict[str, int] = {}
        for i in ids:
            for scope, n in used.get(i, {}).items():
                counts[scope] = counts.get(scope, 0) + n
            for scope, n in refused.get(i, {}).items():
                gaps[scope] = gaps.get(scope, 0) + n
        if gaps:
            missing = sorted(
                (ForbiddenUse(tuple(s.split()), n) for s, n in gaps.items()),
                key=lambda f: (-f.requests, f.missing),
            )
            refusals[info.public_id] = Refused(info, tuple(missing))
        keep = tuple(s for s in info.scopes if counts.get(s, 0) > 0)
        drop = tuple(s for s in info.scopes if counts.get(s, 0) == 0)
        if info.created_at <= old_enough and keep and drop:
            would = sum(counts.get(s, 0) for s in drop)
            proposals[info.public_id] = Proposal(info, drop, keep, would)

    def order(value: Proposal | Refused) -> tuple[str, str]:
        return (value.info.owner, value.info.name)

    return Rightsizing(
        since,
        tuple(sorted(proposals.values(), key=order)),
        tuple(sorted(refusals.values(), key=order)),
    )
