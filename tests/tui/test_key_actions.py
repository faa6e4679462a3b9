"""The one action list: both screens' bindings, the command palette and the help derive from it."""

from __future__ import annotations

from datetime import timedelta

from textual.screen import Screen

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import help_sections
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.dialogs.help import help_text
from apikey_tui.tui.key_actions import ACTIONS, DETAIL, TABLE, Where, actions
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from tests.tui.conftest import make_app
from tests.tui.test_app import settle

SCREENS: dict[Where, type[Screen[None]]] = {TABLE: KeysScreen, DETAIL: KeyDetailScreen}


def action_rows(where: Where) -> list[str]:
    """The help's row for each action a screen offers, as help_text writes it."""
    names = {
        "slash": "/",
        "question_mark": "?",
        "enter": "Enter",
        "f5": "F5",
        "space": "Space",
        "colon": ":",
        "": None,
    }
    merged: dict[str, list[str]] = {}  # help merges actions that share a description
    for a in actions(where):
        merged.setdefault(a.description, []).append(names.get(a.keys, a.keys) or ":" + a.view)
    return [f"  {' / '.join(keys)}  {text}" for text, keys in merged.items()]


def section_lines(text: str, title: str) -> list[str]:
    """The rows of the help section whose title starts with title."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title)) + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("  "))
    return lines[start:end]


def test_every_action_has_a_handler_on_each_screen_that_binds_it() -> None:
    """Each listed action with keys is bound on its screens (one reached only by the `:` jump
    has none), and each has a handler there (or on the app)."""
    from apikey_tui.tui.app import ApiKeysApp

    for action in ACTIONS:
        for where in action.screens:
            screen = SCREENS[where]
            bound = {b.action for b in screen.BINDINGS if not isinstance(b, tuple)}
            assert (action.id in bound) == bool(action.keys), (where, action.id)
            owner, _, name = action.id.rpartition(".")
            assert hasattr(ApiKeysApp if owner == "app" else screen, f"action_{name}"), action.id


async def test_palette_offers_every_key_action(tui_store: KeyStore) -> None:
    """Ctrl+P offers every action of the list on the table and on the key's detail."""
    tui_store.create_key("alice", "ci", ["project"])
    tui_store.rotate_key("alice", "ci", grace=timedelta(hours=1))  # so End grace applies
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for where, keys in ((TABLE, ()), (DETAIL, ("enter",))):
            await pilot.press(*keys)
            await settle(pilot)
            assert isinstance(app.screen, SCREENS[where])
            offered = {c.title for c in app.get_system_commands(app.screen)}
            missing = [a.title for a in actions(where) if a.title not in offered]
            # offered only for a key with a proposal: tests/tui/test_usage_app.py and
            # test_networks_app.py check them
            proposals = ("Apply right-size proposal", "Apply networks proposal")
            missing = [t for t in missing if t not in proposals]
            assert not missing, (where, missing)


async def test_palette_runs_a_lifecycle_action(tui_store: KeyStore) -> None:
    """Choosing 'Rotate key' in the palette asks for the grace, as R does."""
    tui_store.create_key("alice", "ci", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.press(*"Rotate key")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AskValueDialog)
        assert "Rotate key 'ci' of alice?" in str(app.screen.query_one(".dialog-title").render())


def test_help_lists_exactly_the_action_list() -> None:
    """The table's help section holds each table action; the detail's, exactly its actions."""
    text = help_text(help_sections())
    table = section_lines(text, "Key table")
    assert [row for row in table if row in action_rows(TABLE)] == action_rows(TABLE)
    assert section_lines(text, "Key detail") == action_rows(DETAIL)


async def test_palette_offers_every_action_after_the_filter_was_used(tui_store: KeyStore) -> None:
    """After the filter was typed in and cleared (the focus still in it, or back in the table),
    Ctrl+P still offers every table action, those bound 'at once' and t, S and M among them."""
    tui_store.create_key("alice", "ci", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for keys in (("slash", "x", "backspace"), ("escape",)):
            await pilot.press(*keys)
            await settle(pilot)
            offered = {c.title for c in app.get_system_commands(app.screen)}
            wanted = {a.title for a in actions(TABLE) if a.id != "end_grace"}
            assert wanted - offered == set(), keys
            assert {"Reverse sort", "Absolute or relative times", "Unmark all keys"} <= offered


async def test_palette_runs_an_at_once_action_from_the_filter(tui_store: KeyStore) -> None:
    """'Create key' chosen in the palette while the filter has the focus opens the dialog."""
    tui_store.create_key("alice", "ci", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("slash", "c", "backspace")
        await settle(pilot)
        await pilot.press("ctrl+p", *"Create key")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, CreateKeyDialog)


async def test_the_views_offer_their_own_actions_in_the_palette(tui_store: KeyStore) -> None:
    """Ctrl+P over the scope catalog and the audit trail offers the view's own actions."""
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        for view, titles in (("c", {"Add", "Describe", "Remove", "Filter"}),
                             ("a", {"Filter", "Leaks only"})):  # fmt: skip
            await pilot.press(view)
            await settle(pilot)
            offered = {c.title for c in app.get_system_commands(app.screen)}
            assert titles <= offered, (view, offered)
            await pilot.press("escape")
            await settle(pilot)


async def test_m_unmarks_every_marked_key(tui_store: KeyStore) -> None:
    """Space marks two keys; M unmarks both, and the help lists M."""
    for name in ("aa", "bb", "cc"):
        tui_store.create_key("alice", name, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("space", "space")
        screen = app.screen
        assert isinstance(screen, KeysScreen) and len(screen.writes.marked) == 2
        await pilot.press("M")
        await settle(pilot)
        assert screen.writes.marked == {}
    assert "  M  unmark every marked key" in section_lines(help_text(help_sections()), "Key table")
