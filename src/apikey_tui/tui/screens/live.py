"""LiveScreen: a view that reads the store off the event loop and reads again on any change.

It polls the same cheap change marker as the key table (newest event, newest use), so what
another admin, the CLI or a verifier does appears within the app's poll interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

from textual import work
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from apikey_tui.errors import ApiKeyError
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.key_actions import typed_as_text
from apikey_tui.tui.messages import ReachabilityChanged, StoreFailed, ViewRead
from apikey_tui.tui.polling import marker_moved, poll_failed
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import literal
from apikey_tui.tui.workers import LOAD, POLL, STORE, Failure, StoreRunner, WorkerHost

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore

T = TypeVar("T")


# j and k move in every list view, as on the key table (vi, k9s, lazygit): screen bindings for
# the list's own cursor actions, so in a filter field they are text (the field takes them first).
LIST_MOVES = [
    Binding("j", "list_cursor('down')", "Down", show=False),
    Binding("k", "list_cursor('up')", "Up", show=False),
]


class LiveScreen(WorkerHost, Screen[None], Generic[T]):
    """Subclasses say what to read (read_store) and how to show it (show)."""

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("f5", "reload", "Reload", show=False),
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.runner = StoreRunner(self, session)
        self._marker: tuple[object, ...] | None = None  # None until the first read
        self._generation = 0  # the newest read asked for; older answers are dropped
        self._unreachable: str | None = None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A view's priority bindings open a field or a dialog at once, so keys typed in the
        # same burst reach it; in a text field they are text (key_actions.typed_as_text).
        at_once = {b.action for b in self.BINDINGS if isinstance(b, Binding) and b.priority}
        return not typed_as_text(action, self.focused, at_once)

    def action_list_cursor(self, direction: str) -> None:
        """j / k: the view's list moves its cursor, as ↓ / ↑ do."""
        lists = self.query(DataTable)
        if lists:
            table = lists.first()
            table.action_cursor_down() if direction == "down" else table.action_cursor_up()

    def on_mount(self) -> None:
        self.reload()
        self.set_interval(self.session.poll_seconds, self.poll)

    # --- what subclasses provide --------------------------------------------------------------

    def read_store(self, store: KeyStore) -> T:
        """Read the view's data; runs in a thread worker."""
        raise NotImplementedError

    def show(self, data: T) -> None:
        """Show data read by read_store; runs on the event loop."""
        raise NotImplementedError

    def read_failed(self, failure: Failure) -> Message:
        """The message for a failed read (a subclass may say more for some errors)."""
        return StoreFailed(failure.line(), while_loading=True)

    def work_failed(self, failure: Failure) -> None:
        """The one boundary's answer here (workers.WorkerHost): a read, a poll or a write."""
        if failure.group == STORE:
            self.runner.failed(failure)
        elif failure.group == POLL:
            poll_failed(self, failure, self._unreachable)
        elif failure.group == LOAD:
            self.post_message(self.read_failed(failure))
        else:
            super().work_failed(failure)

    # --- reading ------------------------------------------------------------------------------

    def reload(self) -> None:
        """Read the view's data again; only the newest read's answer is shown."""
        self._generation += 1
        self._read(self._generation)

    @work(thread=True, group=LOAD, exit_on_error=False, description="Reading this view")
    def _read(self, generation: int) -> None:
        """Read the view's data from the store, off the event loop."""
        store = self.session.store
        marker = store.change_marker()
        data = self.read_store(store)
        self.post_message(ViewRead(marker, data, generation))

    @work(
        thread=True,
        exclusive=True,
        group=POLL,
        exit_on_error=False,
        description="Checking the database for changes",
    )
    def poll(self) -> None:
        """Read again when something changed in the database."""
        store = self.session.store
        if marker_moved(self, store.change_marker, self._unreachable, self._marker):
            self.app.call_from_thread(self.reload)

    def on_view_read(self, message: ViewRead) -> None:
        message.stop()
        if message.generation != self._generation:
            return  # a newer read is under way (e.g. the filter changed since)
        self._marker = message.marker
        self.show(cast(T, message.data))

    def on_reachability_changed(self, message: ReachabilityChanged) -> None:
        message.stop()
        self._unreachable = message.reason
        self.show_status()

    def status_text(self) -> str:
        """The status line when the database answers."""
        return ""

    def show_status(self) -> None:
        status = self.query_one("#status", Static)
        if self._unreachable is not None:
            status.update(literal(f"⚠ showing the last data read: {self._unreachable}"))
        else:
            status.update(literal(self.status_text()))
        status.set_class(self._unreachable is not None, "error")

    # --- writing ------------------------------------------------------------------------------

    def run_store(
        self,
        operation: Callable[[KeyStore], Message],
        doing: str,
        *,
        writes: bool = True,
        again: Callable[[ApiKeyError], None] | None = None,
    ) -> None:
        """Run one store call off the event loop (the one StoreRunner); its message comes back
        here. A write ends the offer of undo (`Session.undoable`). again: reopen the dialog
        on a refusal of what was typed (`StoreRunner.run`)."""
        self.runner.run(operation, doing, self.post_message, writes=writes, again=again)

    def on_store_failed(self, message: StoreFailed) -> None:
        message.stop()
        self.notify(message.reason, title="Not done", severity="error", markup=False)
        if not message.while_loading:
            self.reload()  # show the truth, e.g. a scope someone else removed meanwhile

    # --- navigation ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.dismiss(None)

    def action_reload(self) -> None:
        self.reload()

    def context_line(self, what: str) -> ContextLine:
        """The top line: what is shown, and on which database (shortened, never dropped)."""
        return ContextLine(what, self.session.database_label)
