"""Each reach into Textual's private API (tui.textual_private) still finds what it expects."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from textual import events
from textual.app import App
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from apikey_tui.store import KeyStore
from apikey_tui.tui import textual_private
from apikey_tui.tui.app import bound_keys
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.textual_private import (
    LayoutUpdate,
    event_clock,
    forget_clipboard,
    forward_key,
    screen_update,
)
from tests.tui.conftest import make_app
from tests.tui.test_app import settle


@pytest.mark.parametrize(
    ("owner", "name", "parameters"),
    [
        (App, "_handle_exception", ["self", "error"]),
        (App, "_fatal_error", ["self"]),
        (App, "_close_messages_no_wait", ["self"]),
        (App, "_print_error_renderables", ["self"]),
        (Screen, "_forward_event", ["self", "event"]),
        (Widget, "_forward_event", ["self", "event"]),
    ],
)
def test_each_overridden_or_called_private_method_is_still_there(
    owner: type[Any], name: str, parameters: list[str]
) -> None:
    """The private methods QuietCrashes, EarlyKeyScreen and forward_key override or call exist
    with the same parameters (an upgrade that renames one would silently bypass it)."""
    method = getattr(owner, name)
    assert list(inspect.signature(method).parameters) == parameters


def test_the_event_clock_is_the_clock_of_a_keys_time() -> None:
    """A key made between two readings of event_clock carries a time between them (the
    confirmation compares a key's time with its own mount time on that clock)."""
    before = event_clock()
    key = events.Key("enter", None)
    assert before <= key.time <= event_clock()


def test_the_module_is_the_only_one_that_names_textual_private_api() -> None:
    """No other module of the app reaches into Textual's private names."""
    import pathlib
    import re

    tui = pathlib.Path(textual_private.__file__).parent
    private = re.compile(
        r"textual\._|\._(clipboard|compositor|background_screens|binding_chain|forward_event"
        r"|exit_renderables|close_messages_no_wait)\b|def _(handle_exception|fatal_error"
        r"|print_error_renderables|forward_event)\b"
    )
    found = [
        f"{path.relative_to(tui)}:{n}"
        for path in sorted(tui.rglob("*.py"))
        if path.name != "textual_private.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []


async def test_reaches_that_read_or_write_app_state(tui_store: KeyStore) -> None:
    """forget_clipboard empties App.clipboard, screen_update draws the whole screen, and
    forward_key types into a field (bound_keys, public API, finds the table's and app's keys)."""
    app = make_app(tui_store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.copy_to_clipboard("ak_secret")
        forget_clipboard(app)
        assert app.clipboard == ""

        update = screen_update(app, simplify=False)
        assert isinstance(update, LayoutUpdate)
        assert (update.region.width, update.region.height) == (80, 24)
        assert len(update.strips) == 24

        screen = app.screen
        assert isinstance(screen, KeysScreen)
        assert {"n", "q", "slash"} <= bound_keys(screen)

        field = screen.query_one("#filter", Input)
        field.focus()
        await pilot.pause()
        key = events.Key("x", "x")
        forward_key(field, key)
        await pilot.pause()
        assert key.is_forwarded and field.value == "x"
