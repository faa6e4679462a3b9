"""The key table: which columns, how one key becomes a row, and sorting and filtering in memory."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rich.text import Text

from apikey_tui.store import KeyInfo
from apikey_tui.tui.text import cell

# At most this many rows are in the DataTable at once: it measures every cell it holds, so
# 100,000 rows would freeze the UI for seconds. Filtering narrows the rest, which stay in memory.
WINDOW = 500
_OLDEST = datetime.min.replace(tzinfo=UTC)

COLUMNS: dict[str, str] = {
    "owner": "Owner",
    "name": "Name",
    "public_id": "Public id",
    "scopes": "Scopes",
    "created": "Created",
    "last_used": "Last used",
}
_SORT_KEYS: dict[str, Callable[[KeyInfo], Any]] = {
    "owner": lambda k: (k.owner, k.name),
    "name": lambda k: (k.name, k.owner),
    "public_id": lambda k: k.public_id,
    "scopes": lambda k: (k.scopes, k.name),
    "created": lambda k: k.created_at,
    "last_used": lambda k: k.last_used_at or _OLDEST,
}


def when(moment: datetime | None) -> str:
    """A day as the table shows it (UTC), so five columns fit 80 terminal columns; blank if none."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d") if moment else ""


def row_cells(key: KeyInfo, *, with_owner: bool) -> list[Text]:
    """The cells of one key's row, each shown literally."""
    values = [
        key.name,
        key.public_id,
        " ".join(key.scopes),
        when(key.created_at),
        when(key.last_used_at),
    ]
    if with_owner:
        values.insert(0, key.owner)
    return [cell(v) for v in values]


def columns(*, with_owner: bool) -> list[str]:
    """The column keys in display order."""
    return [c for c in COLUMNS if with_owner or c != "owner"]


class KeyView:
    """All loaded keys, kept sorted, with a lower-case text per key for fast filtering."""

    def __init__(self) -> None:
        self.sort_column = "name"
        self.reverse = False
        self.keys: list[KeyInfo] = []
        self._texts: list[str] = []

    def load(self, keys: list[KeyInfo]) -> None:
        """Replace the keys, keeping the current sort order."""
        self.keys = sorted(keys, key=_SORT_KEYS[self.sort_column], reverse=self.reverse)
        # Sorting happens here, once; filtering keeps this order, so a keystroke never sorts.
        self._texts = [
            f"{k.owner} {k.name} {k.public_id} {' '.join(k.scopes)}".lower() for k in self.keys
        ]

    def sort_by(self, column: str) -> None:
        """Sort by column; choosing the current column again reverses the order."""
        if column not in _SORT_KEYS:
            raise ValueError(f"unknown column {column!r}")
        self.reverse = not self.reverse if column == self.sort_column else False
        self.sort_column = column
        self.load(self.keys)

    def matching(self, text: str) -> list[KeyInfo]:
        """Keys whose owner, name, public id or scopes contain text (case-insensitive)."""
        needle = text.strip().lower()
        if not needle:
            return self.keys
        return [k for k, t in zip(self.keys, self._texts, strict=True) if needle in t]
