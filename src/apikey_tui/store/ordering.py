"""The table's orders and keyset bounds: where a key stands in a KeyQuery's order.

Most orders are columns with an index. Three are computed, row by row, at the moment of the
read (`now`, the store clock's, a bound parameter): State (urgency, then expiry: `states`),
Expires (never expiring last) and Scopes (how many, the broadest last). No index can give
those, so the database sorts the matching rows for each window: milliseconds at 10,000 keys
(`benchmarks/bench_table_sorts.py`), about a second at a million.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, false, func, literal, or_
from sqlalchemy import select as sa_select

from apikey_tui.db.models import UTCDateTime
from apikey_tui.store import states
from apikey_tui.store.records import KEY_TABLE, SCOPE_TABLE
from apikey_tui.store.types import KeyInfo, KeyQuery

# "Never expires" sorts after every expiry (names.check_expiry keeps those within 100 years).
NEVER = datetime(9999, 12, 31, tzinfo=UTC)
_COMPUTED = ("urgency", "expiry", "scope_count")


def sort_columns(query: KeyQuery) -> list[str]:
    """The terms of query's order, most significant first; the last makes it total."""
    tie = ["owner", "name"]  # (owner, name) is unique: any key's row says where it stands
    return {
        # With one owner (fixed by the WHERE), the unique (owner, name) index gives the order.
        "owner": ["name"] if query.owner is not None else ["owner", "name"],
        "name": ["name"] if query.owner is not None else ["name", "owner"],
        "public_id": ["public_id"],
        "created": ["created_at", *tie],
        "last_used": ["last_used_at", *tie],  # never used counts as the oldest
        "state": ["urgency", "expiry", *tie],  # the soonest expiry first within a state
        "expires": ["expiry", *tie],
        "scopes": ["scope_count", *tie],
    }[query.sort]


def computed(query: KeyQuery) -> bool:
    """Whether query's order is computed per row (no index gives it)."""
    return sort_columns(query)[0] in _COMPUTED


def term(name: str, now: datetime) -> Any:
    """The SQL expression of an order's term at now."""
    if name == "urgency":
        return states.urgency_sql(now)
    if name == "expiry":
        return func.coalesce(KEY_TABLE.c.expires_at, literal(NEVER, UTCDateTime()))
    if name == "scope_count":
        scope = SCOPE_TABLE
        return (
            sa_select(func.count())
            .select_from(scope)
            .where(scope.c.key_id == KEY_TABLE.c.id)
            .scalar_subquery()
        )
    return KEY_TABLE.c[name]


def order(query: KeyQuery, now: datetime, *, reverse: bool) -> list[Any]:
    """ORDER BY terms of query's order at now (reverse: backwards)."""
    terms = []
    for name in sort_columns(query):
        column = term(name, now)
        ordered = column.desc() if reverse else column.asc()
        if name == "last_used_at":  # the same place on SQLite and PostgreSQL
            ordered = ordered.nulls_last() if reverse else ordered.nulls_first()
        terms.append(ordered)
    return terms


def sort_values(key: KeyInfo, now: datetime) -> dict[str, Any]:
    """The values of a key that any order reads, at now."""
    return {
        "owner": key.owner,
        "name": key.name,
        "public_id": key.public_id,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "urgency": states.urgency(key, now),
        "expiry": key.expires_at if key.expires_at is not None else NEVER,
        "scope_count": len(key.scopes),
    }


def before(
    query: KeyQuery, values: Mapping[str, Any], now: datetime, *, reverse: bool | None = None
) -> Any:
    """Rows that come before a row with these values in query's order (reverse: after it)."""
    names = sort_columns(query)
    backwards = query.reverse if reverse is None else reverse
    alternatives = []
    for i, name in enumerate(names):
        equal = [_equal(n, values[n], now) for n in names[:i]]
        alternatives.append(and_(*equal, _less(name, values[name], backwards, now)))
    first, value = term(names[0], now), values[names[0]]
    if value is None:
        return or_(*alternatives)
    # Implied by the alternatives, but spelled out so that the planner seeks in the index of
    # the order's first column instead of scanning it.
    bound = first >= value if backwards else first <= value
    if names[0] == "last_used_at" and not backwards:
        bound = or_(first.is_(None), bound)
    return and_(bound, or_(*alternatives))


def _equal(name: str, value: Any, now: datetime) -> Any:
    column = term(name, now)
    return column.is_(None) if value is None else column == value


def _less(name: str, value: Any, reverse: bool, now: datetime) -> Any:
    """Strictly before value in this term's direction (never used is the oldest last use)."""
    column = term(name, now)
    if name != "last_used_at":
        return column > value if reverse else column < value
    if not reverse:  # NULL first, then rising
        return false() if value is None else or_(column.is_(None), column < value)
    return column.is_not(None) if value is None else column > value  # falling, NULL last
