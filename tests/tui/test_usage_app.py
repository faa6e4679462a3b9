"""The app's usage: the detail's graph, scope use, right-size; the Usage view; the column."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Sparkline, Static

from apikey_tui.db.models import (
    MINUTE,
    USAGE_ALLOWED,
    USAGE_FORBIDDEN,
    USAGE_WRONG_SECRET,
    usage_minute,
)
from apikey_tui.store import KeyStore
from apikey_tui.store.credentials import credential_source
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.usage import UsageScreen
from tests.conftest import FakeClock
from tests.tui.conftest import make_app
from tests.tui.test_app import settle
from tests.tui.test_snapshots import fixed_data, run

# 47 days after the keys' creation (November 1-3): all are older than the 30-day window.
NOW = datetime(2026, 12, 20, 12, 0, tzinfo=UTC)


def record(store: KeyStore, rows: list[tuple[str, int, int, int, str, int]]) -> None:
    """Append usage rows as a verifier's flush does."""
    source = credential_source(store.engine, clock=store.clock)
    source.record_usage(rows)
    source.close()


@pytest.fixture
def used(tui_store: KeyStore, clock: FakeClock) -> KeyStore:
    """model-client used only `project` (hourly, in a pattern); ci-deploy refused for admin;
    reports given wrong secrets."""
    clock.now = NOW
    fixed_data(tui_store)
    ids = {k.name: k.public_id for k in tui_store.list_keys("alice")}
    now = usage_minute(NOW)
    rows = []
    for hours_ago in range(7 * 24):
        requests = 1 + (hours_ago * 7) % 23  # a shape the graph shows
        minute = now - hours_ago * 60
        rows.append((ids["model-client"], minute, MINUTE, USAGE_ALLOWED, "project", requests))
    for days_ago in range(7):
        minute = now - days_ago * 1440
        rows.append((ids["ci-deploy"], minute, MINUTE, USAGE_ALLOWED, "project", 10 - days_ago))
        rows.append((ids["ci-deploy"], minute, MINUTE, USAGE_FORBIDDEN, "admin", 3))
    rows.append((ids["reports"], now - 5, MINUTE, USAGE_ALLOWED, "project", 4))
    rows.append((ids["reports"], now - 5, MINUTE, USAGE_WRONG_SECRET, "", 6))
    record(tui_store, rows)
    return tui_store


async def test_detail_shows_the_hourly_graph_scope_use_and_proposal(used: KeyStore) -> None:
    """The detail's graph holds 168 hourly counts; serving shows 0 requests and is proposed."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, KeyDetailScreen)
        graph = screen.query_one("#detail-graph", Sparkline)
        assert graph.data is not None and len(graph.data) == 168
        assert max(graph.data) == 23 and sum(graph.data) > 0
        uses = [str(s.render()) for s in screen.query(".scope-use").results(Static)]
        assert uses[1].startswith("0 req · never")  # serving
        proposal = str(screen.query_one("#detail-rightsize", Static).render())
        assert proposal.startswith("drop serving (unused for 30d), keep project")


async def test_p_asks_naming_key_and_scopes_then_applies_one_rightsize_event(
    used: KeyStore,
) -> None:
    """p asks with the key and the scopes in the question; yes narrows it with one event."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, ConfirmDialog)
        title = str(dialog.query_one(".dialog-title", Static).render())
        assert "serving" in title and "model-client" in title
        await pilot.press("y")
        await settle(pilot)
    assert used.get_key("alice", "model-client").scopes == ("project",)
    events = used.events(action="rightsize")
    assert [(e.action, e.key_name) for e in events] == [("key.rightsize", "model-client")]
    assert "removed: serving" in events[0].detail


async def test_palette_offers_the_proposal_of_a_key_that_has_one(used: KeyStore) -> None:
    """Ctrl+P on model-client's detail offers 'Apply right-size proposal' and 'Usage'."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("down", "enter")
        await settle(pilot)
        offered = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Apply right-size proposal", "Usage"} <= offered


async def test_p_is_offered_only_with_a_proposal(used: KeyStore) -> None:
    """A key with no proposal (ci-deploy used its one scope) has no p in the palette's actions."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, KeyDetailScreen) and screen.key.name == "ci-deploy"
        assert not screen.check_action("apply_rightsize", ())
        await pilot.press("p")
        await settle(pilot)
        assert app.screen is screen  # no dialog
    assert used.events(action="rightsize") == []


