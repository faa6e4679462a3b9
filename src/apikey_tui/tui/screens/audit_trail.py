"""The audit trail: every event, newest first, filtered by key, actor and action, kept live."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import DataTable, Input, Static

from apikey_tui.names import printable
from apikey_tui.store import LEAK_EVENT, Event
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.screens.live import LIST_MOVES, LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import actor_text, clip, literal
from apikey_tui.tui.times import minute

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore

LIMIT = 500
FILTERS = ("key", "actor", "action")


def event_key(event: Event) -> str:
    """What an event is about: owner/name of a key, or the scope for catalog events."""
    if event.key_name is not None:
        return f"{event.owner}/{event.key_name}"
    return f"scope {event.scope}" if event.scope else ""


def event_line(event: Event) -> str:
    """The whole event on one line, for the line under the table."""
    about = event_key(event)
    parts = [minute(event.at), event.action, about, event.public_id or "", actor_text(event)]
    line = " · ".join(p for p in parts if p)
    return f"{line}: {event.detail}" if event.detail else line


Filters = tuple[str, str, str]


class AuditTrailScreen(LiveScreen[list[Event]]):
    """a on the key table opens this; / moves to the filters, Escape back to the table."""

    BINDINGS = [
        Binding("slash", "focus_filter", "Filter", priority=True),
        Binding("l", "leaks_only", "Leaks only"),
        *LIST_MOVES,
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.events: list[Event] = []
        self._filters: Filters = ("", "", "")

    def compose(self) -> ComposeResult:
        yield self.context_line("Audit trail · every owner")
        with Horizontal(id="event-filters"):
            for name in FILTERS:
                yield Input(placeholder=f"{name} contains…", id=f"filter-{name}", compact=True)
        table: DataTable[Text] = DataTable(id="events-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("When (UTC)", "Action", "Key", "Actor", "Detail")
        yield table
        yield Static("", id="event-full")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#events-table", DataTable).focus()

    def filters(self) -> Filters:
        """The key, actor and action filter texts as typed."""
        key, actor, action = (self.query_one(f"#filter-{n}", Input).value for n in FILTERS)
        return key, actor, action

    def read_store(self, store: KeyStore) -> list[Event]:
        key, actor, action = self._filters
        return store.events(LIMIT, key=key, actor=actor, action=action)

    @on(Input.Changed)
    def _filter_changed(self) -> None:
        self._filters = self.filters()
        self.reload()

    @on(Input.Submitted)
    def _filter_submitted(self) -> None:
        self.query_one("#events-table", DataTable).focus()

    def show(self, data: list[Event]) -> None:
        self.events = data
        self._fill()
        self.show_status()

    def on_resize(self) -> None:
        self._fill()

    def _fill(self) -> None:
        """Put the events in the table, each cell cut with '…' so the row fits the screen."""
        events = self.events
        table = self.query_one("#events-table", DataTable)
        newest_before = table.cursor_row == 0
        current = self.selected()
        keys = [event_key(e) for e in events]
        key_width = min(max(map(len, keys), default=3), 24)
        actor_width = min(max((len(e.actor) for e in events), default=5), 16)
        action_width = max((len(e.action) for e in events), default=6)
        used = len("2026-11-01 09:30") + action_width + key_width + actor_width + 2 * 5 + 2
        detail_width = max(self.size.width - used, 12)
        table.clear()
        for event, key in zip(events, keys, strict=True):
            cells = (
                minute(event.at),
                event.action,
                clip(key, key_width),
                clip(event.actor, actor_width),
                clip(event.detail, detail_width),
            )
            table.add_row(*(Text(printable(c)) for c in cells), key=str(event.id))
        ids = [e.id for e in events]
        if current is not None and current.id in ids and not newest_before:
            table.move_cursor(row=ids.index(current.id))  # stay on the event being read
        self._show_highlighted()

    def selected(self) -> Event | None:
        """The event under the cursor."""
        table = self.query_one("#events-table", DataTable)
        row = table.cursor_row
        return self.events[row] if table.row_count and 0 <= row < len(self.events) else None

    @on(DataTable.RowHighlighted)
    def _show_highlighted(self) -> None:
        event = self.selected()
        self.query_one("#event-full", Static).update(literal(event_line(event) if event else ""))

    def status_text(self) -> str:
        shown = len(self.events)
        what = "the newest" if shown == LIMIT else ""
        filtered = " matching" if any(f.strip() for f in self._filters) else ""
        noun = "event" if shown == 1 else "events"
        return f"{what} {shown:,}{filtered} {noun}, newest first · live".strip()

    def action_focus_filter(self) -> None:
        self.set_focus(self.query_one("#filter-key", Input))  # at once: '/web' in one burst

    def action_leaks_only(self) -> None:
        # Through the action filter, so the admin sees why the trail is short; again: all.
        action = self.query_one("#filter-action", Input)
        action.value = "" if action.value == LEAK_EVENT else LEAK_EVENT

    def action_back(self) -> None:
        if isinstance(self.focused, Input):
            self.query_one("#events-table", DataTable).focus()
        else:
            self.dismiss(None)
