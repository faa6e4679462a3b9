"""A leaked key in the app: the `leaked` state, where and when it leaked, and leak events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from textual.widgets import Input

from apikey_tui.store import KeyInfo, KeyStore, Leak, states
from apikey_tui.tui.app import help_sections
from apikey_tui.tui.dialogs.help import help_text
from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from tests.conftest import FakeClock
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle
from tests.tui.test_lifecycle_app import SIZE, state_cells
from tests.tui.test_views import shown, table_cells

NOW = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)
URL = "https://github.com/acme/site/blob/main/.env"


def leak(store: KeyStore, name: str, where: str, source: str = "github") -> Leak:
    """Report key name of alice as leaked at where, as serve-leaks or scan would."""
    credential = store.credential(store.get_key("alice", name).public_id)
    assert credential is not None
    found = store.contain_leak(credential, source=source, where=where)
    assert found is not None
    return found


def test_marker_says_leaked_before_disabled() -> None:
    """A key disabled for a leak is marked 'leaked' (its own kind); any other reason 'disabled'."""
    made = NOW - timedelta(days=1)
    key = KeyInfo("alice", "k", "ak0", ("project",), made, disabled_at=NOW)
    leaked = KeyInfo(
        "alice", "k", "ak0", ("project",), made, disabled_at=NOW, disabled_reason="leaked: f:1"
    )
    assert states.marker(key, NOW) == ("disabled", states.DISABLED)
    assert states.marker(leaked, NOW) == ("leaked", states.LEAKED)


async def test_table_and_detail_show_where_and_when_a_key_leaked(
    tui_store: KeyStore, clock: FakeClock
) -> None:
    """The State column says leaked; the detail says where (URL, printable), when, and r."""
    clock.now = NOW - timedelta(hours=3)
    tui_store.create_key("alice", "ci", ["project"])
    tui_store.create_key("alice", "off", ["project"])
    tui_store.disable_key("alice", "off", "not needed")
    clock.now = NOW - timedelta(hours=2)
    leak(tui_store, "ci", URL + "\x1b[31m")
    clock.now = NOW
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert state_cells(app) == {"ci": "leaked", "off": "disabled"}
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen) and app.screen.key.name == "ci"
        fields = shown(app, "#detail-fields")
        assert "State        leaked (disabled): services refuse it (401)" in fields
        assert f"Leaked at    {URL}\\x1b[31m" in fields  # stored text, never obeyed
        assert "Reported     2 h ago (2026-11-20 10:03 UTC) · reported by github" in fields
        assert "press r to recreate it" in fields and "\x1b" not in fields


async def test_a_key_recreated_after_a_leak_keeps_its_leak_history(tui_store: KeyStore) -> None:
    """After a recreate the detail still says where the old secret leaked, and that x (not r)
    is what is left to do: a recreate leaves the key disabled."""
    tui_store.create_key("alice", "ci", ["project"])
    leak(tui_store, "ci", "src/settings.py:12", source="scan")
    tui_store.recreate_key("alice", "ci")
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        fields = shown(app, "#detail-fields")
        assert "Leaked at    src/settings.py:12" in fields
        assert "press r to recreate it" not in fields
        assert "the leaked secret no longer works (recreated since): x enables" in fields


async def test_audit_trail_l_shows_only_leak_events(tui_store: KeyStore) -> None:
    """In the audit trail, l shows only key.leak events (the action filter says so); l again
    shows every event; typing 'leak' in the action filter finds them too."""
    tui_store.create_key("alice", "ci", ["project"])
    tui_store.create_key("alice", "ok", ["project"])
    leak(tui_store, "ci", URL)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditTrailScreen)
        assert len(table_cells(app, "#events-table")) == 3
        await pilot.press("l")
        await settle(pilot)
        assert [r[1:3] for r in table_cells(app, "#events-table")] == [["key.leak", "alice/ci"]]
        assert screen.query_one("#filter-action", Input).value == "key.leak"
        await pilot.press("l")
        await settle(pilot)
        assert len(table_cells(app, "#events-table")) == 3
        screen.query_one("#filter-action", Input).value = "leak"
        await settle(pilot)
        assert [r[1] for r in table_cells(app, "#events-table")] == ["key.leak"]
    assert "l  only leak events" in help_text(help_sections())


async def test_undoing_a_disable_after_a_leak_does_not_revive_the_secret(
    tui_store: KeyStore,
) -> None:
    """x disables a key, a leak report arrives, then u and y: the undo is refused with the
    reason on screen and the key stays leaked (the undo used to enable the leaked secret)."""
    tui_store.create_key("alice", "ci", ["project"])
    toasts = Toasts()
    app = make_app(tui_store)
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("x")
        app.screen.query_one("#value", Input).value = "off for the weekend"
        await pilot.press("enter")
        await settle(pilot)
        assert tui_store.get_key("alice", "ci").disabled
        leak(tui_store, "ci", URL)
        await pilot.press("u")
        await pilot.press("y")
        await settle(pilot)
        assert tui_store.get_key("alice", "ci").leaked
        assert any("changed after the disable" in m for m in toasts.messages)
