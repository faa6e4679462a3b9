"""The key table's first window from a SQLite file through sqlite3, before SQLAlchemy is loaded."""

# The terminal app paints its first rows from this read while SQLAlchemy, SQLModel and the store
# are still to be imported (importing them costs as much as starting Textual); the store then
# takes over and reads the same window again. It is the store's own read, not a second one: the
# statements are the store's, as SQLAlchemy compiles them for SQLite (tests/test_first_window.py
# holds each equal to what `queries.key_window` and `schema.found_version` execute), and each row
# becomes a key through `key_rows.key_info`, as the store's rows do.
#
# Only the plainest case is read here, and any doubt answers None (the caller takes the normal
# way): the file opens read-only and is never created; its schema must be exactly this release's;
# a stored time must read as SQLAlchemy reads it; any sqlite3 error declines.

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from apikey_tui import SCHEMA_VERSION
from apikey_tui.store.key_rows import INFO_COLUMN_NAMES, key_info
from apikey_tui.store.types import KeyInfo

_SELECT = (
    "SELECT "
    + ", ".join(f"apikey_tui_key.{column}" for column in INFO_COLUMN_NAMES)
    + " \nFROM apikey_tui_key"
)
# queries.key_window(KeyQuery(owner), 0, limit): one owner's keys by name; with every owner's,
# by name then owner. Parameters: (owner, limit, 0), or (limit, 0).
OWNER_WINDOW_SQL = (
    f"{_SELECT} \nWHERE apikey_tui_key.owner = ? "
    "ORDER BY apikey_tui_key.name ASC\n LIMIT ? OFFSET ?"
)
ALL_WINDOW_SQL = (
    f"{_SELECT} ORDER BY apikey_tui_key.name ASC, apikey_tui_key.owner ASC\n LIMIT ? OFFSET ?"
)
# queries._scopes for the window's key ids: "{}" takes one "?" per id.
SCOPES_SQL = (
    "SELECT apikey_tui_key_scope.key_id, apikey_tui_key_scope.scope \n"
    "FROM apikey_tui_key_scope \n"
    "WHERE apikey_tui_key_scope.key_id IN ({}) "
    "ORDER BY apikey_tui_key_scope.key_id, apikey_tui_key_scope.scope"
)
# schema.found_version's read of the Alembic revision: exactly one row, this release's.
VERSION_SQL = "SELECT apikey_tui_alembic_version.version_num \nFROM apikey_tui_alembic_version"
_BUSY_SECONDS = 0.1  # a writer holding the file: the normal way waits, this one declines


class _Row(NamedTuple):
    """A key's row as key_info reads it (the INFO_COLUMNS), its times made aware UTC."""

    id: int
    owner: str
    name: str
    public_id: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    old_public_id: str | None
    grace_until: datetime | None
    limits: str | None
    networks: str | None
    created_by: str | None
    meta: str | None
    tags: str | None


def first_window(path: str, owner: str | None, limit: int, now: datetime) -> list[KeyInfo] | None:
    """The first `limit` keys of owner (None: every owner's) by name, as the store would read
    them at now; None when this read cannot vouch for that (the caller then asks the store)."""
    try:
        uri = f"{Path(path).resolve().as_uri()}?mode=ro"  # read-only: never creates the file
        with closing(sqlite3.connect(uri, uri=True, timeout=_BUSY_SECONDS)) as conn:
            revisions = conn.execute(VERSION_SQL).fetchall()
            if revisions != [(f"{SCHEMA_VERSION:04d}",)]:
                return None  # another version, or none: the store says what to do
            if owner is None:
                found = conn.execute(ALL_WINDOW_SQL, (limit, 0)).fetchall()
            else:
                found = conn.execute(OWNER_WINDOW_SQL, (owner, limit, 0)).fetchall()
            rows = [_row(values) for values in found]
            scopes: dict[int, list[str]] = {}
            if rows:
                ids = [row.id for row in rows]
                statement = SCOPES_SQL.format(", ".join("?" * len(ids)))
                for key_id, scope in conn.execute(statement, ids):
                    scopes.setdefault(key_id, []).append(scope)
    except (sqlite3.Error, OSError, ValueError, TypeError):
        return None
    return [key_info(row, scopes.get(row.id, ()), now) for row in rows]


def _row(values: Sequence[Any]) -> _Row:
    """A fetched row with its times read as the store reads them; ValueError or TypeError on
    anything else (a time that is not text in SQLAlchemy's form, a column of another type)."""
    row = _Row(*values)
    created = _time(row.created_at)
    if created is None or not isinstance(row.id, int):
        raise ValueError("a key's row without its id or creation time")
    return row._replace(
        created_at=created,
        last_used_at=_time(row.last_used_at),
        expires_at=_time(row.expires_at),
        disabled_at=_time(row.disabled_at),
        grace_until=_time(row.grace_until),
    )


def _time(value: object) -> datetime | None:
    """A stored time as the store's UTCDateTime reads it on SQLite: naive text, taken as UTC."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("a stored time that is not text")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is not None:  # SQLAlchemy writes none; one here is someone else's row
        raise ValueError("a stored time with a zone")
    return moment.replace(tzinfo=UTC)
