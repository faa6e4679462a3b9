"""Rows into KeyInfo, without SQLAlchemy: the one place a stored key becomes what may be known."""

# The store reads its rows through SQLAlchemy (`records.INFO_COLUMNS`); the terminal app's first
# window is read through sqlite3 before SQLAlchemy is imported (`first_window`). Both turn a row
# into a key here, so a key looks the same whichever way it was read.

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from apikey_tui.limits.model import limits_of_text
from apikey_tui.networks import rules_of_text
from apikey_tui.store.metadata import meta_of_text, tags_of_text
from apikey_tui.store.types import KeyInfo

# The key table's columns a KeyInfo is read from, in order (with the id, to find the key's
# scopes): `records.INFO_COLUMNS` and the first window's sqlite3 statement both select these.
INFO_COLUMN_NAMES = (
    "id",
    "owner",
    "name",
    "public_id",
    "created_at",
    "last_used_at",
    "expires_at",
    "disabled_at",
    "disabled_reason",
    "old_public_id",
    "grace_until",
    "limits",
    "networks",
    "created_by",
    "meta",
    "tags",
)


def in_grace(old_public_id: str | None, grace_until: datetime | None, now: datetime) -> bool:
    """Whether a rotation's previous secret still works: up to, not at, grace_until.

    The one grace predicate; `records.grace_sql` is its twin in SQL (a test holds them equal).
    """
    return old_public_id is not None and grace_until is not None and now < grace_until


def key_info(
    row: Any, scopes: Iterable[str], now: datetime, *, public_id: str | None = None
) -> KeyInfo:
    """The key of a row (a KeyRow, or a result row with the INFO_COLUMNS) and its scopes.

    A previous secret shows only while its grace runs (by now, the store's clock). public_id
    names the key by another id it answers to (a previous secret's, for the verifier).
    """
    grace = in_grace(row.old_public_id, row.grace_until, now)
    return KeyInfo(
        row.owner,
        row.name,
        row.public_id if public_id is None else public_id,
        tuple(scopes),
        row.created_at,
        row.last_used_at,
        expires_at=row.expires_at,
        disabled_at=row.disabled_at,
        disabled_reason=row.disabled_reason,
        old_public_id=row.old_public_id if grace else None,
        grace_until=row.grace_until if grace else None,
        limits=limits_of_text(row.limits),
        networks=rules_of_text(row.networks),
        created_by=row.created_by,
        meta=meta_of_text(row.meta),
        tags=tags_of_text(row.tags),
    )
