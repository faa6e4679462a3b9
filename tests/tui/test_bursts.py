"""Keys that arrive in one read (a slow SSH link): each lands where the keys before it led."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.pilot import Pilot
from textual.widgets import DataTable, Input

from apikey_tui.store import KeyStore
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle

_CHARACTERS = {"space": " ", "slash": "/", "enter": "\r", "%": "%"}


async def burst(pilot: Pilot[Any], *keys: str) -> None:
    """Put keys in the app's queue together, as the driver does with one read, then settle.

    pilot.press waits for each key to be handled before the next: no burst.
    """
    for key in keys:
        character = _CHARACTERS.get(key, key if len(key) == 1 else None)
        pilot.app.post_message(events.Key(key, character))
    await settle(pilot)


async def test_tab_and_space_in_one_read_choose_a_scope(tui_store: KeyStore) -> None:
    """In the create dialog, 'Tab Space' in one read moves to the scopes and chooses the first:
    the space never lands in the name just left."""
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, CreateKeyDialog)
        await pilot.press(*"ci")
        await burst(pilot, "tab", "space")
        assert dialog.query_one("#name", Input).value == "ci"
        picker = dialog.query_one("#scopes", ScopePicker)
        assert app.focused is picker and list(picker.selected) == ["project"]
        await burst(pilot, "shift+tab", "space")  # back to the name: the space lands there
        assert dialog.query_one("#name", Input).value in ("ci ", " ")  # focus may select it
        assert list(picker.selected) == ["project"]


async def test_a_tab_typed_ahead_of_the_dialog_moves_on_in_order(tui_store: KeyStore) -> None:
    """'nci', Tab, Space in one read: the dialog opens with the name 'ci' and the first scope
    chosen, as if typed slowly."""
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await burst(pilot, "n", "c", "i", "tab", "space")
        dialog = app.screen
        assert isinstance(dialog, CreateKeyDialog)
        assert dialog.query_one("#name", Input).value == "ci"
        assert list(dialog.query_one("#scopes", ScopePicker).selected) == ["project"]


async def test_slash_web_enter_in_the_catalog_filters_and_never_describes(
    tui_store: KeyStore,
) -> None:
    """In the scope catalog '/web' and Enter in one read filter the scopes by 'web' and go back
    to the list: no scope's description changes (the 'e' once opened Describe, 'b' filled it)."""
    before = {s.name: s.description for s in tui_store.list_scopes()}
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ScopeCatalogScreen)
        await burst(pilot, "slash", "w", "e", "b", "enter")
        await settle(pilot)
        assert app.screen is screen
        assert screen.query_one("#scope-filter", Input).value == "web"
        await burst(pilot, "escape")  # from the list: the filter stays; the view closes
    assert {s.name: s.description for s in tui_store.list_scopes()} == before


@pytest.mark.parametrize("view", ["catalog", "detail", "usage"])
async def test_keys_after_one_the_view_lacks_never_reach_a_dialog(
    tui_store: KeyStore, view: str
) -> None:
    """A burst that starts with a key the view does not have ('%web' and Enter in the catalog,
    '/old' in a key's detail or '%dx' in Usage) opens no dialog and changes nothing; the view
    says the keys did nothing."""
    tui_store.create_key("alice", "old", ["project"])
    before = {s.name: s.description for s in tui_store.list_scopes()}
    toasts = Toasts()
    app = make_app(tui_store)
    opening, typed = {
        "catalog": (("c",), ("%", "w", "e", "b", "enter")),
        "detail": (("enter",), ("slash", "o", "l", "d")),
        "usage": (("U",), ("%", "d", "x")),
    }[view]
    async with app.run_test(size=(100, 30), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press(*opening)
        await settle(pilot)
        screen = app.screen
        await burst(pilot, *typed)
        await settle(pilot)
        assert app.screen is screen, app.screen
        assert any("did nothing" in m for m in toasts.messages), toasts.messages
        await pilot.press("d" if view == "detail" else "escape")  # a key alone acts again
        await settle(pilot)
        assert app.screen is not screen
    assert tui_store.get_key("alice", "old").name == "old"
    assert {s.name: s.description for s in tui_store.list_scopes()} == before


@pytest.mark.parametrize(("view", "table"), [("c", "#scope-table"), ("a", "#events-table")])
async def test_j_and_k_move_in_the_catalog_and_the_audit_trail(
    tui_store: KeyStore, view: str, table: str
) -> None:
    """j moves the cursor down and k up in the scope catalog and the audit trail."""
    for name in ("aa", "bb", "cc"):
        tui_store.create_key("alice", name, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press(view)
        await settle(pilot)
        rows = app.screen.query_one(table, DataTable)
        assert rows.row_count >= 2 and rows.cursor_row == 0
        await pilot.press("j")
        assert rows.cursor_row == 1
        await pilot.press("k")
        assert rows.cursor_row == 0
