"""The API keys tab: the key table, its filter, sort and marks; its writes are KeyWrites'."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import counted
from apikey_tui.store import states
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.first_rows import settled
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.key_actions import TABLE, bindings, typed_as_text
from apikey_tui.tui.key_table import COLUMNS, FILTER_MAX, SORTABLE, Identity, KeyFilter, KeyTable
from apikey_tui.tui.key_writes import KeyWrites
from apikey_tui.tui.messages import KeysLoaded, ReachabilityChanged, StoreFailed, StoreOpened
from apikey_tui.tui.polling import marker_moved, poll_failed
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import literal
from apikey_tui.tui.undo_words import change_of
from apikey_tui.tui.workers import LOAD, POLL, STORE, Failure, WorkerHost

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyInfo


class KeysScreen(WorkerHost, Screen[None]):
    """Lists keys, a window at a time, filtered and sorted by the database. Every store call
    runs in a thread worker, so the UI never freezes; every write goes through `writes`."""

    BINDINGS = [
        *bindings(TABLE),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.writes = KeyWrites(self, self, session)
        self._marker: tuple[object, ...] | None = None  # None until the first load
        self._create_when_loaded = False  # n pressed before the scope catalog was read
        self._unreachable: str | None = None  # why the database cannot be reached, if it cannot
        # The reason a write just failed, while the reload after it runs: one toast says it once.
        self._reloading_after: str | None = None
        self._filter_due = False  # the box changed: its newest text is read after a refresh

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        session = self.session
        owner = "all owners" if session.owner is None else f"owner: {session.owner}"
        yield ContextLine(f"API keys · {owner}", session.database_label)
        yield KeyFilter(
            placeholder="filter: name, id, scope, owner, state; tag:env=prod kind:team …",
            id="filter",
            max_length=FILTER_MAX,
            compact=True,
        )
        yield KeyTable(id="keys")
        yield Static("Loading keys…", id="empty")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        table = self.query_one(KeyTable)
        self.watch(table, "cursor_row", self.refresh_bindings, init=False)  # O follows the key
        table.display = False
        table.focus()
        opening = self.session.opening
        if opening is not None and opening.first_rows.owner == self.session.owner:
            # Rows read before the store (tui/first_rows.py): painted now; the store opens
            # after this paint, then reads them again and takes over.
            table.show_first(opening.first_rows.owner, opening.first_rows.rows)
            self.call_after_refresh(opening.start, lambda: self.post_message(StoreOpened()))
            return
        self._bind_store()

    def _bind_store(self) -> None:
        table = self.query_one(KeyTable)
        table.bind(self.session.store, owner=self.session.owner)  # the first rows, at once
        self.reload()
        self.set_interval(self.session.poll_seconds, self.poll)

    def on_store_opened(self, message: StoreOpened) -> None:
        opening = self.session.opening
        if opening is not None and opening.error is not None:
            self.app.exit(return_code=1)  # the CLI reports the error (tui/app.run_app)
            return
        self._bind_store()

    # --- loading ------------------------------------------------------------------------------

    @work(
        thread=True, exclusive=True, group=LOAD, exit_on_error=False, description="Reading the keys"
    )
    def reload(self) -> None:
        """Read the change marker and scopes off the event loop (the table reads its rows)."""
        store = self.session.store
        marker = store.change_marker()
        self.post_message(KeysLoaded(store.list_scopes(), marker))

    def work_failed(self, failure: Failure) -> None:
        """The one boundary's answer here: a write, a read or a poll failed."""
        if failure.group == STORE:
            self.writes.failed(failure)
        elif failure.group == POLL:
            poll_failed(self, failure, self._unreachable)
        else:
            self.post_message(StoreFailed(failure.line(), while_loading=True))

    @work(
        thread=True,
        exclusive=True,
        group=POLL,
        exit_on_error=False,
        description="Checking the database for changes",
    )
    def poll(self) -> None:
        """Reload when another admin, the CLI or a verifier changed something."""
        store = self.session.store
        if marker_moved(self, store.change_marker, self._unreachable, self._marker):
            self.reload()

    def on_reachability_changed(self, message: ReachabilityChanged) -> None:
        self._unreachable = message.reason
        self.show_keys()

    def on_keys_loaded(self, message: KeysLoaded) -> None:
        self._reloading_after = None
        if self._marker is not None and message.marker != self._marker:
            self.query_one(KeyTable).reload()  # the cursor follows its key (owner, name)
        self._marker = message.marker
        self.writes.scopes = message.scopes
        if self._create_when_loaded:
            self._create_when_loaded = False
            self.action_create()

    @on(KeyTable.Loaded)
    def show_keys(self) -> None:
        """Show the table, or say why it is empty; the status line counts and names the sort."""
        table = self.query_one(KeyTable)
        if not table.loaded:
            return
        text = table.key_query.text.strip()
        empty = self.query_one("#empty", Static)
        if table.total == 0 and not text and self.session.owner is not None:
            # Said plainly: a mistyped owner must not look like a real one with no keys.
            empty.update(
                literal(
                    f"No API keys for {self.session.owner} yet: this database has no key of "
                    "that owner (o lists the owners that have keys). Press n to create the "
                    "first one."
                )
            )
        elif table.total == 0 and not text:
            empty.update("No API keys for anyone yet. Press n to create the first one.")
        elif table.total == 0:
            empty.update(literal(f"No key matches {text!r}.{_why_none(text)}"))
        table.display, empty.display = table.total != 0, table.total == 0
        if table.total is None:
            shown = "counting keys…"
        else:
            verb = ("matches" if table.total == 1 else "match") if text else ""
            shown = f"{counted(table.total)} {verb}".rstrip()
        arrow = "▼" if table.reverse else "▲"
        sort = f"sorted by {COLUMNS[table.sort_column].lower()} {arrow} (s, S)"
        # The hint names what t switches to, not what is shown.
        times = "t: relative times" if table.absolute_times else "t: absolute times"
        status = self.query_one("#status", Static)
        if self._unreachable is not None:
            status.update(literal(f"⚠ showing the last keys read: {self._unreachable}"))
        else:
            marked = self.writes.marked
            marks = f"{len(marked)} marked · " if marked else ""
            undoable = self.session.undoable
            # First, with the marks: a narrow terminal cuts the line's end (the sort, the times).
            undo = f"u: undo {change_of(undoable)} · " if undoable is not None else ""
            # literal: the undo names a key, and a name in the database may be anything
            status.update(literal(f"{marks}{undo}{shown} · {sort} · {times}"))
        status.set_class(self._unreachable is not None, "error")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        focused = self.focused
        if action == "focus_filter" and isinstance(focused, KeyFilter) and not focused.value:
            # '/' in the empty box (Escape cleared it, the focus stayed) is the filter key
            # pressed again, not the start of a filter: it keeps the focus, typing nothing.
            return True
        # in the filter, '/' and 'n' are text
        return not typed_as_text(action, focused) and self.offers(action)

    def offers(self, action: str) -> bool:
        """Whether action can act in this state, wherever the focus is (the palette asks)."""
        # O (end grace) is offered only for a selected key whose old secret is in grace (or,
        # with marks, when any marked key's is).
        if action == "end_grace":
            # The table's clock: the store's once bound, and no wait for a store still opening
            # (the footer asks this before the first paint).
            now = self.query_one(KeyTable).clock()
            if self.writes.marked:
                return any(states.in_grace(k, now) for k in self.writes.marked.values())
            key = self.selected_key()
            return key is not None and states.in_grace(key, now)
        return True

    @on(KeyTable.Failed)
    def _table_failed(self, event: KeyTable.Failed) -> None:
        self.post_message(StoreFailed(event.reason, while_loading=True))

    def selected_key(self) -> KeyInfo | None:
        """The key under the table cursor, if the table shows any."""
        table = self.query_one(KeyTable)
        return table.selected if table.display else None

    def reload_keys(self) -> None:
        """Read the keys, the catalog and an open key detail again now (after a write)."""
        self.reload()
        from apikey_tui.tui.screens.key_detail import KeyDetailScreen  # (after a write: opened)

        for screen in self.app.screen_stack:
            if isinstance(screen, KeyDetailScreen):
                screen.reload()  # now, not at its next poll

    def show_marks(self) -> None:
        table = self.query_one(KeyTable)
        table.marked = frozenset(self.writes.marked)
        table.refresh()
        self.show_keys()

    def focus_keys(self) -> None:
        self.query_one(KeyTable).focus()

    def selected_identity(self) -> tuple[str, str] | None:
        """(owner, name) of the key under the cursor: the table keeps it through reloads."""
        return self.query_one(KeyTable).selected_identity

    # --- filter and sort ----------------------------------------------------------------------

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        # Keys typed one at a time (a long text over SSH without bracketed paste) each change
        # the box: one read for the newest text once they are handled, not a read (started,
        # then cancelled) per keystroke, which kept the app busy for minutes at 20,000.
        if not self._filter_due:
            self._filter_due = True
            self.call_after_refresh(self._apply_filter)

    def _apply_filter(self) -> None:
        self._filter_due = False
        text = self.query_one("#filter", Input).value
        self.query_one(KeyTable).set_filter(text)  # the database filters, in a worker

    @on(KeyFilter.Left)
    @on(Input.Submitted, "#filter")
    def action_focus_table(self) -> None:
        """Escape: back to the table; in the table, clear a filter (as k9s and lazygit do)."""
        table, box = self.query_one(KeyTable), self.query_one("#filter", Input)
        if table.has_focus and box.value:
            box.value = ""  # Input.Changed reloads the table unfiltered
        self.set_focus(table)

    def action_focus_filter(self) -> None:
        # At once, not widget.focus() (which waits for the queue): in '/dis' typed in one burst,
        # 'd' would otherwise still reach the table and ask to delete a key.
        self.set_focus(self.query_one("#filter", Input))

    def action_sort(self) -> None:
        table = self.query_one(KeyTable)
        order = [c for c in table.columns if c in SORTABLE]
        table.sort_by(order[(order.index(table.sort_column) + 1) % len(order)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.query_one(KeyTable).action_reverse_sort()

    def action_toggle_times(self) -> None:
        self.query_one(KeyTable).action_toggle_times()

    @on(KeyTable.SortRequested)
    def _header_clicked(self, event: KeyTable.SortRequested) -> None:
        self.query_one(KeyTable).sort_by(event.column)

    def action_reload(self) -> None:
        self.reload()
        self.query_one(KeyTable).reload()

    def action_details(self) -> None:
        key = self.selected_key()
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
        else:
            settled(self.session.opening)
            from apikey_tui.tui.screens.key_detail import KeyDetailScreen

            self.app.push_screen(KeyDetailScreen(key, self.session, self.writes))

    # --- marks: Space marks keys; d, x, E, R and O then act on every marked key --------------

    def action_toggle_mark(self) -> None:
        key = self.selected_key()
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
            return
        self.writes.toggle_mark(key)
        self.query_one(KeyTable).action_move(1)  # as in htop and mc: then the next key

    def action_unmark_all(self) -> None:
        """M: unmark every marked key (the cursor stays)."""
        self.writes.unmark_all()

    # --- writes: the selected key, or the marked ones (KeyWrites) ----------------------------

    def action_delete(self) -> None:
        self.writes.delete()

    def action_recreate(self) -> None:
        self.writes.recreate()

    def action_rotate(self) -> None:
        self.writes.rotate()

    def action_end_grace(self) -> None:
        self.writes.end_grace()

    def action_toggle_disabled(self) -> None:
        self.writes.toggle_disabled()

    def action_set_expiry(self) -> None:
        self.writes.set_expiry()

    def action_undo(self) -> None:
        self.writes.undo()

    def action_copy_name(self) -> None:
        self.writes.copy_name()

    def action_copy_public_id(self) -> None:
        self.writes.copy_public_id()

    def action_create(self) -> None:
        session = self.session
        if self._marker is None and not self._catalog_while_opening():
            # The catalog is not read yet (the table's rows come first): an empty list now
            # would say "the scope catalog is empty". The dialog opens when it is read.
            self._create_when_loaded = True
            return
        if not self.writes.scopes:
            self.notify("The scope catalog is empty: add a scope with 'apikey-tui scopes add'.")
            return
        table = self.query_one(KeyTable)
        dialog = CreateKeyDialog(
            self.writes.scopes,
            owner=session.owner or session.default_owner,
            ask_owner=session.owner is None,
            # a quick hint from the rows read so far; the database's unique key is the judge
            taken=lambda owner, name: table.known((owner, name)),
            clock=session.store.clock,
        )
        self.writes.create(dialog)

    def _catalog_while_opening(self) -> bool:
        """Whether the catalog was read here because the store was still opening after the first
        rows (tui/first_rows.py): n waits for it, as it would have before the screen, so that
        the keys typed right after n in one burst reach the dialog instead of the table. The
        wait ends with the store's opening, which runs anyway; False otherwise or on an error
        (the opening's stops the app, a read's is said when the reload meets it)."""
        if self.session.opening is None:
            return False
        try:
            self.writes.scopes = self.session.store.list_scopes()
        except Exception:  # said elsewhere, as above; the dialog then opens once loaded
            return False
        return True

    def go_to(self, identity: Identity) -> None:
        """Put the cursor on a key, first clearing a filter that might hide it.

        Whether the filter matches is the database's to say (scopes, states); a filter the
        name itself contains surely shows the key, so only that one is kept.
        """
        table = self.query_one(KeyTable)
        text = table.key_query.text.strip()
        if text and text.lower() not in identity[1].lower():
            table.set_filter("")
            self.query_one("#filter", Input).value = ""
        table.select(identity)

    def on_store_failed(self, message: StoreFailed) -> None:
        repeat = message.while_loading and message.reason == self._reloading_after
        self._reloading_after = None
        if not repeat:
            self.notify(message.reason, title="Not done", severity="error", markup=False)
        if message.while_loading:
            if self._marker is None:
                empty = self.query_one("#empty", Static)
                empty.update(literal(f"Could not load keys: {message.reason}. Press F5 to retry."))
        else:
            self._reloading_after = message.reason
            self.reload_keys()  # e.g. someone else deleted the key meanwhile: show the truth


def _why_none(text: str) -> str:
    """Why a filter can match no key, as the CLI refuses it (`key_filter.problem`: a state or
    kind word that names none, an empty value), or nothing: the store reads such a term as
    matching no key, and "no key matches" alone would read as a fact about the keys."""
    from apikey_tui.store.key_filter import parse, problem  # SQLAlchemy's: rows are shown

    try:
        why = problem(parse(text))
    except InvalidInputError as exc:
        why = str(exc)
    return f" ({why})" if why else ""
