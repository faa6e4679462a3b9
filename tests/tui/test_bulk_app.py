"""Acting on many keys in the app: Space marks, one confirmation, one batch, and its undo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from textual.pilot import Pilot
from textual.widgets import Input, Static

from apikey_tui.store import KeyStore
from apikey_tui.store.audit import batch_of
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.key_table import MARK, KeyTable
from apikey_tui.tui.key_writes import named
from apikey_tui.tui.keys_screen import KeysScreen
from tests.conftest import FakeClock
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle
from tests.tui.test_snapshots import snapshot

NOW = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)
NAMES = ("billing-export", "ci-deploy", "model-client", "reports", "search-indexer")


@pytest.fixture
def five(tui_store: KeyStore, clock: FakeClock) -> KeyStore:
    """Five keys of alice with fixed public ids and times, so pictures hold."""
    clock.now = NOW - timedelta(days=3)
    for name in NAMES:
        tui_store.create_key("alice", name, ["project"])
    with tui_store.engine.begin() as conn:
        for number, name in enumerate(NAMES):
            conn.execute(
                text("UPDATE apikey_tui_key SET public_id = :p WHERE name = :n"),
                {"p": f"ak{number}bulkexample0000"[:18], "n": name},
            )
    clock.now = NOW
    return tui_store


async def mark(pilot: Pilot[Any], *names: str) -> None:
    """Put the cursor on each named key and press Space."""
    table = pilot.app.screen.query_one(KeyTable)
    for name in names:
        table.cursor_row = [k.name for k in table.rows].index(name)
        await pilot.pause()
        await pilot.press("space")
    await pilot.pause()


def status(pilot: Pilot[Any]) -> str:
    """The key table's status line."""
    return str(pilot.app.screen.query_one("#status", Static).render())


async def test_bulk_disable_of_three_then_undo(five: KeyStore) -> None:
    """Space marks three keys (a mark and a count show); x asks once, naming the three; one
    batch disables them; u asks, then restores all three; both notices say what happened."""
    toasts = Toasts()
    app = ApiKeysApp(five, owner="alice", database_label="sqlite:///keys.db", poll_seconds=60)
    async with app.run_test(size=(80, 24), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await mark(pilot, "ci-deploy", "model-client", "search-indexer")
        table = app.screen.query_one(KeyTable)
        assert "3 marked" in status(pilot)
        await snapshot(pilot, "bulk_marked_80x24")
        line = "".join(s.text for s in table.render_line(2))  # ci-deploy, the second row
        assert line.startswith(MARK + "ci-deploy")
        await pilot.press("x")
        dialog = app.screen
        assert isinstance(dialog, AskValueDialog)
        assert "Disable 3 keys?" in str(dialog.query_one(".dialog-title", Static).render())
        body = str(dialog.query_one(".dialog-body", Static).render())
        assert "ci-deploy, model-client and search-indexer" in body
        dialog.query_one("#value", Input).value = "rotating the fleet"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
        disabled = {k.name for k in five.list_keys("alice") if k.disabled}
        assert disabled == {"ci-deploy", "model-client", "search-indexer"}
        batches = {batch_of(e.detail) for e in five.events(3)}
        assert len(batches) == 1 and None not in batches
        assert "marked" not in status(pilot)
        assert status(pilot).startswith("u: undo disable of 3 keys · 5 keys")
        assert toasts.messages[-1] == (
            "Disabled 3 keys: ci-deploy, model-client and search-indexer. Press u to undo."
        )
        toasts.clear(app)
        await pilot.pause()
        await snapshot(pilot, "bulk_disabled_80x24")
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmDialog)
        title = str(app.screen.query_one(".dialog-title", Static).render())
        assert title == "Undo the disable of 3 keys?"
        await pilot.press("y")
        await settle(pilot)
        assert not any(k.disabled for k in five.list_keys("alice"))
        assert [e.action for e in five.events(3)] == ["key.restore"] * 3
        assert "u: undo" not in status(pilot)
        assert toasts.messages[-1] == "Undid the disable of 3 keys."
        toasts.clear(app)
        await pilot.pause()
        await snapshot(pilot, "bulk_undone_80x24")


async def test_a_refused_batch_keeps_the_marks_and_changes_nothing(five: KeyStore) -> None:
    """When another admin recreated a marked key meanwhile, d refuses the whole batch: no key
    is deleted, the marks stay, and the notice says why."""
    toasts = Toasts()
    app = make_app(five)
    async with app.run_test(size=(80, 24), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await mark(pilot, "reports", "ci-deploy")
        five.recreate_key("alice", "reports")
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await settle(pilot)
        assert len(five.list_keys("alice")) == 5
        assert "2 marked" in status(pilot)
        assert any("changed meanwhile" in m for m in toasts.messages)


async def test_bulk_rotate_reveals_each_new_key_once(five: KeyStore) -> None:
    """R on two marked keys rotates both in one batch and shows each new key, one after the
    other."""
    app = make_app(five)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await mark(pilot, "reports", "ci-deploy")
        await pilot.press("R")
        await pilot.press("enter")  # grace 24h
        await settle(pilot)
        shown = []
        for _ in range(2):
            reveal = app.screen
            shown.append(reveal._created.info.name)  # type: ignore[attr-defined]
            await pilot.press("c", "enter")
            await settle(pilot)
        assert sorted(shown) == ["ci-deploy", "reports"]
        assert isinstance(app.screen, KeysScreen)


def test_a_bulk_confirmation_names_at_most_five_keys() -> None:
    """Seven keys are named as five, then 'and 2 more'."""
    from apikey_tui.store import KeyInfo

    keys = [KeyInfo("alice", f"k{i}", f"ak{i}", (), NOW) for i in range(7)]
    assert named(keys) == "k0, k1, k2, k3, k4 and 2 more"
    assert named(keys[:1], owners=True) == "k0 of alice"
