"""Pilot tests of the scope multi-select of the create and edit-scopes dialogs."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Button, Input

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from tests.tui.conftest import make_app
from tests.tui.test_app import add_eight_scopes, screen_lines, settle

SMALL = (80, 24)


def shown(app: ApiKeysApp, widget: Widget | None = None) -> list[str]:
    """The lines the terminal shows inside widget's borders (the whole screen by default)."""
    return screen_lines(app, (widget or app.screen).scrollable_content_region)


def flat(lines: list[str]) -> str:
    """Lines joined with single spaces, so wrapped text reads as one line."""
    return " ".join(" ".join(lines).split())


async def scope_picker(pilot: Pilot[Any], *keys: str) -> Widget:
    """Press keys that open a dialog with scopes; return its (focused) scope list."""
    await pilot.press(*keys)
    await settle(pilot)
    picker = pilot.app.screen.query_one("#scopes")
    picker.focus()
    await pilot.pause()
    return picker


# --- the scope multi-select ---------------------------------------------------------------------


async def test_the_create_dialog_marks_chosen_scopes_with_x(tui_store: KeyStore) -> None:
    """In the create dialog Space turns '[ ] project' into '[x] project'; serving stays '[ ]'."""
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        picker = await scope_picker(pilot, "n")
        app.screen.query_one("#name", Input).value = "marked"
        assert "[ ] project" in flat(shown(app, picker))
        await pilot.press("space")
        text = flat(shown(app, picker))
        assert "[x] project" in text and "[ ] serving" in text
        assert not app.screen.query_one("#create", Button).disabled
        await pilot.press("space")
        assert "[ ] project" in flat(shown(app, picker))


async def test_the_edit_scopes_dialog_marks_the_keys_scopes_with_x(tui_store: KeyStore) -> None:
    """In the detail's edit-scopes dialog the key's scope shows '[x]', another '[ ]' until Space."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        picker = await scope_picker(pilot, "enter", "e")
        text = flat(shown(app, picker))
        assert "[x] project" in text and "[ ] serving" in text
        await pilot.press("down", "space")
        assert "[x] serving" in flat(shown(app, picker))
        assert not app.screen.query_one("#save", Button).disabled


@pytest.mark.parametrize("keys", [("n",), ("enter", "e")], ids=["create", "edit"])
async def test_scope_descriptions_wrap_instead_of_being_cut(
    tui_store: KeyStore, keys: tuple[str, ...]
) -> None:
    """At 80x24 with eight scopes each description is on screen in full when its scope is."""
    add_eight_scopes(tui_store)
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        picker = await scope_picker(pilot, *keys)
        for number, scope in enumerate(tui_store.list_scopes()):
            if number:
                await pilot.press("down")
            text = flat(shown(app, picker))
            assert f"{scope.name} {scope.description}" in text, scope.name
        assert "…" not in "".join(shown(app, picker))
        buttons = list(app.screen.query(Button))
        assert buttons and all(app.screen.region.contains_region(b.region) for b in buttons)
