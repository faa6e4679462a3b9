"""Limits in the app: the create dialog, the key's detail (use now, edit, undo) and Usage."""

from __future__ import annotations

from textual.widgets import Button, Input, Static

from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from tests.tui.conftest import make_app
from tests.tui.test_app import SIZE, open_create, settle


def text_of(widget: Static) -> str:
    return str(widget.render())


async def test_create_gives_the_key_the_limits_typed(tui_store: KeyStore) -> None:
    """Limits typed in the create dialog ('600/m 10000/d') become the new key's limits."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "metered", ["project"])
        dialog.query_one("#limits", Input).value = "600/m 10000/d"
        await pilot.pause()
        await pilot.click("#create")
        await settle(pilot)
    assert [str(x) for x in tui_store.get_key("alice", "metered").limits] == ["600/m", "10000/d"]


async def test_a_malformed_limit_is_said_under_the_field_and_create_waits(
    tui_store: KeyStore,
) -> None:
    """A limit the model cannot read disables Create and says why under the Limits field."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "metered", ["project"])
        dialog.query_one("#limits", Input).value = "600/minute"
        await pilot.pause()
        assert "N/DURATION" in text_of(dialog.query_one("#limits-error", Static))
        assert dialog.query_one("#create", Button).disabled
        dialog.query_one("#limits", Input).value = "600/m"
        await pilot.pause()
        assert not dialog.query_one("#limits-error", Static).display
        assert not dialog.query_one("#create", Button).disabled


async def test_limits_the_store_refuses_reopen_the_dialog_with_the_form(
    tui_store: KeyStore,
) -> None:
    """Two limits of one window: the store refuses, and the dialog comes back as typed with
    the reason under Limits (the focus there); fixed, the key is created."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "metered", ["project"])
        dialog.query_one("#limits", Input).value = "10/m 20/60s"
        await pilot.pause()
        await pilot.click("#create")
        await settle(pilot)
        again = app.screen
        assert isinstance(again, CreateKeyDialog), "the refused form is lost"
        assert again.query_one("#name", Input).value == "metered"
        assert again.query_one("#limits", Input).value == "10/m 20/60s"
        assert "same window" in text_of(again.query_one("#limits-error", Static))
        assert again.query_one("#create", Button).disabled  # until the limits are edited
        assert again.focused is again.query_one("#limits", Input)
        again.query_one("#limits", Input).value = "10/m"
        await pilot.pause()
        await pilot.click("#create")
        await settle(pilot)
    assert tui_store.get_key("alice", "metered").limits == (parse_limit("10/m"),)
