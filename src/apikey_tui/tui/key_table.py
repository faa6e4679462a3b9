"""The key table: a line-API widget that draws only visible rows, plus sorting and filtering."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from apikey_tui import keyformat
from apikey_tui.store import KeyInfo
from apikey_tui.tui.text import visible

_OLDEST = datetime.min.replace(tzinfo=UTC)
_GAP = "  "
_MAX_WIDTH = {"owner": 24, "name": 32, "scopes": 28}

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


def row_cells(key: KeyInfo, columns: Sequence[str]) -> list[str]:
    """The cells of one key's row, control characters made visible."""
    values = {
        "owner": key.owner,
        "name": key.name,
        "public_id": key.public_id,
        "scopes": " ".join(key.scopes),
        "created": when(key.created_at),
        "last_used": when(key.last_used_at),
    }
    return [visible(values[c]) for c in columns]


def columns(*, with_owner: bool) -> list[str]:
    """The column keys in display order."""
    return [c for c in COLUMNS if with_owner or c != "owner"]


def column_widths(keys: Sequence[KeyInfo], names: Sequence[str]) -> list[int]:
    """Widths that fit every loaded key (capped), so filtering never makes columns jump."""
    measure: dict[str, Callable[[KeyInfo], int]] = {
        "owner": lambda k: len(k.owner),
        "name": lambda k: len(k.name),
        "scopes": lambda k: len(" ".join(k.scopes)),
    }
    fixed = {
        "public_id": len(keyformat.PREFIX) + keyformat.ID_CHARS,
        "created": 10,
        "last_used": 10,
    }
    widths = []
    for column in names:
        if column in fixed:
            found = fixed[column]
        else:
            found = max((measure[column](k) for k in keys), default=0)
        header = cell_len(COLUMNS[column]) + 2  # room for the sort arrow
        widths.append(min(max(found, header), _MAX_WIDTH.get(column, found + header)))
    return widths


def format_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    """One padded, clipped line of the table."""
    return " " + _GAP.join(set_cell_size(c, w) for c, w in zip(cells, widths, strict=True))


class KeyTable(ScrollView, can_focus=True):
    """Draws only the rows on screen, so 100,000 keys cost no more than 30.

    Textual's DataTable measures every cell it holds; here a row is a string built when it
    scrolls into view, and the header stays on the first line.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1_000_000_000)", "First", show=False),
        Binding("end", "move(1_000_000_000)", "Last", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "key-table--header",
        "key-table--cursor",
        "key-table--even",
    }
    cursor_row: reactive[int] = reactive(0)

    class SortRequested(Message):
        """The admin clicked a column header."""

        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[KeyInfo] = []
        self.columns: list[str] = []
        self.widths: list[int] = []
        self.sort_column, self.reverse = "name", False

    def show(
        self, rows: list[KeyInfo], columns: list[str], widths: list[int], keep: KeyInfo | None
    ) -> None:
        """Replace the rows; the cursor follows `keep` by identity (owner and name).

        A refresh brings new values for the same key (last used, scopes, a recreated id), so
        equality would lose it; if the key is gone, the cursor stays on the same line.
        """
        index = self.cursor_row
        if keep is not None:
            wanted = (keep.owner, keep.name)
            index = next((i for i, k in enumerate(rows) if (k.owner, k.name) == wanted), index)
        self.rows, self.columns, self.widths = rows, columns, widths
        width = cell_len(format_line([""] * len(columns), widths)) + 1
        self.virtual_size = Size(width, len(rows) + 1)
        self.cursor_row = min(index, max(len(rows) - 1, 0))
        self._scroll_cursor_into_view()
        self.refresh()

    @property
    def selected(self) -> KeyInfo | None:
        """The key under the cursor."""
        return self.rows[self.cursor_row] if 0 <= self.cursor_row < len(self.rows) else None

    def row_text(self, index: int) -> list[str]:
        """The cells of row index as displayed (for tests and screen readers)."""
        return row_cells(self.rows[index], self.columns)

    def _header(self) -> str:
        arrow = " ▼" if self.reverse else " ▲"
        labels = [COLUMNS[c] + (arrow if c == self.sort_column else "") for c in self.columns]
        return format_line(labels, self.widths)

    def render_line(self, y: int) -> Strip:
        width, (left, top) = self.size.width, self.scroll_offset
        if y == 0:
            style = self.get_component_rich_style("key-table--header")
            return self._line(self._header(), style, left, width)
        index = top + y - 1
        base = self.rich_style
        if index >= len(self.rows):
            return Strip.blank(width, base)
        style = base
        if index == self.cursor_row:
            style = base + self.get_component_rich_style("key-table--cursor")
        elif index % 2 == 0:
            style = base + self.get_component_rich_style("key-table--even")
        line = format_line(row_cells(self.rows[index], self.columns), self.widths)
        return self._line(line, style, left, width)

    @staticmethod
    def _line(text: str, style: Style, left: int, width: int) -> Strip:
        """One line scrolled `left` columns sideways (narrow terminals) and padded to width."""
        strip = Strip([Segment(text, style)])
        return strip.crop(left, left + width).adjust_cell_length(width, style)

    def watch_cursor_row(self) -> None:
        self._scroll_cursor_into_view()
        self.refresh()

    def _scroll_cursor_into_view(self) -> None:
        visible_rows = max(self.size.height - 1, 1)
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible_rows:
            self.scroll_to(y=self.cursor_row - visible_rows + 1, animate=False)

    def action_move(self, delta: int) -> None:
        if self.rows:
            self.cursor_row = max(0, min(len(self.rows) - 1, self.cursor_row + delta))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(self.size.height - 2, 1))

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 1 - self.scroll_offset.x
            for column, width in zip(self.columns, self.widths, strict=True):
                if x <= event.x < x + width + len(_GAP):
                    self.post_message(self.SortRequested(column))
                    return
                x += width + len(_GAP)
            return
        index = self.scroll_offset.y + event.y - 1
        if 0 <= index < len(self.rows):
            self.cursor_row = index


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
