"""ApiKeysApp: assembled from a store and labels; run_app runs it on a store the CLI opened."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from functools import partial
from typing import Any

from textual import events
from textual.app import SystemCommand
from textual.binding import Binding
from textual.dom import DOMNode
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen, Screen
from textual.widgets import Input

from apikey_tui.config import current_user
from apikey_tui.names import printable
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog
from apikey_tui.tui.dialogs.help import OTHER_BUTTON, HelpScreen, Section, described_bindings
from apikey_tui.tui.dialogs.jump import JumpDialog
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.dialogs.scope_form import ScopeFormDialog
from apikey_tui.tui.dialogs.switch_owner import OwnerChoice, SwitchOwnerDialog
from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.failures import log_path, logging_to_file, unforeseen
from apikey_tui.tui.first_rows import OpeningStore, settled
from apikey_tui.tui.key_actions import (
    DETAIL,
    TABLE,
    actions,
    app_binding,
    typed_as_text,
    views,
)
from apikey_tui.tui.key_table import KeyFilter, KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.pictures import export_svg
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
from apikey_tui.tui.screens.live import LiveScreen
from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen
from apikey_tui.tui.textual_private import QuietCrashes

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Batch, KeyStore


# Seconds an error's toast stays (others: Textual's 5). A failed change says why and that
# nothing changed, often in several lines at 70 columns; gone after 5 s, it was missed by an
# admin who looked away while the database waited.
ERROR_TOAST_SECONDS = 15.0


class ApiKeysApp(QuietCrashes):
    """The Settings → API keys tab in a terminal."""

    CSS_PATH = "app.tcss"
    TITLE = "apikey-tui"
    # `:` works on every screen (the scope catalog and audit trail too), not only the table's.
    BINDINGS = [("q", "quit", "Quit"), app_binding("app.jump")]

    def __init__(
        self,
        store: KeyStore | OpeningStore,
        *,
        owner: str | None,
        database_label: str,
        poll_seconds: float = 2.0,
    ) -> None:
        super().__init__()
        # An OpeningStore: the first rows were read without it, and it opens once they are on
        # screen (tui/first_rows.py).
        self._opening = store if isinstance(store, OpeningStore) else None
        self._store = None if isinstance(store, OpeningStore) else store
        self.owner = owner  # None: every owner's keys, with an owner column
        self.database_label = database_label
        self.poll_seconds = poll_seconds
        self.undoable: Batch | None = None  # see Session.undoable
        self.default_owner = owner or current_user()
        self.failure: str | None = None  # one line: why the app stopped, if an error stopped it
        # A key the view does not have, and how many keys of its burst were dropped after it.
        self._stray: str | None = None
        self._dropped = 0

    @property
    def store(self) -> KeyStore:
        """The store; while it is still opening, whoever asks waits for it."""
        if self._store is None:
            assert self._opening is not None
            self._store = self._opening.wait()
        return self._store

    @property
    def opening(self) -> OpeningStore | None:
        """The store still opening, with the first rows read without it; None once it is open
        or when the app was given an open store."""
        return self._opening if self._store is None else None

    def on_mount(self) -> None:
        self.push_screen(KeysScreen(self))

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            # Here, not in the dialog: the app hands a key to the focused button, not its screen.
            screen = self.screen
            if isinstance(screen, ConfirmDialog) and screen.read_before_shown(event):
                return
            if self._after_stray_key(event):
                return
        await super().on_event(event)

    def _after_stray_key(self, event: events.Key) -> bool:
        """Whether to drop this key: it came in the burst of a key the view does not have.

        '/web' typed in a view without '/' is text typed in the wrong place: the 'e' opened
        Describe and the 'b' went into it; in a key's detail '/old' asked to delete the key.
        So after a printable key that nothing on the screen takes, the keys already queued
        behind it (the rest of its burst: one read over SSH) are dropped, and a toast says so.
        Keys typed after the burst act again. Dialogs are left alone: their keys typed ahead
        (TypeAheadDialog) are text.
        """
        if self._stray is not None:
            self._dropped += 1
            return True
        screen = self.screen
        if isinstance(screen, ModalScreen) or isinstance(self.focused, Input):
            return False
        if not event.is_printable:
            return False
        keys = {event.key, *event.aliases}
        if keys & bound_keys(screen):
            return False
        self._stray = event.character or event.key
        self.call_later(self._stray_burst_ended)  # queued behind the keys of the same read
        return False  # the key itself goes on: nothing takes it

    def _stray_burst_ended(self) -> None:
        stray, dropped = self._stray, self._dropped
        self._stray, self._dropped = None, 0
        if dropped:
            keys = "key" if dropped == 1 else "keys"
            self.notify(
                f"{stray!r} is no key here: the {dropped} {keys} typed right after it did nothing.",
                severity="warning",
                markup=False,
            )

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Every toast (ours, and Textual's) shows control characters as escapes, never raw;
        an error's stays ERROR_TOAST_SECONDS.

        Toasts quote the database (a key's owner and name, a store error): callers that do
        pass markup=False, so '[link=…]' in a name is text; this is the one gate for the rest.
        """
        if timeout is None and severity == "error":
            timeout = ERROR_TOAST_SECONDS
        super().notify(
            printable(message),
            title=printable(title),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    def crashed(self, error: BaseException) -> None:
        """An error nothing caught: logged without locals, said in one line; the app exits 1.

        A worker's never gets here (workers.WorkerHost says it in one line); this is for the
        rest: a handler, a render.
        """
        self.failure = self.failure or unforeseen(error, "The app")

    def export_screenshot(self, *, title: str | None = None, simplify: bool = False) -> str:
        """The screen as SVG, a revealed key blanked: the one gate of every screenshot.

        Textual's palette command, action_screenshot, deliver_screenshot, save_screenshot and
        TEXTUAL_SCREENSHOT all draw through here; a picture must never hold a secret (the
        palette's Screenshot saved the whole key to ~/Downloads, world-readable).
        """
        hidden = [s.secret_region() for s in self.screen_stack if isinstance(s, RevealSecretDialog)]
        return export_svg(self, hidden, title=title or self.title, simplify=simplify)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # ':' and 'o' run at once on the key table and detail; in a text field they are text.
        return not typed_as_text(action, self.focused)

    def action_scope_catalog(self) -> None:
        """Show the scope catalog: descriptions, how many keys hold each scope; add, remove."""
        self.push_screen(ScopeCatalogScreen(self))

    def action_audit_trail(self) -> None:
        """Show the audit trail, newest first, filterable and live."""
        self.push_screen(AuditTrailScreen(self))

    def action_usage(self) -> None:
        """Show the Usage view: busiest keys, 403s, wrong secrets, right-size proposals; live."""
        settled(self.opening)
        from apikey_tui.tui.screens.usage import UsageScreen

        self.push_screen(UsageScreen(self))

    def action_owners(self) -> None:
        """Show the Owners view: kinds, members, key counts; pools, offboarding."""
        settled(self.opening)
        from apikey_tui.tui.screens.owners import OwnersScreen

        self.push_screen(OwnersScreen(self, self.show_owner_keys))

    def show_owner_keys(self, owner: str) -> None:
        """The key table of one owner (the Owners view's Enter)."""
        self.action_key_table()
        self.owner = owner
        self.switch_screen(KeysScreen(self))

    def action_help(self) -> None:
        """Show every key of every view and dialog, then the security rules."""
        settled(self.opening)
        self.push_screen(HelpScreen(help_sections()))

    def action_switch_owner(self) -> None:
        """Ask whose keys to show (one owner or all) and show them, without restarting."""

        def chosen(choice: OwnerChoice | None) -> None:
            if choice is not None:
                self.owner = choice.owner
                # A fresh key screen: its top line, columns and reads all follow the new owner.
                self.switch_screen(KeysScreen(self))

        dialog = SwitchOwnerDialog(self.owner, self.default_owner, self.store.owner_counts)
        self.push_screen(dialog, chosen)

    def action_jump(self) -> None:
        """Ask for a view by name (k9s' `:`): every view of the action list, and only those."""
        found = views()

        def chosen(name: str | None) -> None:
            if name is not None:
                self.go_to_view(found[name].id)

        self.push_screen(JumpDialog(list(found)), chosen)

    def go_to_view(self, action_id: str) -> None:
        """Back to the key table, then open the view (one view deep, as k9s keeps it)."""
        self.action_key_table()
        if action_id != "app.key_table":
            self.call_later(self.run_action, action_id)

    def action_key_table(self) -> None:
        """Close every view and dialog above the key table."""
        while len(self.screen_stack) > 1 and not isinstance(self.screen, KeysScreen):
            self.pop_screen()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's commands, then every action of the screen it is over.

        Whatever has the focus: an action bound 'at once' is text while the filter has the
        focus (check_action refuses it there), yet the palette must offer it all the same (it
        offered none of them after the filter had been used). Only an action that cannot act
        in this state is left out (End grace without a grace, right-size without a proposal).
        """
        settled(self.opening)
        from apikey_tui.tui.screens.key_detail import KeyDetailScreen

        yield from super().get_system_commands(screen)
        if isinstance(screen, KeysScreen | KeyDetailScreen):
            where = TABLE if isinstance(screen, KeysScreen) else DETAIL
            for action in actions(where):
                if screen.offers(action.id):
                    run = partial(self._run_chosen, screen, action.id)
                    yield SystemCommand(action.title, action.description, run)
        elif isinstance(screen, LiveScreen):  # the catalog, the audit trail, Usage
            for binding, text in described_bindings(type(screen)):
                # Help and moving a cursor are no commands (Textual's own Keys shows the keys).
                if binding.action != "app.help" and not binding.action.startswith("list_"):
                    run = partial(self._run_chosen, screen, binding.action)
                    yield SystemCommand(binding.description, text, run)

    def _run_chosen(self, screen: Screen[Any], action_id: str) -> None:
        # Called, not run_action: run_action asks check_action, which refuses an action bound
        # at once while a text field has the focus (there its key is text, but a palette
        # choice is no key).
        owner, _, name = action_id.rpartition(".")
        getattr(self if owner == "app" else screen, f"action_{name}")()


def bound_keys(screen: Screen[Any]) -> set[str]:
    """Every key bound where a key would go now: from the focused widget up to the app, or the
    screen and the app; enabled or not (a key disabled here is no stray key).

    From each node's class BINDINGS (public), as Textual merges them, rather than its private
    binding chain.
    """
    focused = screen.focused
    nodes: list[DOMNode] = list(focused.ancestors_with_self) if focused else [screen, screen.app]
    return {
        binding.key
        for node in nodes
        for cls in type(node).__mro__
        for binding in Binding.make_bindings(cls.__dict__.get("BINDINGS", []))
    }


def help_sections() -> list[Section]:
    """Every view and dialog with keys, in the order an admin meets them (these three screens
    import SQLAlchemy: imported here, after the first rows; see tui/first_rows.py)."""
    from apikey_tui.tui.screens.key_detail import KeyDetailScreen
    from apikey_tui.tui.screens.owners import OwnersScreen
    from apikey_tui.tui.screens.usage import UsageScreen

    return [
        Section(
            "Key table",
            (KeysScreen, KeyTable, KeyFilter, ApiKeysApp),
            (
                ("Ctrl+P", "command palette: every action, the theme"),
                ("click a header", "sort by it; again to reverse"),
            ),
            where=TABLE,
        ),
        Section("Key detail (Enter)", (KeyDetailScreen,), where=DETAIL),
        Section(
            "Jump to a view (:)",
            (JumpDialog,),
            (("Tab / →", "complete the view's name"), ("Enter", "go (a unique start is enough)")),
        ),
        Section("Scope catalog (c)", (ScopeCatalogScreen,)),
        Section("Audit trail (a)", (AuditTrailScreen,)),
        Section(
            "Usage (U, :usage)",
            (UsageScreen,),
            (("↑ / ↓ / PgUp / PgDn", "scroll the six lists"),),
        ),
        Section("Owners (:owners)", (OwnersScreen,)),
        Section("In the detail, catalog, audit trail and usage", (LiveScreen,)),
        Section(
            "Create a key (n), edit its scopes (e)",
            (CreateKeyDialog, EditScopesDialog, ScopePicker),
            (
                ("Tab", "next: name, scopes, expiry, Create (never Cancel)"),
                ("Enter", "name or expiry: create; scopes: choose or drop"),
            ),
        ),
        Section("In every dialog that takes text", (TypeAheadDialog,)),
        Section("The one-time reveal", (RevealSecretDialog,)),
        Section(
            "Confirmations (delete, recreate, scopes, end grace, enable)",
            (ConfirmDialog,),
            (("Tab", OTHER_BUTTON), ("Enter", "press the focused button")),
        ),
        Section("Switch owner (o), add or describe a scope", (SwitchOwnerDialog, ScopeFormDialog)),
        Section(
            "Rotate (R), disable (x), set expiry (E)",
            (AskValueDialog,),
            (("Enter", "confirm, when the value is valid"),),
        ),
        Section(
            "This help",
            (HelpScreen,),
            (("PgUp / PgDn", "a page up / down"), ("Home / End", "the top / the end")),
        ),
    ]


def run_app(store: KeyStore | OpeningStore, *, owner: str | None) -> int:
    """Run the app on an open store (the CLI decides whether it may create the database), or on
    one still opening, whose first rows were read without it (tui/first_rows.py).

    Returns 0, or 1 when an error stopped the app: then one line on stderr says what failed
    and where its traceback (without locals) was logged. An error opening the store is raised
    for the CLI to report, as it reports it when the store opens before the screen.
    """
    if isinstance(store, OpeningStore):
        label = store.first_rows.label
    else:
        label = store.label
    app = ApiKeysApp(store, owner=owner, database_label=label)
    with logging_to_file(log_path()):
        app.run()
    if isinstance(store, OpeningStore):
        store.finish()  # the CLI closes the store once its opening has ended
        if store.error is not None:
            raise store.error
    if app.failure is not None:
        print(f"apikey-tui: {app.failure}", file=sys.stderr)
        return app.return_code or 1
    return app.return_code or 0
