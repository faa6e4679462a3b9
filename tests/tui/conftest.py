"""Fixtures for the terminal app: a real store on SQLite and an app assembled around it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from textual.message import Message
from textual.notifications import Notification, Notify

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.key_table import KeyTable, row_cells
from tests.conftest import ACTOR, CHEAP, FakeClock


@pytest.fixture
def tui_store(sqlite_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """A KeyStore on a fresh SQLite file with the cheapest argon2 profile, on the fake clock.

    The app reads its time from its store, so this clock is the app's too.
    """
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    yield store
    store.close()


def make_app(store: KeyStore, owner: str | None = "alice") -> ApiKeysApp:
    """The app as the CLI builds it, polling fast so tests need not wait long."""
    return ApiKeysApp(store, owner=owner, database_label=store.label, poll_seconds=0.2)


class Toasts:
    """The notifications an app posted, seen through run_test's public message hook.

    `toasts = Toasts()`, then `app.run_test(..., message_hook=toasts.hook)`: Textual keeps its
    own list private, and expires its entries; this keeps every one until cleared.
    """

    def __init__(self) -> None:
        self.shown: list[Notification] = []

    def hook(self, message: Message) -> None:
        """run_test's message_hook: keep each notification as the app receives it."""
        if isinstance(message, Notify):
            self.shown.append(message.notification)

    @property
    def messages(self) -> list[str]:
        """The text of each notification, oldest first."""
        return [n.message for n in self.shown]

    def clear(self, app: ApiKeysApp) -> None:
        """Take the notifications off the app's screen and forget them here."""
        app.clear_notifications()
        self.shown.clear()


def row_text(table: KeyTable, index: int) -> list[str]:
    """The cells of the table's loaded row index as displayed, uncut, without the usage column."""
    return row_cells(
        table.rows[index], table.columns, table.clock(), absolute_times=table.absolute_times
    )
