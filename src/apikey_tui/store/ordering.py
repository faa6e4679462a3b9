"""The table's orders and keyset bounds: where a key stands in a KeyQuery's order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import and_, false, or_

from apikey_tui.store.records import KEY_TABLE
from apikey_tui.store.types import KeyInfo, KeyQuery


def sort_columns(query: KeyQuery) -> list[str]:
    """The columns of query's order, most significant first; the last makes it total."""
    return {
        # With one owner (fixed by the WHERE), the unique (owner, name) index gives the order.
        "owner": ["name"] if query.owner is not None else ["owner", "name"],
        "name": ["name"] if query.owner is not None else ["name", "owner"],
        "public_id": ["public_id"],
        # (owner, name) is unique: it breaks ties, and any key's row says where it stands.
        "created": ["created_at", "owner", "name"],
        "last_used": ["last_used_at", "owner", "name"],  # never used counts as the oldest
    }[query.sort]


def order(query: KeyQuery, *, reverse: bool) -> list[Any]:
    """ORDER BY terms of query's order (reverse: backwards)."""
    terms = []
    for name in sort_columns(query):
        column = KEY_TABLE.c[name]
        term = column.desc() if reverse else column.asc()
        if name == "last_used_at":  # the same place on SQLite and PostgreSQL
            term = term.nulls_last() if reverse else term.nulls_first()
        terms.append(term)
    return terms


def sort_values(key: KeyInfo) -> dict[str, Any]:
    """The values of a key that any order reads."""
    return {
        "owner": key.owner,
        "name": key.name,
        "public_id": key.public_id,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
    }


def before(query: KeyQuery, values: Mapping[str, Any], *, reverse: bool | None = None) -> Any:
    """Rows that come before a row with these values in query's order (reverse: after it)."""
    names = sort_columns(query)
    backwards = query.reverse if reverse is None else reverse
    alternatives = []
    for i, name in enumerate(names):
        equal = [_equal(n, values[n]) for n in names[:i]]
        alternatives.append(and_(*equal, _less(name, values[name], backwards)))
    first, value = KEY_TABLE.c[names[0]], values[names[0]]
    if value is None:
        return or_(*alternatives)
    # Implied by the alternatives, but spelled out so that the planner seeks in the index of
    # the order's first column instead of scanning it.
    bound = first >= value if backwards else first <= value
    if names[0] == "last_used_at" and not backwards:
        bound = or_(first.is_(None), bound)
    return and_(bound, or_(*alternatives))


def _equal(name: str, value: Any) -> Any:
    column = KEY_TABLE.c[name]
    return column.is_(None) if value is None else column == value


def _less(name: str, value: Any, reverse: bool) -> Any:
    """Strictly before value in this column's direction (never used is the oldest last use)."""
    column = KEY_TABLE.c[name]
    if name != "last_used_at":
        return column > value if reverse else column < value
    if not reverse:  # NULL first, then rising
        return false() if value is None else or_(column.is_(None), column < value)
    return column.is_not(None) if value is None else column > value  # falling, NULL last
