"""Pilot tests of the scope multi-select (create and edit-scopes dialogs) and the help screen."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Button, Input

import apikey_tui.tui
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.keys_screen import KeysScreen
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


# --- help ---------------------------------------------------------------------------------------


def row_on_screen(lines: list[str], keys: str) -> bool:
    """Whether some line shows keys as a help row: the keys, two spaces or more, then text."""
    pattern = re.compile(rf"(^|\s){re.escape(keys)}\s{{2,}}\w")
    return any(pattern.search(line) for line in lines)


async def test_help_at_80x24_says_how_to_close_and_shows_the_table_keys(
    tui_store: KeyStore,
) -> None:
    """At 80x24 help shows how to close it and the key table's keys, not just three of them."""
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        lines = shown(app)
        assert "Escape, ? or q closes" in flat(lines)
        # Every action's key (the table's own keys, Escape and the arrows, follow a page on).
        for keys in ("n", "d", "r", "/", "s", "F5", "?", "Enter", "c", "a", "o", "Space", "u"):
            assert row_on_screen(lines, keys), keys


async def test_help_scrolls_to_the_keys_of_every_view_and_dialog(tui_store: KeyStore) -> None:
    """Paging down through help at 80x24 shows the keys of the views and dialogs, and the rules."""
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        seen: list[str] = []
        for _ in range(15):  # far more pages than help has
            seen += shown(app)
            await pilot.press("pagedown")
            await pilot.pause()
        text = flat(seen)
        for keys in ("S", "t", "e", "y", "Space", "Tab", "Ctrl+P", "q"):
            assert row_on_screen(seen, keys), keys
        for title in ("Key detail (Enter)", "Scope catalog (c)", "Audit trail (a)"):
            assert title in text
        assert "← →" in text and "Home g / End G" in text and "Security rules" in text


async def test_help_ends_with_the_header_in_bold_not_in_backticks(tui_store: KeyStore) -> None:
    """Help's closing paragraph shows the header and scopes in bold, with no literal backticks."""
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("question_mark", "end")
        await pilot.pause()
        about = list(app.screen.query("#help-body Static"))[-1]
        text = flat(shown(app, about))
        assert "`" not in text and "with Authorization: ApiKey <key> instead" in text, text
        segments = [(s.text, s.style) for s in about.render_line(0) if s.text.strip()]
        assert any("Authorization" in t and style and style.bold for t, style in segments)


@pytest.mark.parametrize("key", ["escape", "q", "question_mark"])
async def test_help_closes_with_escape_q_or_question_mark(tui_store: KeyStore, key: str) -> None:
    """Each of Escape, q and ? closes help and leaves the app running on the key table."""
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert not isinstance(app.screen, KeysScreen)
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen) and app.is_running


def classes_with_bindings() -> set[type]:
    """Every class in apikey_tui.tui that declares key bindings of its own."""
    found: set[type] = set()
    package = apikey_tui.tui
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and cls.__dict__.get("BINDINGS"):
                found.add(cls)
    return found


def test_every_binding_of_every_view_and_dialog_is_in_the_help() -> None:
    """Help lists each class with key bindings and every one of their keys, so it cannot drift."""
    from apikey_tui.tui.app import help_sections
    from apikey_tui.tui.dialogs.help import help_text, key_text, own_bindings

    sections = help_sections()
    listed = {owner for section in sections for owner in section.owners}
    assert classes_with_bindings() <= listed
    for section in sections:
        shown_keys = " / ".join(keys for keys, _ in section.rows())
        for owner in section.owners:
            for binding in own_bindings(owner):
                assert key_text(binding) in shown_keys, (owner.__name__, binding.key)
    assert "Escape" in help_text(sections) and "Space" in help_text(sections)


async def test_help_counts_the_lists_the_usage_view_shows(tui_store: KeyStore) -> None:
    """Help's row for the Usage view names as many lists as the view shows (six, not four)."""
    from apikey_tui.tui.app import help_sections
    from apikey_tui.tui.dialogs.help import help_text

    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        count = len(app.screen.query(".usage-list"))
    words = {4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}
    assert f"scroll the {words[count]} lists" in help_text(help_sections())


def test_help_names_every_change_u_undoes() -> None:
    """u's help (and palette) line names each kind of change the store can undo, tags included."""
    from apikey_tui.tui.key_actions import ACTIONS
    from apikey_tui.tui.undo_words import undoable_words

    (undo,) = [action for action in ACTIONS if action.id == "undo"]
    words = undoable_words().replace(" or ", ", ").split(", ")
    assert [word for word in words if word not in undo.description] == []
