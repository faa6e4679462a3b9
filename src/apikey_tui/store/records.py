"""Rows into KeyInfo: the one place a stored key becomes what may be known about it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, Table, and_
from sqlmodel import Session, select

from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.errors import KeyChangedError, KeyNotFoundError
from apikey_tui.store.key_rows import INFO_COLUMN_NAMES
from apikey_tui.store.key_rows import in_grace as in_grace  # re-exported: its callers' home
from apikey_tui.store.key_rows import key_info as key_info
from apikey_tui.store.types import KeyInfo

KEY_TABLE: Table = KeyRow.__table__  # type: ignore[attr-defined]
SCOPE_TABLE: Table = KeyScopeRow.__table__  # type: ignore[attr-defined]
# What a KeyInfo is read from (with the id, to find the key's scopes): plain columns, so a
# listing of many keys need not build ORM objects.
INFO_COLUMNS: tuple[Column[Any], ...] = tuple(KEY_TABLE.c[name] for name in INFO_COLUMN_NAMES)


def grace_sql(now: datetime) -> ColumnElement[bool]:
    """in_grace for the key table's rows at now (a bound parameter)."""
    key = KEY_TABLE.c
    return and_(key.old_public_id.is_not(None), key.grace_until.is_not(None), key.grace_until > now)


def previous_until(expires_at: datetime | None, grace_until: datetime) -> datetime:
    """When a rotation's previous secret stops: its grace's end, or the key's expiry if sooner
    (a grace never outlives the key)."""
    return grace_until if expires_at is None else min(expires_at, grace_until)


def secret_works(disabled: bool, until: datetime | None, now: datetime) -> bool:
    """Whether a secret works now: its key is not disabled, and now is before its end (the
    key's expiry, or a previous secret's `previous_until`; None: it never ends).

    The one decision: the verifier, the leak judge and the leak writer ask it.
    """
    return not disabled and (until is None or now < until)


def read_info(session: Session, row: KeyRow, now: datetime) -> KeyInfo:
    """The key of a row, with its scopes read in the same transaction."""
    scopes = session.exec(
        select(KeyScopeRow.scope).where(KeyScopeRow.key_id == row.id).order_by(KeyScopeRow.scope)
    )
    return key_info(row, scopes, now)


def key_row(
    session: Session,
    owner: str,
    name: str,
    *,
    lock: bool = False,
    expected_public_id: str | None = None,
) -> KeyRow:
    """The row of the key (owner, name); refused if missing, or recreated since it was read."""
    query = select(KeyRow).where(KeyRow.owner == owner, KeyRow.name == name)
    row = session.exec(query.with_for_update() if lock else query).first()
    if row is None:
        raise KeyNotFoundError(owner, name)
    if expected_public_id is not None and row.public_id != expected_public_id:
        raise KeyChangedError(owner, name)
    return row


def like_pattern(text: str) -> str:
    """A LIKE pattern (escape backslash) that finds text anywhere in a stored column."""
    return f"%{like_escaped(text)}%"


def like_escaped(text: str) -> str:
    """Text as a LIKE pattern (escape backslash) that matches it literally: a caller adds the
    wildcards it means (`like_pattern` finds text anywhere)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
