"""The app's writes as one object: refusals reopen their dialog, every worker's failure is said."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from textual.widgets import Button, Input, Static

from apikey_tui.store import KeyStore
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.workers import StoreRunner
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle
from tests.tui.test_key_table import add_keys


async def test_a_create_the_lifetime_policy_refuses_reopens_the_dialog_with_the_form(
    tui_store: KeyStore,
) -> None:
    """n, a name, a scope, 400d past a 30-day policy, Enter: the dialog comes back as typed."""
    tui_store.set_lifetime_policy(timedelta(days=30))
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("n", *"ci-deploy")
        dialog = app.screen
        assert isinstance(dialog, CreateKeyDialog)
        dialog.query_one("#scopes", ScopePicker).select("project")
        dialog.query_one("#expires", Input).value = "400d"
        await pilot.pause()
        dialog.query_one("#name", Input).focus()
        await pilot.press("enter")
        await settle(pilot)
        again = app.screen
        assert isinstance(again, CreateKeyDialog), "the refused form is lost"
        assert again.query_one("#name", Input).value == "ci-deploy"
        assert again.query_one("#expires", Input).value == "400d"
        assert again.query_one("#scopes", ScopePicker).selected == ("project",)
        assert "lifetime policy" in str(again.query_one("#expires-error", Static).render())
        assert again.query_one("#create", Button).disabled  # until the expiry is edited
        assert again.focused is again.query_one("#expires", Input)  # the field refused
        again.query_one("#expires", Input).value = "20d"
        await pilot.pause()
        assert not again.query_one("#create", Button).disabled
        await pilot.click("#create")
        await settle(pilot)
    assert tui_store.get_key("alice", "ci-deploy").expires_at == tui_store.clock() + timedelta(
        days=20
    )


async def test_an_unforeseen_error_reading_the_usage_column_is_said(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page of rows read later whose usage read fails unforeseen says so in one line (it was
    lost silently: that worker caught ApiKeyError only)."""
    add_keys(tui_store, 300)
    reads = 0
    real = tui_store.daily_requests

    def daily_requests(public_ids: list[str], days: int) -> dict[str, tuple[int, ...]]:
        nonlocal reads
        reads += 1
        if reads > 1:  # the first page's read works; the next page's fails
            raise RuntimeError("a bug in the usage read")
        return real(public_ids, days)

    monkeypatch.setattr(tui_store, "daily_requests", daily_requests)
    toasts = Toasts()
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("G")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
    assert reads > 1
    assert any("failed on an unexpected error (RuntimeError)" in m for m in toasts.messages), (
        toasts.messages
    )


async def test_a_store_call_the_database_does_not_answer_is_said_while_it_waits(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete whose database call does not return (a frozen server acknowledges TCP, so no
    socket bound ends it) is said after the runner's patience, then done when it answers."""
    tui_store.create_key("alice", "held", ["project"])
    answer = threading.Event()
    real = tui_store.delete_key

    def frozen(*args: Any, **kwargs: Any) -> Any:
        answer.wait(30)  # the server thaws when the test says so
        return real(*args, **kwargs)

    monkeypatch.setattr(tui_store, "delete_key", frozen)
    monkeypatch.setattr(StoreRunner, "patience", 0.2)
    toasts = Toasts()
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("d", "y")
        for _ in range(100):  # until the warning comes (a hang detector, not a timing bound)
            if any("has not answered" in m for m in toasts.messages):
                break
            await pilot.pause(0.05)
        waiting = [m for m in toasts.messages if "has not answered" in m]
        assert len(waiting) == 1 and "held" in waiting[0], toasts.messages
        answer.set()
        await settle(pilot)
    assert tui_store.list_keys("alice") == []
