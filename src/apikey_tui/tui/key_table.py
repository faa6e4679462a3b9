"""The key table: shows a window of rows that the database sorts, filters and counts.

The table never holds the whole key list. It asks the store for the rows on screen (in chunks,
by keyset from a loaded neighbour, else by offset), for a count (the scrollbar and the status
line) and, after a change, for where the selected key now stands: at a million keys the first
rows and the memory cost what a few hundred keys cost. Every read runs in a thread worker; a
newer read cancels an older one (on SQLite the query itself stops within milliseconds).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events, work
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input
from textual.worker import get_current_worker

from apikey_tui import keyformat
from apikey_tui.clock import Clock, system_clock
from apikey_tui.names import FAIR_WIDTHS, look_alikes, printable
from apikey_tui.sparklines import sparkline
from apikey_tui.store import SORTS, KeyQuery, states
from apikey_tui.tui import times
from apikey_tui.tui.text import ELLIPSIS, fit, fit_middle
from apikey_tui.tui.workers import Failure, WorkerHost

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyInfo, KeyStore

CHUNK = 100  # rows read at a time; a few screens
KEEP = 20 * CHUNK  # rows kept around the viewport before far ones are forgotten
COUNT_AFTER = 0.3  # seconds of no typing before a filter's matches are counted
_GAP = "  "
MARK = "*"  # a marked key's first cell (Space; bulk actions): ASCII, one cell in every terminal

# In the order of triage: what a key is, what state it is in, when it stops or was last used;
# then what it may do and how it is named elsewhere. Too narrow a terminal scrolls the columns
# right of the name sideways (the last ones first out of sight), never cuts a time or a state.
COLUMNS: dict[str, str] = {
    "owner": "Owner",
    "name": "Name",
    "state": "State",  # lifecycle marker: see store.states.marker
    "expires": "Expires",
    "last_used": "Last used",
    "scopes": "Scopes",
    "public_id": "Public id",
    "created": "Created",
    "usage": "7 days",  # requests per day, a text sparkline: shown only where the row has room
}
USAGE = "usage"
USAGE_DAYS = 7
_USAGE_AFTER = "last_used"  # beside the last use: when, and how much lately
PINNED = ("owner", "name")  # never scrolled sideways, never dropped
SORTABLE = tuple(c for c in COLUMNS if c in SORTS)  # every column: the database sorts each
TIMES = ("expires", "last_used", "created")
# Natural width caps (a name takes what it needs, up to the longest allowed), the comfortable
# width name and owner give up first, and how narrow a column may become before the table
# scrolls sideways. State and times have none: they are never cut.
_MAX_WIDTH = {"owner": 24, "name": 64, "scopes": 28, "state": 10}
_COMFORT = {c: FAIR_WIDTHS[c] for c in PINNED}
_MIN_WIDTH = {"owner": 10, "name": 12, "scopes": 6, "public_id": 9}
# Name and owner are cut in the middle (names.shorten, the CLI's rule too): both ends show, and
# the part where a name differs from its look-alikes, so two long names never look alike.

Identity = tuple[str, str]  # (owner, name): unique, and kept by a recreate


def row_cells(
    key: KeyInfo,
    columns: Sequence[str],
    now: datetime,
    *,
    absolute_times: bool = False,
    usage: Sequence[int] | None = None,
) -> list[str]:
    """The cells of one key's row at the moment now, control characters made visible.

    Times are relative to now, or absolute (UTC) with absolute_times; the State marker is
    judged at now either way. usage: the key's requests per day for the usage column.
    """

    def show(moment: datetime | None) -> str:
        if moment is None:
            return "never"
        return times.minute(moment) if absolute_times else times.relative(moment, now)

    values = {
        "owner": key.owner,
        "name": key.name,
        "public_id": key.public_id,
        "scopes": " ".join(key.scopes),
        "state": states.marker(key, now)[0],
        "expires": show(key.expires_at),
        "created": show(key.created_at),
        "last_used": show(key.last_used_at),
        USAGE: usage_cell(usage),
    }
    return [printable(values[c]) for c in columns]


def columns(*, with_owner: bool) -> list[str]:
    """The column keys in display order."""
    return [c for c in COLUMNS if (with_owner or c != "owner") and c != USAGE]


def with_usage(names: Sequence[str]) -> list[str]:
    """The columns with the 7-day usage column after Last used (or last)."""
    shown = list(names)
    at = shown.index(_USAGE_AFTER) + 1 if _USAGE_AFTER in shown else len(shown)
    return [*shown[:at], USAGE, *shown[at:]]


def usage_cell(days: Sequence[int] | None) -> str:
    """A key's requests per day as the CLI's text sparkline; blank until read."""
    return sparkline(days) if days is not None else ""


def natural_widths(
    names: Sequence[str], seen: dict[str, int], *, absolute_times: bool
) -> list[int]:
    """What each column would like: the longest value seen (capped) or its fixed size."""
    time_width = times.ABSOLUTE_WIDTH if absolute_times else times.RELATIVE_WIDTH
    fixed = {"public_id": keyformat.ID_LENGTH, USAGE: USAGE_DAYS}
    fixed.update(dict.fromkeys(TIMES, time_width))
    widths = []
    for column in names:
        header = cell_len(COLUMNS[column]) + 2  # room for the sort arrow
        if column in fixed:
            found = fixed[column]
        else:
            found = min(seen.get(column, 0), _MAX_WIDTH[column])
        widths.append(max(found, header))
    return widths


def layout(names: Sequence[str], wanted: Sequence[int], room: int) -> list[int]:
    """Widths for room cells. When the row can fit, the public id gives way first, then the
    scopes down to a fair width (names.FAIR_WIDTHS), then owner and name beyond a comfortable
    width, then the public id and scopes down to their minimum, then owner and name down to
    their minimum (the owner before the name: the name tells keys apart). When it
    cannot, owner and name keep a comfortable width, the columns right of them stay whole
    (the caller scrolls them sideways), and what the last whole column on screen leaves over
    goes back to the name, then the owner. State and times are never narrowed."""
    widths = list(wanted)

    def total() -> int:
        return 1 + sum(widths) + len(_GAP) * (len(widths) - 1)

    pinned = [names.index(c) for c in PINNED if c in names]
    others = [names.index(c) for c in ("public_id", "scopes") if c in names]

    def shrink_pinned(floors: dict[str, int]) -> None:
        for i in pinned:  # the owner first: the name is what tells keys apart
            widths[i] = max(min(floors[names[i]], widths[i]), widths[i] - max(total() - room, 0))

    narrowest = list(widths)
    for i in (*pinned, *others):
        narrowest[i] = min(_MIN_WIDTH[names[i]], widths[i])
    if 1 + sum(narrowest) + len(_GAP) * (len(widths) - 1) <= room:
        for fair in (True, False):  # the scopes keep a fair width until the names are comfortable
            for i in others:
                least = FAIR_WIDTHS.get(names[i], 0) if fair else 0
                floor = min(max(least, _MIN_WIDTH[names[i]]), widths[i])
                widths[i] = max(floor, widths[i] - max(total() - room, 0))
            if fair:
                shrink_pinned(_COMFORT)
        shrink_pinned(_MIN_WIDTH)
        return widths
    shrink_pinned(_COMFORT)
    used = 1 + sum(widths[i] + len(_GAP) for i in pinned)
    for i, width in enumerate(widths):
        if i not in pinned and used + width > room:
            break
        if i not in pinned:
            used += width + len(_GAP)
    spare = room - used + len(_GAP)
    while spare > 0:
        growable = [i for i in pinned if widths[i] < wanted[i]]
        if not growable:
            break
        widths[growable[-1]] += 1  # the name first
        spare -= 1
    return widths


@dataclass
class _Window:
    """A reply from the store: rows from start, and the total if it is known."""

    generation: int
    start: int
    rows: list[KeyInfo]
    total: int | None
    cursor: int | None  # where the followed key stands now (None: leave the cursor)


def _total_width(widths: Sequence[int]) -> int:
    return 1 + sum(widths) + len(_GAP) * (len(widths) - 1)


# Characters the filter box takes: the store's bound (key_filter.TEXT_MAX, not imported here:
# it brings SQLAlchemy before the first paint; a test holds them equal), so the box never holds
# a text the store refuses for its length, and stays quick to type into.
FILTER_MAX = 1000


class KeyFilter(Input):
    """The filter box: Escape clears it (a second Escape, on an empty box, returns to the table)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear_or_leave", "Clear filter", show=False)
    ]

    class Left(Message):
        """Escape on an empty filter: the admin wants the table."""

    def action_clear_or_leave(self) -> None:
        if self.value:
            self.value = ""
        else:
            self.post_message(self.Left())


