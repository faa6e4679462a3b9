"""The key lifecycle in the app: State markers, the detail's expiry and grace, and each action."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Button, Input

from apikey_tui import keyformat
from apikey_tui.errors import InvalidKeyError
from apikey_tui.store import KeyInfo, KeyStore, states
from apikey_tui.tui.app import ApiKeysApp, help_sections
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.help import help_text
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP, FakeClock
from tests.tui.conftest import Toasts, make_app, row_text
from tests.tui.test_app import settle
from tests.tui.test_snapshots import new_app, snapshot

SIZE = (100, 30)
NOW = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)


def lifecycle_keys(store: KeyStore, clock: FakeClock) -> None:
    """One key of each kind, made on the store's clock: expired, soon, far, grace, off, unused."""
    clock.now = NOW - timedelta(days=100)
    store.create_key("alice", "old-unused", ["project"])
    clock.now = NOW - timedelta(days=5)
    store.create_key("alice", "ci-deploy", ["project"], expires=timedelta(days=5))  # expired now
    store.create_key("alice", "model-client", ["project", "serving"], expires=timedelta(days=8))
    store.create_key("alice", "reports", ["project"], expires=timedelta(days=400))
    store.create_key("alice", "rotated", ["project", "serving"])
    store.create_key("alice", "switched-off", ["project"])
    clock.now = NOW - timedelta(hours=1)
    store.rotate_key("alice", "rotated", grace=timedelta(hours=24))
    store.disable_key("alice", "switched-off", "leaked in a CI log")
    clock.now = NOW


