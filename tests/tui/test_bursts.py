"""Keys that arrive in one read (a slow SSH link): each lands where the keys before it led."""

from __future__ import annotations

from typing import Any

from textual import events
from textual.pilot import Pilot
from textual.widgets import Input

from apikey_tui.store import KeyStore
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.scope_picker import ScopePicker
from tests.tui.conftest import make_app
from tests.tui.test_app import settle

_CHARACTERS = {"space": " ", "slash": "/", "enter": "\r"}


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
