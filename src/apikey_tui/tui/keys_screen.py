"""The API keys tab: the key table, its filter, and the create, delete and recreate actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from apikey_tui.errors import ApiKeyError, KeyNotFoundError
from apikey_tui.store import KeyInfo, KeyStore, ScopeInfo
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog, NewKeyRequest
from apikey_tui.tui.dialogs.help import HelpScreen
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.key_table import COLUMNS, KeyTable, KeyView, column_widths, columns
from apikey_tui.tui.messages import (
    KeyCreated,
    KeyDeleted,
    KeysLoaded,
    ReachabilityChanged,
    StoreFailed,
)
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.text import literal

if TYPE_CHECKING:
    from apikey_tui.tui.app import ApiKeysApp


class KeysScreen(Screen[None]):
    """Lists keys and runs every store call in a thread worker, so the UI never freezes."""

    BINDINGS = [
        Binding("n", "create", "New"),
        Binding("d", "delete", "Delete"),
        Binding("r", "recreate", "Recreate"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("s", "sort", "Sort", show=False),  # also a header click; listed in help
        Binding("f5", "reload", "Reload"),
        Binding("question_mark", "help", "Help"),
        # Not in the footer, which is full at 80 columns: help and the palette list them.
        Binding("enter", "details", "Details", show=False),
        Binding("c", "app.scope_catalog", "Scopes", show=False),
        Binding("a", "app.audit_trail", "Audit trail", show=False),
        Binding("o", "app.switch_owner", "Owner", show=False),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.view = KeyView()
        self.scopes: list[ScopeInfo] = []
        self._marker: tuple[object, ...] | None = None  # None until the first load
        self._widths: list[int] = []
        self._unreachable: str | None = None  # why the database cannot be reached, if it cannot

    @property
    def keys_app(self) -> ApiKeysApp:
        from apikey_tui.tui.app import ApiKeysApp

        assert isinstance(self.app, ApiKeysApp)
        return self.app

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        app = self.keys_app
        owner = "all owners" if app.owner is None else f"owner: {app.owner}"
        yield ContextLine(f"API keys · {owner}", app.database_label)
        yield Input(
            placeholder="/ filter by name, public id, scope or owner", id="filter", compact=True
        )
        yield KeyTable(id="keys")
        yield Static("Loading keys…", id="empty")
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(KeyTable)
        table.display = False
        table.focus()
        self.reload()
        self.set_interval(self.keys_app.poll_seconds, self.poll)

    # --- loading ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="load")
    def reload(self) -> None:
        """Read keys and scopes from the store, off the event loop."""
        store = self.keys_app.store
        try:
            marker = store.change_marker()
            keys = store.list_keys(self.keys_app.owner)
            scopes = store.list_scopes()
        except ApiKeyError as exc:
            self.post_message(StoreFailed(str(exc), while_loading=True))
            return
        widths = column_widths(keys, self.columns)  # here, not on the event loop
        self.post_message(KeysLoaded(keys, scopes, marker, widths))

    @work(thread=True, exclusive=True, group="poll")
    def poll(self) -> None:
        """Reload when another admin, the CLI or a verifier changed something."""
        try:
            marker = self.keys_app.store.change_marker()
        except ApiKeyError as exc:
            # Said once in the status line, not as a notification every two seconds.
            if self._unreachable is None:
                self.post_message(ReachabilityChanged(str(exc)))
            return
        if self._unreachable is not None:
            self.post_message(ReachabilityChanged(None))
        if self._marker is not None and marker != self._marker:
            self.reload()

    def on_reachability_changed(self, message: ReachabilityChanged) -> None:
        self._unreachable = message.reason
        self.show_keys()

    def on_keys_loaded(self, message: KeysLoaded) -> None:
        self._marker = message.marker
        self.scopes, self._widths = message.scopes, message.widths
        self.view.load(message.keys)
        self.show_keys()

    @property
    def columns(self) -> list[str]:
        """The table's columns: an owner column only when showing every owner's keys."""
        return columns(with_owner=self.keys_app.owner is None)

    def show_keys(self) -> None:
        """Show the keys matching the filter, keeping the cursor on its key."""
        table = self.query_one(KeyTable)
        text = self.query_one("#filter", Input).value
        matching = self.view.matching(text)
        table.sort_column, table.reverse = self.view.sort_column, self.view.reverse
        table.show(matching, self.columns, self._widths, keep=table.selected)
        empty = self.query_one("#empty", Static)
        if not self.view.keys:
            who = "anyone" if self.keys_app.owner is None else self.keys_app.owner
            empty.update(literal(f"No API keys for {who} yet. Press n to create the first one."))
        elif not matching:
            empty.update(literal(f"No key matches {text!r}."))
        table.display, empty.display = bool(matching), not matching
        total = len(self.view.keys)
        noun = "key" if total == 1 else "keys"
        shown = f"{len(matching):,} of {total:,} {noun}"
        if len(matching) == total:
            shown = f"{total:,} {noun}"
        arrow = "▼" if self.view.reverse else "▲"
        sort = f"sorted by {COLUMNS[self.view.sort_column].lower()} {arrow}"
        status = self.query_one("#status", Static)
        if self._unreachable is not None:
            status.update(literal(f"⚠ showing the last keys read: {self._unreachable}"))
        else:
            status.update(f"{shown} · {sort} · dates in UTC")
        status.set_class(self._unreachable is not None, "error")

    def selected_key(self) -> KeyInfo | None:
        """The key under the table cursor, if the table shows any."""
        table = self.query_one(KeyTable)
        return table.selected if table.display else None

    # --- filter and sort ----------------------------------------------------------------------

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        self.show_keys()

    @on(Input.Submitted, "#filter")
    def action_focus_table(self) -> None:
        self.query_one(KeyTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_sort(self) -> None:
        order = self.columns
        self.view.sort_by(order[(order.index(self.view.sort_column) + 1) % len(order)])
        self.show_keys()

    @on(KeyTable.SortRequested)
    def _header_clicked(self, event: KeyTable.SortRequested) -> None:
        self.view.sort_by(event.column)
        self.show_keys()

    def action_reload(self) -> None:
        self.reload()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def action_details(self) -> None:
        key = self.selected_key()
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
        else:
            self.app.push_screen(KeyDetailScreen(key, self))

    # --- create -------------------------------------------------------------------------------

    def action_create(self) -> None:
        app = self.keys_app
        if not self.scopes:
            self.notify("The scope catalog is empty: add a scope with 'apikey-tui scopes add'.")
            return
        existing = {(k.owner, k.name) for k in self.view.keys}
        dialog = CreateKeyDialog(
            self.scopes,
            owner=app.owner or app.default_owner,
            ask_owner=app.owner is None,
            taken=lambda owner, name: (owner, name) in existing,
        )
        self.app.push_screen(dialog, self._create_requested)

    def _create_requested(self, request: NewKeyRequest | None) -> None:
        if request is not None:
            owner, name, scopes = request.owner, request.name, request.scopes
            self.run_store(lambda store: KeyCreated(store.create_key(owner, name, scopes)))

    @work(thread=True, group="store")
    def run_store(self, operation: Callable[[KeyStore], Message]) -> None:
        """Run one store call (argon2, the database) off the event loop; report as a message."""
        try:
            message = operation(self.keys_app.store)
        except ApiKeyError as exc:
            message = StoreFailed(str(exc))
        self.post_message(message)

    def on_key_created(self, message: KeyCreated) -> None:
        self.reload()
        self.app.push_screen(
            RevealSecretDialog(message.created, recreated=message.recreated), self._reveal_closed
        )

    def _reveal_closed(self, _: None) -> None:
        # The secret must live nowhere once the reveal is closed, the app's copy of the
        # clipboard included (Textual keeps what it copied; it has no public way to forget it).
        self.app._clipboard = ""
        self.query_one(KeyTable).focus()

    # --- delete and recreate ------------------------------------------------------------------

    def _confirm_then(
        self,
        ask: Callable[[KeyInfo], ConfirmDialog],
        then: Callable[[KeyStore, KeyInfo], Message],
        key: KeyInfo | None = None,
    ) -> None:
        """Ask about the selected key; on yes, run the store call in a worker.

        The question names owner, name and public id, and the store call passes that public id
        back: if the key was recreated or deleted while the dialog was open, nothing is done.
        """
        key = self.selected_key() if key is None else key  # a key's detail view passes its own
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
            return

        def operation(store: KeyStore) -> Message:
            try:
                return then(store, key)
            except KeyNotFoundError as exc:
                raise ApiKeyError(f"{exc}: it was deleted meanwhile; nothing was done") from None

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_store(operation)

        self.app.push_screen(ask(key), answered)

    def action_delete(self, key: KeyInfo | None = None) -> None:
        self._confirm_then(
            lambda key: ConfirmDialog(
                f"Delete key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}. Every service refuses this key as soon as it is "
                "deleted. This cannot be undone.",
                "Delete",
            ),
            lambda store, key: KeyDeleted(
                store.delete_key(key.owner, key.name, expected_public_id=key.public_id)
            ),
            key,
        )

    def on_key_deleted(self, message: KeyDeleted) -> None:
        self.notify(f"Deleted key {message.key.name!r} of {message.key.owner}.", markup=False)
        self.reload()

    def action_recreate(self, key: KeyInfo | None = None) -> None:
        self._confirm_then(
            lambda key: ConfirmDialog(
                f"Recreate key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}. For a stolen or leaked key. The old key stops "
                "working at once, for every service; a new key with the same name and scopes "
                "is shown once.",
                "Recreate",
            ),
            lambda store, key: KeyCreated(
                store.recreate_key(key.owner, key.name, expected_public_id=key.public_id),
                recreated=True,
            ),
            key,
        )

    def on_store_failed(self, message: StoreFailed) -> None:
        self.notify(message.reason, title="Not done", severity="error", markup=False)
        if message.while_loading:
            if self._marker is None:
                empty = self.query_one("#empty", Static)
                empty.update(literal(f"Could not load keys: {message.reason}. Press F5 to retry."))
        else:
            self.reload()  # e.g. someone else deleted the key meanwhile: show the truth