async def test_usage_view_lists_busiest_refused_wrong_secrets_and_proposals(
    used: KeyStore,
) -> None:
    """U opens the view; each list names the right key, the 403 list the scope it lacks."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, UsageScreen)

        def text(list_id: str) -> str:
            return str(screen.query_one(f"#usage-{list_id}", Static).render())

        assert text("busiest").splitlines()[0].startswith("model-client")
        assert "needs admin" in text("forbidden") and "ci-deploy" in text("forbidden")
        assert "reports" in text("wrong-secret") and "6 wrong secrets" in text("wrong-secret")
        assert "model-client  drop serving · keep project" in text("proposals")


async def test_usage_view_refreshes_live(used: KeyStore, clock: FakeClock) -> None:
    """Wrong secrets recorded while the view is open appear without a key press."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, UsageScreen)
        ci = used.get_key("alice", "ci-deploy").public_id
        record(used, [(ci, usage_minute(NOW), MINUTE, USAGE_WRONG_SECRET, "", 9)])
        # the change marker moves with use (last used) only: an event moves it for sure
        used.add_scope("moved", "")
        for _ in range(40):
            await pilot.pause(0.1)
            await settle(pilot)
            if "ci-deploy" in str(screen.query_one("#usage-wrong-secret", Static).render()):
                break
        assert "ci-deploy" in str(screen.query_one("#usage-wrong-secret", Static).render())


async def test_usage_view_from_the_detail_and_by_jump(used: KeyStore) -> None:
    """U on a key's detail opens the view over it; `:usage` opens it from the table."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        assert isinstance(app.screen, UsageScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen)
        await pilot.press("colon", *"usage", "enter")
        await settle(pilot)
        assert isinstance(app.screen, UsageScreen)


async def test_table_shows_seven_days_of_use_per_key(used: KeyStore) -> None:
    """At 120 columns the table has a 7-day column; ci-deploy's rises day by day."""
    app = make_app(used)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        assert "usage" in table.shown_columns
        assert table.usage_text(0) == "▃▄▅▅▆▇█"  # ci-deploy: 4 … 10 a day, oldest first, from 0
        assert table.usage_text(2) == "▁▁▁▁▁▁█"  # reports: today only


