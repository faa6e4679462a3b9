"""The API keys tab: the key table, its filter and sort, creating a key (writes: key_writes)."""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Static

from apikey_tui.errors import (
    ApiKeyError,
)
from apikey_tui.names import counted
from apikey_tui.store import KeyInfo, states
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog, NewKeyRequest
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.failures import unforeseen
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.key_actions import TABLE, bindings, typed_as_text
from apikey_tui.tui.key_table import COLUMNS, SORTABLE, Identity, KeyFilter, KeyTable
from apikey_tui.tui.key_writes import KeyWrites
from apikey_tui.tui.messages import (
    KeyCreated,
    KeysLoaded,
    ReachabilityChanged,
    StoreFailed,
)
from apikey_tui.tui.polling import marker_moved
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import literal
from apikey_tui.tui.undo_words import change_of


class KeysScreen(KeyWrites):
    """Lists keys, a window at a time, filtered and sorted by the database; creates keys. Every
    store call runs in a thread worker (KeyWrites.run_store), so the UI never freezes."""

    BINDINGS = [
        *bindings(TABLE),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._marker: tuple[object, ...] | None = None  # None until the first load
        self._create_when_loaded = False  # n pressed before the scope catalog was read
        self._unreachable: str | None = None  # why the database cannot be reached, if it cannot
        # The reason a write just failed, while the reload after it runs: one toast says it once.
        self._reloading_after: str | None = None

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        session = self.session
        owner = "all owners" if session.owner is None else f"owner: {session.owner}"
        yield ContextLine(f"API keys · {owner}", session.database_label)
        yield KeyFilter(
            placeholder="/ filter by name, public id, scope, owner or state",
            id="filter",
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
        table.bind(self.session.store, owner=self.session.owner)  # the first rows, at once
        self.reload()
        self.set_interval(self.session.poll_seconds, self.poll)

    # --- loading ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="load")
    def reload(self) -> None:
        """Read the change marker and scopes off the event loop (the table reads its rows)."""
        store = self.session.store
        try:
            marker = store.change_marker()
            scopes = store.list_scopes()
        except ApiKeyError as exc:
            self.post_message(StoreFailed(str(exc), while_loading=True))
            return
        except Exception as exc:  # never a traceback (its locals), never a crash: one line
            self.post_message(StoreFailed(unforeseen(exc, "Reading the keys"), while_loading=True))
            return
        self.post_message(KeysLoaded(scopes, marker))

    @work(thread=True, exclusive=True, group="poll")
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
        self.scopes = message.scopes
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
            empty.update(literal(f"No key matches {text!r}."))
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
            marks = f"{len(self.marked)} marked · " if self.marked else ""
            undoable = self.session.undoable
            # First, with the marks: a narrow terminal cuts the line's end (the sort, the times).
            undo = f"u: undo {change_of(undoable)} · " if undoable is not None else ""
            # literal: the undo names a key, and a name in the database may be anything
            status.update(literal(f"{marks}{undo}{shown} · {sort} · {times}"))
        status.set_class(self._unreachable is not None, "error")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        # in the filter, '/' and 'n' are text
        return not typed_as_text(action, self.focused) and self.offers(action)

    def offers(self, action: str) -> bool:
        """Whether action can act in this state, wherever the focus is (the palette asks)."""
        # O (end grace) is offered only for a selected key whose old secret is in grace (or,
        # with marks, when any marked key's is).
        if action == "end_grace":
            now = self.session.store.clock()
            if self.marked:
                return any(states.in_grace(k, now) for k in self.marked.values())
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
        self.reload()

    def selected_identity(self) -> tuple[str, str] | None:
        """(owner, name) of the key under the cursor: the table keeps it through reloads."""
        return self.query_one(KeyTable).selected_identity

    # --- filter and sort ----------------------------------------------------------------------

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(KeyTable).set_filter(event.value)  # the database filters, in a worker

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
            self.app.push_screen(KeyDetailScreen(key, self.session, self.act_on))

    def act_on(self, action: str, key: KeyInfo) -> None:
        """Run a key action (delete, rotate, …) on key: how the key's detail acts, as here."""
        getattr(self, f"action_{action}")(key)

    # --- create -------------------------------------------------------------------------------

    def action_create(self) -> None:
        session = self.session
        if self._marker is None:
            # The catalog is not read yet (the table's rows come first): an empty list now
            # would say "the scope catalog is empty". The dialog opens when it is read.
            self._create_when_loaded = True
            return
        if not self.scopes:
            self.notify("The scope catalog is empty: add a scope with 'apikey-tui scopes add'.")
            return
        table = self.query_one(KeyTable)
        dialog = CreateKeyDialog(
            self.scopes,
            owner=session.owner or session.default_owner,
            ask_owner=session.owner is None,
            # a quick hint from the rows read so far; the database's unique key is the judge
            taken=lambda owner, name: table.known((owner, name)),
            clock=session.store.clock,
        )
        self.app.push_screen(dialog, self._create_requested)

    def _create_requested(self, request: NewKeyRequest | None) -> None:
        if request is not None:
            owner, name, scopes, expires = (
                request.owner,
                request.name,
                request.scopes,
                request.expires,
            )
            self.run_store(
                lambda store: KeyCreated(store.create_key(owner, name, scopes, expires=expires)),
                f"Create (key {name!r} of {owner})",
            )

    def on_key_created(self, message: KeyCreated) -> None:
        self.reload()
        self._reload_views()
        key = message.created.info
        if not message.recreated and message.verb is None:  # a new key: the cursor goes to it
            self._go_to((key.owner, key.name))
        self.app.push_screen(
            RevealSecretDialog(message.created, recreated=message.recreated, verb=message.verb),
            self._reveal_closed,
        )

    def _go_to(self, identity: Identity) -> None:
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
            self.reload()  # e.g. someone else deleted the key meanwhile: show the truth