@pytest.fixture
def fixed(tui_store: KeyStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> KeyStore:
    """The lifecycle keys with fixed ids and secrets, on one fixed clock for store and app."""
    rng = random.Random(9)
    monkeypatch.setattr(
        keyformat, "_random", lambda n: "".join(rng.choice(keyformat.ALPHABET) for _ in range(n))
    )
    lifecycle_keys(tui_store, clock)
    return tui_store


def state_cells(app: ApiKeysApp) -> dict[str, str]:
    """Each loaded key's State cell, by name."""
    table = app.screen.query_one(KeyTable)
    column = table.columns.index("state")
    return {k.name: row_text(table, i)[column] for i, k in enumerate(table.rows)}


async def select(pilot: Pilot[Any], name: str) -> None:
    """Put the table cursor on the key called name."""
    await settle(pilot)
    table = pilot.app.screen.query_one(KeyTable)
    table.cursor_row = [k.name for k in table.rows].index(name)
    await pilot.pause()


async def answer(pilot: Pilot[Any], value: str) -> None:
    """Type value into the open AskValueDialog and press Enter."""
    dialog = pilot.app.screen
    assert isinstance(dialog, AskValueDialog)
    dialog.query_one("#value", Input).value = value
    await pilot.pause()
    await pilot.press("enter")
    await settle(pilot)


# --- markers ---------------------------------------------------------------------------------


def test_markers_follow_the_cli_rules_at_the_second() -> None:
    """Expired from the second of expiry, soon within 14 days, unused exactly as --unused 90d."""
    made = NOW - timedelta(days=90)
    key = KeyInfo("alice", "k", "ak0", ("project",), made, expires_at=NOW + timedelta(days=14))
    assert states.marker(key, NOW) == ("⚠ 14d left", states.SOON_KIND)
    # a second earlier: 14 days and a second from expiry, a second short of 90 days unused
    assert states.marker(key, NOW - timedelta(seconds=1))[1] == states.ACTIVE
    never = KeyInfo("alice", "k", "ak0", ("project",), made)
    assert states.marker(never, NOW) == ("unused", states.UNUSED)
    assert states.marker(key, NOW + timedelta(days=14))[1] == states.EXPIRED
    used = KeyInfo("alice", "k", "ak0", ("project",), made, last_used_at=NOW - timedelta(days=89))
    assert states.marker(used, NOW) == ("active", states.ACTIVE)
    assert states.span(timedelta(hours=20, minutes=59)) == "21h"  # the nearest hour


async def test_table_marks_each_state_and_agrees_with_the_cli(fixed: KeyStore) -> None:
    """The State column says expired, ⚠ 3d left, disabled, ↻ grace, unused or active."""
    app = make_app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert state_cells(app) == {
            "ci-deploy": "expired",
            "model-client": "⚠ 3d left",
            "old-unused": "unused",
            "reports": "active",
            "rotated": "↻ grace",
            "switched-off": "disabled",
        }
    unused = {k.name for k in fixed.list_keys("alice", unused_for=states.UNUSED_AFTER)}
    assert unused == {"old-unused"}  # the others were made 5 days ago


async def test_at_80_columns_with_every_owner_owner_and_state_show_whole(fixed: KeyStore) -> None:
    """--all at 80x24: each row shows its owner and its whole State marker ('⚠ 3d left', never
    '⚠ 3d le…'); no cell on screen ends in a cut."""
    app = make_app(fixed, owner=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        cells = state_cells(app)
        for y, key in enumerate(table.rows, start=1):
            drawn = "".join(s.text for s in table.render_line(y))
            assert drawn.startswith(f" {key.owner} ") and f" {cells[key.name]} " in drawn
            assert "…" not in drawn
        assert "⚠ 3d left" in cells.values()


# --- actions ---------------------------------------------------------------------------------


async def test_rotate_reveals_once_and_the_old_secret_works_in_grace(tui_store: KeyStore) -> None:
    """R with 24h shows the new key once; the old id is in grace and both secrets verify."""
    old = tui_store.create_key("alice", "svc", ["project"])
    verifier = Verifier(tui_store.engine, hasher=CHEAP, revocation_bound=0)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("R")
        assert isinstance(app.screen, AskValueDialog)
        assert app.screen.query_one("#value", Input).value == "24h"
        await answer(pilot, "24h")
        assert isinstance(app.screen, RevealSecretDialog)
        assert [type(s) for s in app.screen_stack].count(RevealSecretDialog) == 1
        await pilot.press("c")
        new = app.clipboard
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen) and app.clipboard == ""
        assert state_cells(app) == {"svc": "↻ grace"}
    info = tui_store.get_key("alice", "svc")
    assert info.old_public_id == old.info.public_id != info.public_id
    assert info.grace_until == (info.created_at + timedelta(hours=24)).replace(microsecond=0)
    assert verifier.verify(f"ApiKey {new}").key_name == "svc"
    assert verifier.verify(f"ApiKey {old.plaintext}").key_name == "svc"


async def test_rotate_refuses_a_bad_grace(tui_store: KeyStore) -> None:
    """A grace such as '1 day' is refused as typed (the CLI's parser); Rotate stays disabled."""
    tui_store.create_key("alice", "svc", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("R")
        dialog = app.screen
        dialog.query_one("#value", Input).value = "1 day"
        await pilot.pause()
        assert dialog.query_one("#confirm", Button).disabled
        assert "30s, 15m, 24h or 90d" in str(dialog.query_one("#value-error").render())
        await pilot.press("enter", "escape")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
    assert tui_store.get_key("alice", "svc").old_public_id is None


async def test_detail_shows_the_grace_and_o_ends_it(tui_store: KeyStore) -> None:
    """The detail says 'old secret … retiring at …'; O and y stop the old secret now."""
    old = tui_store.create_key("alice", "svc", ["project"]).info.public_id
    tui_store.rotate_key("alice", "svc", grace=timedelta(hours=2))
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        fields = str(app.screen.query_one("#detail-fields").render())
        assert f"{old} retiring at" in fields and "Rotated by" in fields
        await pilot.press("O")
        assert isinstance(app.screen, ConfirmDialog)
        assert "svc" in str(app.screen.query_one(".dialog-title").render())
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen)
        assert "retiring" not in str(app.screen.query_one("#detail-fields").render())
        assert any(f"{old} of 'svc' stopped working" in n for n in toasts.messages)
    assert tui_store.get_key("alice", "svc").old_public_id is None


async def test_disable_with_a_reason_then_enable(tui_store: KeyStore) -> None:
    """x asks for a reason and disables (refused by a verifier); x again, y enables it."""
    plaintext = tui_store.create_key("alice", "svc", ["project"]).plaintext
    verifier = Verifier(tui_store.engine, hasher=CHEAP, revocation_bound=0)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await answer(pilot, "leaked in a CI log")
        assert state_cells(app) == {"svc": "disabled"}
        with pytest.raises(InvalidKeyError):
            verifier.verify(f"ApiKey {plaintext}")
        info = tui_store.get_key("alice", "svc")
        assert info.disabled and info.disabled_reason == "leaked in a CI log"
        await pilot.press("x")
        assert isinstance(app.screen, ConfirmDialog)
        assert "leaked in a CI log" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("y")
        await settle(pilot)
        assert state_cells(app) == {"svc": "active"}
    assert not tui_store.get_key("alice", "svc").disabled
    assert verifier.verify(f"ApiKey {plaintext}").key_name == "svc"


async def test_set_expiry_and_never(tui_store: KeyStore, clock: FakeClock) -> None:
    """E with 7d sets the expiry a week from the store's now; E with never clears it."""
    clock.now = NOW
    tui_store.create_key("alice", "svc", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("E")
        await answer(pilot, "7d")
        assert tui_store.get_key("alice", "svc").expires_at == NOW + timedelta(days=7)
        assert any("now expires 2026-11-27 12:03:00 UTC" in n for n in toasts.messages)
        await pilot.press("E")
        await answer(pilot, "never")
    assert tui_store.get_key("alice", "svc").expires_at is None


@pytest.mark.parametrize(
    ("keys", "value", "changed"),
    [
        ("R", "24h", lambda i: i.old_public_id is not None),
        ("x", "why", lambda i: i.disabled),
        ("E", "7d", lambda i: i.expires_at is not None),
    ],
)
async def test_a_key_recreated_while_asking_is_refused(
    tui_store: KeyStore, keys: str, value: str, changed: Callable[[KeyInfo], bool]
) -> None:
    """If the key is recreated while the dialog is open, nothing is done and the app says so."""
    tui_store.create_key("alice", "busy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press(keys)
        recreated = tui_store.recreate_key("alice", "busy").info
        await answer(pilot, value)
        assert any("changed meanwhile" in n and "nothing was done" in n for n in toasts.messages)
        assert not any(isinstance(s, RevealSecretDialog) for s in app.screen_stack)
    info = tui_store.get_key("alice", "busy")
    assert info == recreated and not changed(info)


async def test_end_grace_of_a_key_rotated_meanwhile_is_refused(tui_store: KeyStore) -> None:
    """O confirmed after another rotation does nothing: the grace the admin saw is not ended."""
    tui_store.create_key("alice", "busy", ["project"])
    tui_store.rotate_key("alice", "busy", grace=timedelta(hours=1))
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("O")
        assert isinstance(app.screen, ConfirmDialog)
        again = tui_store.rotate_key("alice", "busy", grace=timedelta(hours=1)).info
        await pilot.press("y")
        await settle(pilot)
        assert any("changed meanwhile" in n for n in toasts.messages)
    assert tui_store.get_key("alice", "busy").old_public_id == again.old_public_id


async def test_end_grace_is_offered_only_for_a_key_in_grace(fixed: KeyStore) -> None:
    """O (end grace) is an active binding and a detail hint only while the key's grace runs."""
    app = make_app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        for name, in_grace in (("reports", False), ("rotated", True), ("reports", False)):
            await select(pilot, name)
            assert ("O" in app.screen.active_bindings) is in_grace, name
            await pilot.press("enter")
            await settle(pilot)
            assert isinstance(app.screen, KeyDetailScreen)
            assert ("O" in app.screen.active_bindings) is in_grace, name
            status = str(app.screen.query_one("#status").render())
            assert ("O end grace" in status) is in_grace, status
            await pilot.press("escape")
            await settle(pilot)


def test_help_lists_the_lifecycle_keys() -> None:
    """Help names R, O, x and E in the table and the detail, from their bindings."""
    text = help_text(help_sections())
    for line in ("R  rotate", "O  end the grace", "x  disable", "E  set the expiry"):
        assert line in text
    assert text.count("R  rotate: new secret") == 2  # the table's and the detail's


# --- pictures at 80x24 -------------------------------------------------------------------------


async def test_snapshot_lifecycle_table(fixed: KeyStore) -> None:
    """The picture shows expired, ⚠ 3d left, disabled, ↻ grace, unused and active keys."""
    app = new_app(fixed, "textual-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "reports")  # the cursor on a plain key: every marker's colour shows
        await snapshot(pilot, "lifecycle_table")


async def test_snapshot_detail_of_a_key_in_grace(fixed: KeyStore) -> None:
    """The picture shows the rotated key: expiry, the old secret retiring at …, its events."""
    app = new_app(fixed, "textual-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "rotated")
        await pilot.press("enter")
        await settle(pilot)
        await snapshot(pilot, "key_detail_grace")


async def test_snapshot_rotate_dialog(fixed: KeyStore) -> None:
    """The picture shows the rotate dialog naming the key, the grace input and its buttons."""
    app = new_app(fixed, "textual-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "rotated")
        await pilot.press("R")
        await settle(pilot)
        await snapshot(pilot, "rotate_dialog")


async def test_a_rotated_keys_detail_shows_every_scope_without_scrolling_at_80x24(
    fixed: KeyStore,
) -> None:
    """At 80x24 the detail of a key in grace shows all its fields and scopes at once (the
    usage graph below them may need a scroll)."""
    app = new_app(fixed, "textual-dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await select(pilot, "rotated")
        await pilot.press("enter")
        await settle(pilot)
        top = app.screen.query_one("#detail-top")
        lines = list(app.screen.query("#detail-scopes > Horizontal"))
        assert len(lines) == 2
        assert top.scroll_y == 0
        for line in lines:  # each scope wholly inside the top's visible part
            assert line.region.height == 1 and top.region.contains_region(line.region)