async def test_table_hides_the_column_rather_than_cut_names(used: KeyStore) -> None:
    """At 60 columns there is no 7-day column: the names keep their room."""
    app = make_app(used)
    async with app.run_test(size=(60, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        assert "usage" not in table.shown_columns


async def test_snapshot_key_detail_with_scope_use(used: KeyStore) -> None:
    """The picture shows model-client's fields and each scope's requests and last use."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("down", "enter")

    await run(used, "key_detail_usage", steps)


async def test_snapshot_key_detail_with_graph(used: KeyStore) -> None:
    """The picture shows the detail's top scrolled down: the hourly graph and the proposal."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("down", "enter")
        await settle(pilot)
        pilot.app.screen.query_one("#detail-top").scroll_end(animate=False)

    await run(used, "key_detail_graph", steps)


async def test_snapshot_usage_view(used: KeyStore) -> None:
    """The picture shows the Usage view's six lists at 80x24."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("U")

    await run(used, "usage_view", steps)


async def test_usage_view_never_runs_two_reads_of_its_lists_at_once(
    used: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes during a slow read start no second read beside it, only one more after it."""
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, UsageScreen)
        release, calls = threading.Event(), []
        real = used.usage_overview

        def slow(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            release.wait(10)
            return real(*args, **kwargs)

        monkeypatch.setattr(used, "usage_overview", slow)
        for _ in range(3):
            screen.reload()
            await pilot.pause()
        for _ in range(50):  # the first read's thread may start a little later
            if calls:
                break
            await pilot.pause(0.02)
        assert len(calls) == 1
        release.set()
        await settle(pilot)
        assert len(calls) == 2


async def test_usage_view_shows_the_first_proposals_before_they_are_counted(
    used: KeyStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With more proposals than the view shows, the first page appears while the rest are
    counted ("counting"), then the count of the rest replaces it."""
    import apikey_tui.tui.screens.usage as usage_screen

    monkeypatch.setattr(usage_screen, "LIMIT", 1)
    clock.now = NOW - timedelta(days=40)  # old enough for a proposal
    extra = used.create_key("alice", "wide", ["project", "serving"])
    clock.now = NOW
    record(used, [(extra.info.public_id, usage_minute(NOW), MINUTE, USAGE_ALLOWED, "serving", 1)])
    release, counting = threading.Event(), threading.Event()
    real = used.proposals

    def slow(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("limit") is None:  # the count: held until the test has looked
            counting.set()
            release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(used, "proposals", slow)
    app = make_app(used)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("U")
        screen = app.screen
        assert isinstance(screen, UsageScreen)
        shown = ""
        for _ in range(200):  # not settle(): it would wait for the held count
            await pilot.pause(0.02)
            shown = str(screen.query_one("#usage-proposals", Static).render())
            if counting.is_set() and "model-client" in shown:
                break
        assert shown.splitlines() == [
            "model-client  drop serving · keep project",
            "… and more (counting them): apikey-tui keys rightsize",
        ]
        assert "counting the proposals" in str(screen.query_one("#status", Static).render())
        release.set()
        await settle(pilot)
        shown = str(screen.query_one("#usage-proposals", Static).render())
        assert shown.splitlines()[1] == "… and 1 more: apikey-tui keys rightsize"
        assert "2 open proposals" in str(screen.query_one("#status", Static).render())


async def test_a_recreated_keys_use_stays_shown_as_an_old_secrets(used: KeyStore) -> None:
    """After `recreate`, the Usage view still lists reports' 4 requests and 6 wrong secrets, as
    an old secret's, and its detail names the old secret and what it did."""
    old_id = used.get_key("alice", "reports").public_id
    used.recreate_key("alice", "reports")
    app = make_app(used)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("U")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, UsageScreen)
        wrong = str(screen.query_one("#usage-wrong-secret", Static).render())
        assert "reports  6 wrong secrets (6 by an old secret)" in wrong
        busiest = str(screen.query_one("#usage-busiest", Static).render())
        assert "reports       4 requests (4 by an old secret) · 6 wrong secrets (6 by" in busiest
        await pilot.press("escape")
        await settle(pilot)
        key_table = app.screen.query_one(KeyTable)
        names = [key.name for key in key_table.rows]
        await pilot.press(*["down"] * names.index("reports"), "enter")
        await settle(pilot)
        detail = app.screen
        assert isinstance(detail, KeyDetailScreen) and detail.key.name == "reports"
        note = str(detail.query_one("#detail-graph-note", Static).render())
        assert f"old secret {old_id} (replaced " in note
        assert "4 req, 0 refused (403), 6 wrong secrets" in note


@pytest.mark.parametrize("scopeless", [0, 9], ids=["never-used", "only-scopeless-checks"])
async def test_no_proposal_never_says_every_scope_was_used_under_an_unused_scope(
    tui_store: KeyStore, clock: FakeClock, scopeless: int
) -> None:
    """An old key of two scopes that used neither (nothing, or only checks needing no scope)
    shows `0 req · never` for both, and its right-size line does not say every scope was used."""
    created = tui_store.create_key("alice", "idle", ["project", "serving"])
    clock.advance(timedelta(days=40))
    if scopeless:
        now = usage_minute(clock())
        record(tui_store, [(created.info.public_id, now - 5, MINUTE, USAGE_ALLOWED, "", 9)])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, KeyDetailScreen)
        uses = [str(s.render()) for s in screen.query(".scope-use").results(Static)]
        assert all(u.startswith("0 req · never") for u in uses) and len(uses) == 2, uses
        line = str(screen.query_one("#detail-rightsize", Static).render())
        assert "every scope was used" not in line and "no scope was used" in line, line