class KeyTable(WorkerHost, ScrollView, can_focus=True):
    """Draws the rows on screen from a window the database sorted and filtered.

    Name (and owner, with every owner's keys) are pinned at the left, take the free width, and
    are cut in the middle with '…' when they must be (both ends show); scopes and the public id
    shrink first and, where the row still does not fit, the columns right of the name scroll
    sideways under the pinned ones, whole. Times are relative ('3 min ago'), rounded to the
    nearest unit; `t` shows them absolute, in UTC.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "first", "First", show=False),
        Binding("end,G", "last", "Last", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "key-table--header",
        "key-table--cursor",
        "key-table--even",
        "key-table--loading",
        # the State cell of a key that needs a look (each also says it in a word or symbol)
        "key-table--soon",
        "key-table--expired",
        "key-table--disabled",
        "key-table--leaked",
        "key-table--grace",
        "key-table--unused",
    }
    cursor_row: reactive[int] = reactive(0)
    absolute_times: reactive[bool] = reactive(False)

    class SortRequested(Message):
        """The admin clicked a column header."""

        def __init__(self, column: str) -> None:
            super().__init__()
            self.column = column

    class Loaded(Message):
        """New rows or a new count arrived: the screen updates its status line."""

    class Failed(Message):
        """The store could not be read."""

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store: KeyStore | None = None
        self.clock: Clock = system_clock  # the bound store's clock once bound (bind)
        self.key_query = KeyQuery()
        self.columns: list[str] = columns(with_owner=False)
        # What is drawn: the columns, and the usage column where the row has room for it.
        self.shown_columns: list[str] = list(self.columns)
        self.widths: list[int] = []  # of shown_columns
        self._usage: dict[str, tuple[int, ...]] = {}  # requests per day, by public id
        self.total: int | None = None  # None while counting
        self.loaded = False  # a first window arrived for the current query
        self._rows: dict[int, KeyInfo] = {}
        self._generation = 0
        self._shown = 0  # the generation whose rows are on screen
        self._seen: dict[str, int] = {}  # longest owner, name, scopes seen: widths only grow
        # Per pinned column, what each shown text shares with its look-alikes (names.shorten).
        self._apart: dict[str, dict[str, tuple[int, int]]] = {}
        self._pending: set[int] = set()  # chunk starts being read
        self._pinned_cells = 0  # width of the pinned part of a line
        self._laid_for = 0  # the room the widths were laid out for
        self.marked: frozenset[Identity] = frozenset()  # the keys the screen marked (MARK)
        self._going_to: Identity | None = None  # select()'s key, until a window brings it

    # --- what the screen uses ---------------------------------------------------------------

    @property
    def sort_column(self) -> str:
        return self.key_query.sort

    @property
    def reverse(self) -> bool:
        return self.key_query.reverse

    @property
    def rows(self) -> list[KeyInfo]:
        """The loaded rows in order (a window of the table; for tests and small tables)."""
        return [self._rows[i] for i in sorted(self._rows)]

    @property
    def selected(self) -> KeyInfo | None:
        """The key under the cursor, if its row is loaded."""
        return self._rows.get(self.cursor_row) if self.total != 0 else None

    @property
    def selected_identity(self) -> Identity | None:
        """(owner, name) of the key under the cursor: what a reload keeps the cursor on."""
        key = self.selected
        return None if key is None else (key.owner, key.name)

    def known(self, identity: Identity) -> bool:
        """Whether a loaded row has this (owner, name) (a quick check, not the last word)."""
        return any((k.owner, k.name) == identity for k in self._rows.values())

    def usage_text(self, index: int) -> str:
        """The usage cell of loaded row index: its 7 days as a sparkline ('' until read)."""
        return usage_cell(self._usage.get(self.rows[index].public_id))

    def select(self, identity: Identity) -> None:
        """Read the table again with the cursor on the key identity (e.g. one just created);
        a reload meanwhile follows that key, not the one under the cursor now."""
        self._going_to = identity
        self.reload()

    def bind(self, store: KeyStore, *, owner: str | None) -> None:
        """Show owner's keys (None: every owner's, with an owner column) from store."""
        self.store, self.clock = store, store.clock
        self.columns = columns(with_owner=owner is None)
        self.key_query = KeyQuery(
            owner, self.key_query.text, self.key_query.sort, self.key_query.reverse
        )
        self.reload(follow=False)

    def show_first(self, owner: str | None, rows: list[KeyInfo]) -> None:
        """Show owner's keys (None: every owner's) from a first window read before the store
        opened (tui/first_rows.py); `bind` then reads them through the store."""
        self.columns = columns(with_owner=owner is None)
        self.key_query = KeyQuery(owner)  # by name: the order first_window reads
        self._generation += 1
        total = len(rows) if len(rows) < CHUNK else None  # as _read_first counts a short table
        self._arrived(_Window(self._generation, 0, rows, total, None))

    def set_filter(self, text: str) -> None:
        """Show only keys whose owner, name, public id or a scope contains text."""
        if text != self.key_query.text:
            self.key_query = KeyQuery(
                self.key_query.owner, text, self.key_query.sort, self.key_query.reverse
            )
            # The cursor goes to the first match: following the key would cost a count per
            # keystroke (a scan at a million keys); it stays on its key if that is first.
            self.reload(follow=False)

    def sort_by(self, column: str, *, reverse: bool | None = None) -> None:
        """Sort by column; the same column again (reverse None) flips the order."""
        if column not in SORTABLE:
            return
        if reverse is None:
            reverse = not self.key_query.reverse if column == self.key_query.sort else False
        self.key_query = KeyQuery(self.key_query.owner, self.key_query.text, column, reverse)
        self.reload()

    def reload(self, *, follow: bool = True) -> None:
        """Read the table again (other clients changed keys); the cursor follows its key."""
        if self.store is None:
            return
        self._generation += 1
        self._pending.clear()
        if not follow:
            self._going_to = None  # a new filter or owner: the first row, as always
        identity = self._going_to or (self.selected_identity if follow else None)
        self._read_first(self._generation, self.key_query, identity, self.cursor_row)

    # --- reading, off the event loop ----------------------------------------------------------

    @work(
        thread=True,
        exclusive=True,
        group="key-table",
        exit_on_error=False,
        description="Reading the keys",
    )
    def _read_first(
        self, generation: int, query: KeyQuery, identity: Identity | None, cursor: int
    ) -> None:
        """The window around the followed key (or the top), then the count."""
        store, worker = self.store, get_current_worker()
        assert store is not None
        cancelled = lambda: worker.is_cancelled  # noqa: E731
        target = None
        if identity is not None:
            target = store.key_position(query, *identity, cancelled=cancelled)
        wanted = cursor if target is None and identity is not None else (target or 0)
        total = None
        start = (wanted // CHUNK) * CHUNK
        if start >= CHUNK:  # deep in the table: the count lets the store read from the end
            total = store.count_keys(query, cancelled=cancelled)
            start = min(start, max(((total - 1) // CHUNK) * CHUNK, 0))
        rows = store.key_window(query, start, CHUNK, total=total, cancelled=cancelled)
        if total is None and start == 0 and len(rows) < CHUNK:
            total = len(rows)
        self._post_window(_Window(generation, start, rows, total, target))
        self._read_usage(store, generation, rows)
        if total is None:
            if query.text:
                # A filter's count may scan every row: wait until typing pauses, so that
                # keystrokes never compete with counts that the next keystroke would cancel.
                deadline = time.monotonic() + COUNT_AFTER
                while time.monotonic() < deadline and not worker.is_cancelled:
                    time.sleep(0.02)
                if worker.is_cancelled:
                    return
            total = store.count_keys(query, cancelled=cancelled)
            self._post_window(_Window(generation, start, [], total, None))

    @work(
        thread=True,
        exclusive=True,
        group="key-table-chunk",
        exit_on_error=False,
        description="Reading the keys",
    )
    def _read_chunk(
        self,
        generation: int,
        query: KeyQuery,
        start: int,
        total: int | None,
        after: KeyInfo | None,
        before: KeyInfo | None,
    ) -> None:
        """Rows start … start + CHUNK - 1, from a loaded neighbour when there is one."""
        store, worker = self.store, get_current_worker()
        assert store is not None
        rows = store.key_window(
            query,
            start,
            CHUNK,
            total=total,
            after=after,
            before=before,
            cancelled=lambda: worker.is_cancelled,
        )
        self._post_window(_Window(generation, start, rows, total, None))
        self._read_usage(store, generation, rows)

    def work_failed(self, failure: Failure) -> None:
        """A read failed (the one boundary: workers.WorkerHost): the screen says it."""
        self.post_message(self.Failed(failure.line()))

    def _read_usage(self, store: KeyStore, generation: int, rows: list[KeyInfo]) -> None:
        """The window's requests per day: one grouped query for its keys (never one per row),
        after its rows are on screen, so the first rows come no later than without it."""
        if not rows:
            return
        # Each key's counts gather those under the ids it had before (its old secrets').
        found = store.daily_requests([key.public_id for key in rows], USAGE_DAYS)
        self.app.call_from_thread(self._usage_arrived, generation, found)

    def _usage_arrived(self, generation: int, found: dict[str, tuple[int, ...]]) -> None:
        if generation != self._generation:
            return  # an answer to an older question
        self._usage.update(found)
        if USAGE in self.shown_columns:
            self.refresh()

    def _post_window(self, window: _Window) -> None:
        self.app.call_from_thread(self._arrived, window)

    def _arrived(self, window: _Window) -> None:
        if window.generation != self._generation:
            return  # an answer to an older question
        self._pending.discard(window.start)
        fresh = window.generation != self._shown
        if fresh:  # the first answer to a new question replaces the old rows at once
            self._rows, self._shown, self.total = {}, window.generation, None
            self._going_to = None  # that question followed it: found, or hidden by a filter
        for i, key in enumerate(window.rows):
            self._rows[window.start + i] = key
            for column, value in (("owner", key.owner), ("name", key.name)):
                self._seen[column] = max(self._seen.get(column, 0), cell_len(printable(value)))
            self._seen["scopes"] = max(self._seen.get("scopes", 0), cell_len(" ".join(key.scopes)))
            state = cell_len(states.marker(key, self.clock())[0])
            self._seen["state"] = max(self._seen.get("state", 0), state)
        if window.total is not None:
            self.total = window.total
        self.loaded = True
        if window.cursor is not None:
            self.cursor_row = window.cursor
        elif fresh and self.key_query.text and window.rows:
            # a new filter: the first match, unless the selected key is among the first rows
            self.cursor_row = 0
        self.cursor_row = min(self.cursor_row, self._last())
        self._forget_far_rows()
        rows = self._rows.values()
        self._apart = {
            "owner": look_alikes(printable(k.owner) for k in rows),
            "name": look_alikes(printable(k.name) for k in rows),
        }
        self._relayout()
        self._scroll_cursor_into_view()
        self.refresh()
        self.post_message(self.Loaded())

    def _forget_far_rows(self) -> None:
        if len(self._rows) <= KEEP:
            return
        middle = self.scroll_offset.y
        for index in sorted(self._rows, key=lambda i: -abs(i - middle))[: len(self._rows) - KEEP]:
            del self._rows[index]
        kept = {key.public_id for key in self._rows.values()}
        self._usage = {p: days for p, days in self._usage.items() if p in kept}

    def _want(self, index: int) -> None:
        """Read the chunk holding row index if it is neither loaded nor being read."""
        if self.store is None or self._shown != self._generation:
            return
        start = (index // CHUNK) * CHUNK
        if start in self._pending or (self.total is not None and start >= self.total):
            return
        self._pending = {start}  # one chunk at a time: a newer wish cancels an older read
        after, before = self._rows.get(start - 1), self._rows.get(start + CHUNK)
        self._read_chunk(
            self._generation, self.key_query, start, self.total, after, None if after else before
        )

    # --- drawing ------------------------------------------------------------------------------

    def _relayout(self) -> None:
        room = max(self.scrollable_content_region.width, 1)
        self._laid_for = room

        def widths_of(names: list[str]) -> list[int]:
            wanted = natural_widths(names, self._seen, absolute_times=self.absolute_times)
            return layout(names, wanted, room)

        shown, widths = self.columns, widths_of(self.columns)
        more = with_usage(self.columns)
        more_widths = widths_of(more)
        # The usage column only where the whole row fits with it and no column (a name above
        # all) is cut more for it: narrower, it is hidden, never squeezing anything.
        nothing_cut = all(
            more_widths[more.index(c)] >= w for c, w in zip(shown, widths, strict=True)
        )
        if nothing_cut and _total_width(more_widths) <= room:
            shown, widths = more, more_widths
        self.shown_columns, self.widths = shown, widths
        pinned = [w for c, w in zip(shown, widths, strict=True) if c in PINNED]
        self._pinned_cells = 1 + sum(w + len(_GAP) for w in pinned)
        rows = self.total if self.total is not None else len(self._rows)
        self.virtual_size = Size(_total_width(widths), rows + 1)

    def on_resize(self) -> None:
        self._relayout()
        self._scroll_cursor_into_view()

    def watch_show_horizontal_scrollbar(self) -> None:
        # The scrollbar takes the bottom line: the selected row must not end up beneath it.
        self.call_after_refresh(self._scroll_cursor_into_view)

    def watch_absolute_times(self) -> None:
        self._relayout()
        self.refresh()
        self.post_message(self.Loaded())  # the status line's t hint follows

    def _cells(
        self, cells: Sequence[str], style: Style, state: Style | None = None
    ) -> tuple[str, list[tuple[str, Style]]]:
        """(pinned part, scrolling cells) of one line; state styles the State cell."""
        pinned: list[str] = []
        rest: list[tuple[str, Style]] = []
        for column, cell, width in zip(self.shown_columns, cells, self.widths, strict=True):
            if column in PINNED:
                pinned.append(fit_middle(cell, width, self._apart.get(column, {}).get(cell)))
                continue
            cell_style = style + state if column == "state" and state is not None else style
            rest.append((fit(cell, width), cell_style))
        return " " + "".join(p + _GAP for p in pinned), rest

    def _header(self) -> list[str]:
        arrow = " ▼" if self.key_query.reverse else " ▲"
        return [
            COLUMNS[c] + (arrow if c == self.key_query.sort else "") for c in self.shown_columns
        ]

    def render_line(self, y: int) -> Strip:
        if self._laid_for != max(self.scrollable_content_region.width, 1):
            # Rows arrive while the table is still hidden (no room yet): laid out for the room
            # it has, before its first paint, never repainted narrower half a second later.
            self._relayout()
        width, (left, top) = self.size.width, self.scroll_offset
        if y == 0:
            style = self.get_component_rich_style("key-table--header")
            return self._line(self._cells(self._header(), style), style, left, width)
        index = top + y - 1
        base = self.rich_style
        total = self.total if self.total is not None else len(self._rows)
        if index >= total and index not in self._rows:
            return Strip.blank(width, base)
        style = base
        if index == self.cursor_row:
            style = base + self.get_component_rich_style("key-table--cursor")
        elif index % 2 == 0:
            style = base + self.get_component_rich_style("key-table--even")
        key = self._rows.get(index)
        if key is None:
            self._want(index)
            loading = style + self.get_component_rich_style("key-table--loading")
            return self._line((" " + ELLIPSIS, []), loading, left, width)
        now = self.clock()
        kind = states.marker(key, now)[1]
        state = None
        if kind != states.ACTIVE and index != self.cursor_row:  # the cursor keeps its colours
            state = self.get_component_rich_style(f"key-table--{kind}", partial=True)
        cells = row_cells(
            key,
            self.shown_columns,
            now,
            absolute_times=self.absolute_times,
            usage=self._usage.get(key.public_id),
        )
        pinned, rest = self._cells(cells, style, state)
        if (key.owner, key.name) in self.marked:  # the line's first cell is a blank: mark it
            pinned = MARK + pinned[1:]
        return self._line((pinned, rest), style, left, width)

    def _line(
        self, parts: tuple[str, list[tuple[str, Style]]], style: Style, left: int, width: int
    ) -> Strip:
        """The pinned part, then the rest scrolled `left` cells sideways, padded to width.

        A cell the edge of the view would cut is left blank: a value is shown whole or not at
        all ('2026-' of a date would read as a different value).
        """
        pinned, cells = parts
        pinned = set_cell_size(pinned, self._pinned_cells) if self._pinned_cells else pinned
        room = max(width - cell_len(pinned), 0)
        rest: list[Segment] = []
        x = 0
        for text, cell_style in cells:
            if rest:
                rest.append(Segment(_GAP, style))
                x += len(_GAP)
            size = cell_len(text)
            whole = left <= x and x + size <= left + room
            rest.append(Segment(text if whole else " " * size, cell_style if whole else style))
            x += size
        strip = Strip([Segment(pinned, style)])
        moving = Strip(rest).crop(left, left + room)
        return Strip.join([strip, moving]).crop(0, width).adjust_cell_length(width, style)

    # --- moving -------------------------------------------------------------------------------

    def watch_cursor_row(self) -> None:
        self._scroll_cursor_into_view()
        self.refresh()

    def _visible_rows(self) -> int:
        """Rows of keys on screen: the height less the header and a horizontal scrollbar."""
        return max(self.scrollable_content_region.height - 1, 1)

    def _scroll_cursor_into_view(self) -> None:
        visible_rows = self._visible_rows()
        top = self.scroll_offset.y
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible_rows:
            self.scroll_to(y=self.cursor_row - visible_rows + 1, animate=False)

    def _last(self) -> int:
        return max((self.total if self.total is not None else len(self._rows)) - 1, 0)

    def action_move(self, delta: int) -> None:
        self.cursor_row = max(0, min(self._last(), self.cursor_row + delta))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(self._visible_rows() - 1, 1))

    def action_first(self) -> None:
        self.cursor_row = 0

    def action_last(self) -> None:
        self.cursor_row = self._last()

    def action_reverse_sort(self) -> None:
        self.sort_by(self.key_query.sort, reverse=not self.key_query.reverse)

    def action_toggle_times(self) -> None:
        self.absolute_times = not self.absolute_times

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 1
            for column, width in zip(self.shown_columns, self.widths, strict=True):
                start = x if column in PINNED else x - self.scroll_offset.x
                if start <= event.x < start + width + len(_GAP):
                    self.post_message(self.SortRequested(column))
                    return
                x += width + len(_GAP)
            return
        index = self.scroll_offset.y + event.y - 1
        if 0 <= index <= self._last():
            self.cursor_row = index
