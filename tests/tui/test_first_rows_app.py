"""The app on a store still opening: first rows painted without it, then the store takes over."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from textual.pilot import Pilot

from apikey_tui.errors import StoreUnavailableError
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.first_rows import FirstRows, OpeningStore, read_first_rows, settled
from apikey_tui.tui.key_table import CHUNK, KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from tests.conftest import ACTOR, CHEAP, FakeClock

SIZE = (100, 30)


async def until(pilot: Pilot[Any], done: Any) -> None:
    """Let the app run until done() holds (the store opens in a thread of its own)."""
    for _ in range(500):
        if done():
            return
        await pilot.pause(0.01)
    raise AssertionError("never happened")


def first_of(sqlite_url: str, clock: FakeClock) -> FirstRows:
    """Three keys of alice's in a fresh database, read as the CLI reads them before the store."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    for name in ("ci", "deploy", "reports"):
        store.create_key("alice", name, ["project"])
    store.close()
    first = read_first_rows(sqlite_url, "alice", CHUNK)
    assert first is not None
    return first


async def test_the_first_rows_are_painted_before_the_store_opens(
    sqlite_url: str, clock: FakeClock
) -> None:
    """The table shows the rows read without the store while it has not even started opening;
    the store opens after that paint and takes over: it is bound, counts, and polls."""
    first = first_of(sqlite_url, clock)
    gate, opened = threading.Event(), []

    def open_store() -> KeyStore:
        gate.wait(10)
        store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
        opened.append(store)
        return store

    opening = OpeningStore(first, open_store)
    app = ApiKeysApp(opening, owner="alice", database_label=first.label, poll_seconds=0.2)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, KeysScreen)
            table = screen.query_one(KeyTable)
            assert [k.name for k in table.rows] == ["ci", "deploy", "reports"]
            assert table.display and table.store is None and not opened
            assert "3 keys" in str(screen.query_one("#status").render())
            gate.set()
            await until(pilot, lambda: table.store is not None)
            assert table.store is opened[0] and app.opening is None
            assert [k.name for k in table.rows] == ["ci", "deploy", "reports"]
    finally:
        gate.set()
        opening.finish()
        for store in opened:
            store.close()


async def test_an_error_opening_the_store_stops_the_app_for_the_cli(
    sqlite_url: str, clock: FakeClock
) -> None:
    """A store that fails to open after the first paint ends the app with exit code 1, its error
    kept for run_app to raise (the CLI prints it as it would have before the screen)."""
    first = first_of(sqlite_url, clock)

    def open_store() -> KeyStore:
        raise StoreUnavailableError("the database is locked")

    opening = OpeningStore(first, open_store)
    app = ApiKeysApp(opening, owner="alice", database_label=first.label, poll_seconds=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: opening.done)
        await pilot.pause(0.1)
    assert app.return_code == 1
    assert isinstance(opening.error, StoreUnavailableError)
    with pytest.raises(StoreUnavailableError):
        opening.wait()


async def test_a_store_still_opening_is_waited_for_never_guessed(
    sqlite_url: str, clock: FakeClock
) -> None:
    """Asking the app for its store before it opened waits for it (and starts it if need be)."""
    first = first_of(sqlite_url, clock)
    opened: list[KeyStore] = []

    def open_store() -> KeyStore:
        store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
        opened.append(store)
        return store

    opening = OpeningStore(first, open_store)
    app = ApiKeysApp(opening, owner="alice", database_label=first.label)
    try:
        store = await asyncio.to_thread(lambda: app.store)
        assert store is opened[0] and app.opening is None
    finally:
        for store in opened:
            store.close()


def test_settled_lets_the_opening_end_before_an_import(sqlite_url: str, clock: FakeClock) -> None:
    """settled starts an opening not yet started and returns once it ended, so that a module
    importing SQLAlchemy is never imported beside the opening thread; the store opens once."""
    first = first_of(sqlite_url, clock)
    calls: list[KeyStore] = []

    def open_store() -> KeyStore:
        store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
        calls.append(store)
        return store

    opening = OpeningStore(first, open_store)
    try:
        settled(opening)
        assert opening.done and len(calls) == 1
        settled(opening)
        settled(None)
        assert opening.wait() is calls[0] and len(calls) == 1
    finally:
        for store in calls:
            store.close()
