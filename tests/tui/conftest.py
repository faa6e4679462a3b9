"""Fixtures for the terminal app: a real store on SQLite and an app assembled around it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
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
