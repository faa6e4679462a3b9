"""How much of each limit the current window has used, read from the store of counts."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import select

from apikey_tui.config import LIMITS_URL_ENV, resolve_limits_url
from apikey_tui.errors import ApiKeyError
from apikey_tui.limits.model import (
    AppliedLimit,
    Limit,
    key_subject,
    limits_of_text,
    owner_subject,
)
from apikey_tui.limits.port import CountReader
from apikey_tui.limits.where import open_store
from apikey_tui.store import owner_limits
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import KEY_TABLE
from apikey_tui.store.types import KeyInfo

Of = Literal["key", "owner"]
NEAR_SHARE = 0.8  # a limit this much used (or more) in its current window is "near"
# The near-limit read asks the store of counts once per limit: it looks at the first this
# many limited keys (by owner and name) and owners' pools, and says when there were more.
NEAR_CHECK_MAX = 200


@dataclass(frozen=True)
class LimitUse:
    """One limit and its use in the current window: `used` is None when the store of counts
    could not be asked. Use counts the tokens verifiers were granted (leases), so it may be up
    to a lease per verifier process above the requests admitted."""

    limit: Limit
    of: Of  # the key's own limit, or its owner's pool
    used: int | None
    window_ends: datetime | None

    @property
    def near(self) -> bool:
        """Whether the window has used NEAR_SHARE of the limit or more."""
        return self.reaches(NEAR_SHARE)

    def reaches(self, share: float) -> bool:
        """Whether the window has used `share` of the limit or more (the one rule of "near":
        the app's NEAR_SHARE, or the share `keys near-limits --threshold` gives)."""
        return self.used is not None and self.used >= share * self.limit.count


@dataclass(frozen=True)
class LimitUses:
    """The uses of some limits, and why they are unknown ('' when they were read)."""

    uses: tuple[LimitUse, ...]
    unknown: str = ""


@dataclass(frozen=True)
class NearLimit:
    """A key (or an owner's pool: name None) at NEAR_SHARE of a limit or more, now."""

    owner: str
    name: str | None
    use: LimitUse


@dataclass(frozen=True)
class NearLimits:
    """The keys and pools near a limit, fullest first; `more`: there were more limited keys
    or pools than the read was bounded to, and the rest were not read; `unknown`: why none
    could be."""

    near: tuple[NearLimit, ...]
    more: bool = False
    unknown: str = ""


def _counts(ctx: StoreContext) -> tuple[CountReader, str]:
    """The store of counts ($APIKEY_TUI_LIMITS_URL, else the key database), opened once, and
    where it is (password masked)."""
    if ctx.limit_counts is None:
        ctx.limit_counts = open_store(ctx.engine, resolve_limits_url(None), clock=ctx.clock)
    return ctx.limit_counts


def _read(ctx: StoreContext, limits: list[tuple[Of, str, Limit]]) -> LimitUses:
    """Each (of, subject, limit) with its use; at the first failure the rest are unknown."""
    if not limits:
        return LimitUses(())
    found: list[LimitUse] = []
    unknown = ""
    try:
        counts, where = _counts(ctx)
        # A store no verifier counts in reads 0 everywhere: an admin whose shell lacks the
        # services' APIKEY_TUI_LIMITS_URL (or has one they lack) would read an all-clear.
        if not counts.counted():
            unknown = (
                f"no verifier has counted a limit in {where} yet; if your services count"
                f" elsewhere, set {LIMITS_URL_ENV} as they have it"
            )
    except (ApiKeyError, ImportError) as exc:  # a bad URL, or the redis extra not installed
        unknown = str(exc) if isinstance(exc, ApiKeyError) else "redis-py is not installed"
    for of, subject, limit in limits:
        used: int | None = None
        ends: datetime | None = None
        if not unknown:
            try:
                used, end = counts.window_use(AppliedLimit(subject, limit).key, limit.seconds)
                ends = datetime.fromtimestamp(end, UTC)
            except ApiKeyError as exc:  # StoreUnavailableError: one line, URL masked
                unknown = str(exc)
        found.append(LimitUse(limit, of, used, ends))
    return LimitUses(tuple(found), unknown)


def key_limit_use(ctx: StoreContext, info: KeyInfo) -> LimitUses:
    """The key's own limits, then its owner's pool, each with its use in the current window."""
    pool = owner_limits.owner_limits(ctx, info.owner)
    return _read(
        ctx,
        [("key", key_subject(info.owner, info.name), x) for x in info.limits]
        + [("owner", owner_subject(info.owner), x) for x in pool],
    )


def owner_limit_use(ctx: StoreContext, owner: str) -> LimitUses:
    """The owner's pool, each limit with its use in the current window."""
    pool = owner_limits.owner_limits(ctx, owner)
    return _read(ctx, [("owner", owner_subject(owner), x) for x in pool])


def near_limits(
    ctx: StoreContext,
    *,
    owner: str | None = None,
    share: float = NEAR_SHARE,
    most: int | None = NEAR_CHECK_MAX,
) -> NearLimits:
    """Keys and owners' pools (of one owner, or all) at `share` of a limit or more now.

    One database read lists the limited keys (the first `most` by owner and name; None: all)
    and one the pools; then one store-of-counts read per limit (about 0.1 ms each). The app
    bounds the read (NEAR_CHECK_MAX); `keys near-limits` reads them all.
    """
    key = KEY_TABLE.c
    query = select(key.owner, key.name, key.limits).where(key.limits.is_not(None))
    if owner is not None:
        query = query.where(key.owner == owner)
    query = query.order_by(key.owner, key.name)
    if most is not None:
        query = query.limit(most + 1)
    with ctx.session() as session:
        rows = session.execute(query).all()
    pools = owner_limits.owners_with_limits(ctx)
    if owner is not None:
        pools = {owner: pools[owner]} if owner in pools else {}
    subjects: list[tuple[str, str | None]] = [(r.owner, r.name) for r in rows]
    subjects += [(o, None) for o in sorted(pools)]
    more = most is not None and len(subjects) > most
    subjects = subjects if most is None else subjects[:most]
    by_row = {(r.owner, r.name): limits_of_text(r.limits) for r in rows}
    asked: list[tuple[Of, str, Limit]] = []
    whose: list[tuple[str, str | None]] = []
    for who, name in subjects:
        of: Of = "owner" if name is None else "key"
        if name is None:
            limits, subject = pools[who], owner_subject(who)
        else:
            limits, subject = by_row[(who, name)], key_subject(who, name)
        for limit in limits:
            asked.append((of, subject, limit))
            whose.append((who, name))
    read = _read(ctx, asked)
    near = [
        NearLimit(o, n, use)
        for (o, n), use in zip(whose, read.uses, strict=True)
        if use.reaches(share)
    ]
    near.sort(key=lambda x: (-(x.use.used or 0) / x.use.limit.count, x.owner, x.name or ""))
    return NearLimits(tuple(near), more, read.unknown)
