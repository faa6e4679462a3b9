"""Where a key was used from, and what its network rules refused or would have: read from usage."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select

from apikey_tui.db import database_errors
from apikey_tui.db.models import USAGE_FROM, USAGE_NETWORK, USAGE_SHADOW
from apikey_tui.errors import InvalidInputError, KeyNotFoundError, KeyStateError
from apikey_tui.networks import Cidr, NetworkRules, covering, parse_cidr
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import KEY_TABLE
from apikey_tui.store.usage import U, minute_of, moment_of, previous_ids

DEFAULT_DAYS = 30  # how far back a proposal looks, unless told
DAYS_MAX = 3650
RECENT_MAX = 20  # refusals and would-be refusals listed, newest first
MORE_NETWORKS = "*"  # use_counts.MORE_NETWORKS: a verifier saw more networks than it records


@dataclass(frozen=True)
class NetworkRefusal:
    """Requests from one network to one route refused (or, in shadow, that would have been),
    the newest in the minute `last`."""

    network: str
    route: str
    requests: int
    last: datetime
    shadow: bool

    def to_json(self) -> dict[str, Any]:
        """The refusal as a JSON-ready dict."""
        return {
            "network": self.network,
            "route": self.route,
            "requests": self.requests,
            "last": self.last.isoformat(),
            "shadow": self.shadow,
        }


@dataclass(frozen=True)
class NetworkUse:
    """A key's networks in the last `days` days: where it was used from (each a /24 or /56),
    whether verifiers saw more than they record, and its recent refusals for the network."""

    days: int
    came_from: tuple[Cidr, ...]
    more: bool
    refusals: tuple[NetworkRefusal, ...]

    @property
    def proposal(self) -> tuple[Cidr, ...]:
        """The smallest list of networks covering every recorded one, none wider."""
        return covering(self.came_from)

    def to_json(self) -> dict[str, Any]:
        """The use as a JSON-ready dict."""
        return {
            "days": self.days,
            "came_from": [str(c) for c in self.came_from],
            "more_than_recorded": self.more,
            "proposal": [str(c) for c in self.proposal],
            "refusals": [r.to_json() for r in self.refusals if not r.shadow],
            "would_refuse": [r.to_json() for r in self.refusals if r.shadow],
        }


def check_days(days: int) -> int:
    """A proposal's look-back in days: 1 to DAYS_MAX."""
    if not 1 <= days <= DAYS_MAX:
        raise InvalidInputError(f"--days must be 1 to {DAYS_MAX}")
    return days


def network_use(ctx: StoreContext, owner: str, name: str, days: int = DEFAULT_DAYS) -> NetworkUse:
    """The key's networks in the last `days` days (store clock), under every id it had."""
    check_days(days)
    first = minute_of(ctx.clock() - timedelta(days=days))
    key = KEY_TABLE.c
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        row = conn.execute(
            select(key.id, key.public_id).where(and_(key.owner == owner, key.name == name))
        ).first()
        if row is None:
            raise KeyNotFoundError(owner, name)
        ids = [row.public_id, *(p for p, _ in previous_ids(conn, [row.id]).get(row.id, []))]
        where = (U.public_id.in_(ids), U.minute >= first)
        networks = conn.execute(
            select(U.scope).where(*where, U.kind == USAGE_FROM).group_by(U.scope)
        ).scalars()
        refused = conn.execute(
            select(U.kind, U.scope, func.sum(U.requests), func.max(U.minute))
            .where(*where, U.kind.in_((USAGE_NETWORK, USAGE_SHADOW)))
            .group_by(U.kind, U.scope)
            .order_by(func.max(U.minute).desc())
            .limit(RECENT_MAX)
        ).all()
        seen = list(networks)
    came_from: set[Cidr] = set()
    more = False
    for text in seen:
        if text == MORE_NETWORKS:
            more = True
            continue
        try:
            came_from.add(parse_cidr(text))
        except InvalidInputError:
            more = True  # a row we cannot read: the proposal cannot claim to cover it
    refusals = tuple(
        NetworkRefusal(*_split(scope), int(n), moment_of(int(last)), kind == USAGE_SHADOW)
        for kind, scope, n, last in refused
    )
    return NetworkUse(days, tuple(sorted(came_from, key=lambda c: c.start)), more, refusals)


def _split(scope: str) -> tuple[str, str]:
    network, _, route = scope.partition(" ")
    return network, route


def proposed_rules(use: NetworkUse, mode: str = "shadow") -> NetworkRules:
    """The proposal as rules to apply (allow only); KeyStateError (a refusal, exit 1: the
    input is fine, the key has no use to go by) when there is nothing."""
    if not use.came_from:
        raise KeyStateError(
            f"no use recorded in the last {use.days} days: nothing to propose (try --days)"
        )
    return NetworkRules(mode, use.proposal, ())
