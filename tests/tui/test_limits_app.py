"""Limits in the app: the create dialog, the key's detail (use now, edit, undo) and Usage."""

from __future__ import annotations

import pytest
from textual.widgets import Button, Input, Static

from apikey_tui.db.models import MINUTE, USAGE_LIMITED, usage_minute
from apikey_tui.limits import AppliedLimit, parse_limit
from apikey_tui.limits.model import key_subject
from apikey_tui.limits.where import open_store
from apikey_tui.store import KeyStore
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.usage import UsageScreen
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import SIZE, open_create, settle
from tests.tui.test_usage_app import record
from tests.tui.test_views import open_detail, shown


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


# --- the key's detail ---------------------------------------------------------------------------


def spend(store: KeyStore, subject: str, text: str, tokens: int) -> None:
    """Grant `tokens` of a limit's current window, as verifiers' leases do."""
    limit = parse_limit(text)
    counts, _ = open_store(store.engine, None, clock=store.clock)
    counts.take(AppliedLimit(subject, limit).key, limit.count, limit.seconds, tokens, "")


async def test_the_detail_shows_each_limit_with_its_use_now(tui_store: KeyStore) -> None:
    """The key's limits and its owner's pool each show the current window's use."""
    tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("10/30d")])
    tui_store.set_owner_limits("alice", [parse_limit("100/30d")])
    spend(tui_store, key_subject("alice", "metered"), "10/30d", 9)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        fields = shown(app, "#detail-fields")
        assert "Limits       10/30d (key) · 9 used (90 %) ⚠ · ends in" in fields
        assert "             100/30d (owner's pool) · 0 used (0 %) · ends in" in fields


async def test_an_unreachable_store_of_counts_says_use_unknown_in_one_line(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the counts' Redis down the detail opens, and one line says the use is unknown."""
    monkeypatch.setenv("APIKEY_TUI_LIMITS_URL", "redis://127.0.0.1:1/0")
    tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("10/s")])
    tui_store.set_owner_limits("alice", [parse_limit("100/d")])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        lines = [x for x in shown(app, "#detail-fields").splitlines() if "10/s" in x]
        assert len(lines) == 1
        assert lines[0].startswith("Limits       10/s · owner's pool 100/d · use unknown: ")
        assert isinstance(app.screen, KeyDetailScreen)


async def test_l_edits_the_limits_audited_and_u_undoes_it(tui_store: KeyStore) -> None:
    """L asks with the limits as they are; Set limits writes them (a key.limits event), and u
    puts back exactly what the key had."""
    tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("10/s")])
    spend(tui_store, key_subject("alice", "metered"), "10/s", 0)  # a verifier counts here
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        await pilot.press("L")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, AskValueDialog)
        field = dialog.query_one(Input)
        assert field.value == "10/s"
        field.value = "600/m 10000/d"
        await pilot.press("enter")
        await settle(pilot)
        assert [str(x) for x in tui_store.get_key("alice", "metered").limits] == [
            "600/m",
            "10000/d",
        ]
        assert tui_store.events(1)[0].action == "key.limits"
        assert toasts.messages[-1] == (
            "Key 'metered' of alice now has the limits 600/m 10000/d. Press u to undo."
        )
        assert isinstance(app.screen, KeyDetailScreen)
        assert "600/m (key)" in shown(app, "#detail-fields")
        assert shown(app, "#status").startswith("u undo limits change of metered of alice · ")
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "its limits go back to 10/s (now 600/m 10000/d)" in body
        assert body.endswith("Refused, and nothing is done, if it changed since."), body
        await pilot.press("y")
        await settle(pilot)
    assert tui_store.get_key("alice", "metered").limits == (parse_limit("10/s"),)


async def test_limits_the_store_refuses_in_the_detail_ask_again_as_typed(
    tui_store: KeyStore,
) -> None:
    """Two limits of one window: the store refuses, and the dialog comes back with the text
    and the reason; 'none' then lifts every limit."""
    tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("10/s")])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        await pilot.press("L")
        await pilot.pause()
        app.screen.query_one(Input).value = "10/m 20/60s"
        await pilot.press("enter")
        await settle(pilot)
        again = app.screen
        assert isinstance(again, AskValueDialog), "the refused text is lost"
        assert again.query_one(Input).value == "10/m 20/60s"
        assert "same window" in " ".join(str(s.render()) for s in again.query(Static))
        assert tui_store.get_key("alice", "metered").limits == (parse_limit("10/s"),)
        again.query_one(Input).value = "none"
        await pilot.press("enter")
        await settle(pilot)
    assert tui_store.get_key("alice", "metered").limits == ()


# --- the Usage view -----------------------------------------------------------------------------


async def test_usage_lists_keys_refused_with_429_and_keys_near_a_limit(
    tui_store: KeyStore,
) -> None:
    """U lists the key refused with 429 (its count) and the keys and pools at 80 % or more of a
    limit now, fullest first; a key at 70 % is not listed."""
    metered = tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("5/30d")])
    for name, used in (("busy", 9), ("calm", 7)):
        tui_store.create_key("alice", name, ["project"], limits=[parse_limit("10/30d")])
        spend(tui_store, key_subject("alice", name), "10/30d", used)
    spend(tui_store, key_subject("alice", "metered"), "5/30d", 5)
    now = usage_minute(tui_store.clock())
    record(tui_store, [(metered.info.public_id, now, MINUTE, USAGE_LIMITED, "key:5/30d", 4)])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        assert isinstance(app.screen, UsageScreen)
        assert shown(app, "#usage-limited") == "metered  4 refused (429)"
        assert shown(app, "#usage-near").splitlines() == [
            "metered  5/30d: 5 used (100 %)",
            "busy     10/30d: 9 used (90 %)",
        ]


async def test_usage_says_use_unknown_when_the_store_of_counts_is_down(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the counts' Redis down the Usage view still opens; the near list says why not."""
    monkeypatch.setenv("APIKEY_TUI_LIMITS_URL", "redis://127.0.0.1:1/0")
    tui_store.create_key("alice", "metered", ["project"], limits=[parse_limit("5/30d")])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        assert shown(app, "#usage-near").startswith("use unknown: ")
        assert shown(app, "#usage-busiest") != "Loading…"
