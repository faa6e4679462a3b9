"""Daily acting in the app: copy, the `:` jump, the cursor after create, the expiry dialog,
the edit-scopes dialog with a long name, and what fits at 70 and 80 columns."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from textual.widgets import Button, Input, Static
from textual.widgets._footer import FooterKey

from apikey_tui import keyformat
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog
from apikey_tui.tui.dialogs.jump import JumpDialog, resolve
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen, holders_sentence
from tests.conftest import FakeClock
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import add_eight_scopes, on_screen, open_create, settle
from tests.tui.test_snapshots import snapshot

NOW = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)
LONG = "production-inference-gateway-eu-west-2-" + "x" * 25  # 64 characters


@pytest.fixture
def fixed_clock(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's clock stands at a fixed moment and ids come from a seeded generator, so
    pictures hold."""
    clock.now = NOW
    rng = random.Random(19)
    monkeypatch.setattr(
        keyformat, "_random", lambda n: "".join(rng.choice(keyformat.ALPHABET) for _ in range(n))
    )


async def test_y_copies_the_name_and_capital_y_the_public_id(tui_store: KeyStore) -> None:
    """y puts the key's name, Y its public id on the clipboard; the notice says OSC 52 honestly."""
    key = tui_store.create_key("alice", "ci-deploy", ["project"]).info
    toasts = Toasts()
    app = make_app(tui_store)
    async with app.run_test(size=(80, 24), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("y")
        assert app.clipboard == "ci-deploy"
        await pilot.press("Y")
        assert app.clipboard == key.public_id
        assert all("OSC 52" in m and "Paste once to check" in m for m in toasts.messages)
        assert "copied" not in " ".join(toasts.messages).lower()


async def test_colon_jumps_to_each_view_of_the_action_list(tui_store: KeyStore) -> None:
    """`:sc` opens the scope catalog, `:events` the audit trail (from the catalog), `:keys`
    returns; an unknown name keeps the prompt open and names the views."""
    app = make_app(tui_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        views: tuple[tuple[str, type], ...] = (
            ("sc", ScopeCatalogScreen),
            ("events", AuditTrailScreen),
            (":keys", KeysScreen),
        )
        for typed, screen in views:
            await pilot.press("colon")
            assert isinstance(app.screen, JumpDialog)
            await pilot.press(*typed, "enter")
            await settle(pilot)
            assert type(app.screen) is screen, typed
            assert len(app.screen_stack) <= 3  # default, keys, one view: as k9s keeps it
        await pilot.press("colon", "z", "z", "enter")
        assert isinstance(app.screen, JumpDialog)
        error = str(app.screen.query_one("#jump-error", Static).render())
        assert "no view 'zz'" in error and ":scopes" in error


def test_a_jump_takes_a_unique_start_and_refuses_an_ambiguous_one() -> None:
    """'e' is events; a start two views share is refused, naming both."""
    assert resolve("e", ["keys", "scopes", "events", "usage"]) == ("events", None)
    assert resolve(":s", ["scopes", "secrets"])[1] == "'s' could be :scopes, :secrets"
    assert resolve("  ", ["keys"]) == (None, None)


async def test_a_new_key_gets_the_cursor_and_a_hiding_filter_is_cleared(
    tui_store: KeyStore,
) -> None:
    """After creating a key while a filter hides it, the filter is empty and the cursor is on
    the new key (rows before it included)."""
    for name in ("alpha", "bravo", "charlie", "delta"):
        tui_store.create_key("alice", name, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"alp", "enter")
        await settle(pilot)
        await open_create(pilot, "charlie-2", ["project"])
        await pilot.click("#create")
        await settle(pilot)
        await pilot.press("c", "enter")  # the reveal: copy, close
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        assert app.screen.query_one("#filter", Input).value == ""
        assert table.selected is not None and table.selected.name == "charlie-2"


async def test_the_expiry_dialog_checks_as_the_store_does_and_keeps_the_text(
    tui_store: KeyStore, fixed_clock: None
) -> None:
    """E opens with no error; a past date is refused while typing (Set is off); an expiry past
    the lifetime policy, which only the store knows, opens the dialog again with the text."""
    tui_store.create_key("alice", "ci-deploy", ["project"], expires=timedelta(days=10))
    tui_store.set_lifetime_policy(timedelta(days=30))
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("E")
        dialog = app.screen
        assert isinstance(dialog, AskValueDialog)
        assert str(dialog.query_one("#value-error", Static).render()) == ""
        assert dialog.query_one("#confirm", Button).disabled
        await pilot.press(*"2020-01-01")
        assert "is not in the future" in str(dialog.query_one("#value-error", Static).render())
        assert dialog.query_one("#confirm", Button).disabled
        await pilot.press("enter")
        assert app.screen is dialog  # Enter on a refused value closes nothing
        dialog.query_one("#value", Input).value = "90d"
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot)
        again = app.screen
        assert isinstance(again, AskValueDialog) and again is not dialog
        assert again.query_one("#value", Input).value == "90d"
        assert "lifetime policy" in str(again.query_one("#value-error", Static).render())
    assert tui_store.get_key("alice", "ci-deploy").expires_at == NOW + timedelta(days=10)


@pytest.mark.parametrize(("size", "picture"), [((80, 24), "80x24"), ((120, 40), "120x40")])
async def test_edit_scopes_with_a_64_character_name_keeps_its_buttons(
    tui_store: KeyStore, fixed_clock: None, size: tuple[int, int], picture: str
) -> None:
    """With a 64-character name and eight scopes, Save and Cancel stay on screen.

    The dialog is opened over the key table, not the detail: the picture holds the dialog only
    (the detail's rows behind it lay out a frame apart from one run to the next).
    """
    add_eight_scopes(tui_store)
    key = tui_store.create_key("alice", LONG, ["project"]).info
    app = ApiKeysApp(tui_store, owner="alice", database_label="sqlite:///keys.db", poll_seconds=60)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        app.push_screen(EditScopesDialog(key, tui_store.list_scopes()))
        await settle(pilot)
        assert isinstance(app.screen, EditScopesDialog)
        assert on_screen(app, "#save") and on_screen(app, "#cancel")
        await snapshot(pilot, f"edit_scopes_long_name_{picture}")


async def test_70_columns_keep_quit_and_80_columns_keep_the_owner(tui_store: KeyStore) -> None:
    """At 70 columns the table's footer shows q Quit; at 80 the detail's top line names the
    owner beside a 64-character name."""
    tui_store.create_key("alice", LONG, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(70, 24)) as pilot:
        await settle(pilot)
        quit_key = [k for k in app.screen.query(FooterKey) if k.action in ("quit", "app.quit")]
        assert quit_key and app.screen.region.contains_region(quit_key[0].region)
        await pilot.resize_terminal(80, 24)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen)
        assert "Key of alice: " in app.screen.query_one(ContextLine).text


async def test_a_notice_holds_a_64_character_name_whole(tui_store: KeyStore) -> None:
    """At 80 columns the notice after y shows the 64-character name on one line, not cut."""
    tui_store.create_key("alice", LONG, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("y")
        await pilot.pause()
        assert LONG in app.export_screenshot()


def test_a_held_scope_names_ten_holders_then_how_many_more() -> None:
    """Of 25 holders, ten are named, then 'and 15 more'."""
    sentence = holders_sentence("project", [f"alice/k{i}" for i in range(10)], 25)
    assert "held by 25 keys" in sentence and "alice/k9 and 15 more" in sentence
