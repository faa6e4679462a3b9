"""ApiKeysApp: assembled from a store and labels; run_app opens it on a database URL."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.screen import Screen

from apikey_tui.config import current_user
from apikey_tui.store import KeyStore
from apikey_tui.tui.keys_screen import KeysScreen


class ApiKeysApp(App[None]):
    """The Settings → API keys tab in a terminal."""

    CSS_PATH = "app.tcss"
    TITLE = "apikey-tui"
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(
        self,
        store: KeyStore,
        *,
        owner: str | None,
        database_label: str,
        poll_seconds: float = 2.0,
    ) -> None:
        super().__init__()
        self.store = store
        self.owner = owner  # None: every owner's keys, with an owner column
        self.database_label = database_label
        self.poll_seconds = poll_seconds
        self.default_owner = owner or current_user()

    def on_mount(self) -> None:
        self.push_screen(KeysScreen())

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, KeysScreen):
            s = screen
            yield SystemCommand(
                "Create key", "Name, scopes; the key is shown once", s.action_create
            )
            yield SystemCommand("Delete key", "Services refuse it at once", s.action_delete)
            yield SystemCommand("Recreate key", "For a stolen key: new secret", s.action_recreate)
            yield SystemCommand("Filter keys", "By name, id, scope or owner", s.action_focus_filter)
            yield SystemCommand("Sort keys", "Sort by the next column", s.action_sort)
            yield SystemCommand("Reload keys", "Read the database now", s.action_reload)
            yield SystemCommand("Help", "Keys, actions and security rules", s.action_help)


def run_app(database_url: str, *, owner: str | None) -> int:
    """Open the app on a database; return the process exit code."""
    store = KeyStore.open(database_url)
    try:
        ApiKeysApp(store, owner=owner, database_label=store.label).run()
    finally:
        store.close()
    return 0
