"""Triage in the key table: the Expires column, sorting every column both ways from the keyboard
and the mouse, State by urgency, the filter's state words, and pictures at 70, 80 and 120
columns (long names that differ only at the end; the Expires column sorted by State)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from textual.pilot import Pilot

from apikey_tui.store import SORTS, KeyInfo, KeyStore, states
from apikey_tui.tui import times
from apikey_tui.tui.key_table import COLUMNS, KeyFilter, KeyTable
from apikey_tui.tui.text import fit_middle
from tests.conftest import FakeClock
from tests.tui.conftest import make_app
from tests.tui.test_app import settle
from tests.tui.test_lifecycle_app import NOW, lifecycle_keys
from tests.tui.test_snapshots import new_app, snapshot

SIZES = [(70, 24), (80, 24), (120, 40)]
TWINS = ("production-inference-gateway-eu-west-1", "production-inference-gateway-eu-west-2")


@pytest.fixture
def triage(tui_store: KeyStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> KeyStore:
    """The lifecycle keys (one in each state) with fixed ids, plus two long twin names."""
    import random

    from apikey_tui import keyformat

    rng = random.Random(19)
    monkeypatch.setattr(
        keyformat, "_random", lambda n: "".join(rng.choice(keyformat.ALPHABET) for _ in range(n))
    )
    lifecycle_keys(tui_store, clock)
    for name in TWINS:
        tui_store.create_key("alice", name, ["project"])
    tui_store.disable_key("alice", "reports", "leaked: ci.log:3")
    return tui_store


def kinds(table: KeyTable) -> list[str]:
    """The State kind of each loaded row, in the table's order."""
    return [states.marker(k, NOW)[1] for k in table.rows]


async def test_s_cycles_every_column_and_capital_s_reverses(triage: KeyStore) -> None:
    """s walks through every column's order (State and Expires included); S reverses it."""
    app = make_app(triage)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        seen = [table.sort_column]
        for _ in range(len(table.columns) - 1):
            await pilot.press("s")
            seen.append(table.sort_column)
        assert seen == table.columns and set(seen) <= set(SORTS)
        while table.sort_column != "state":
            await pilot.press("s")
        await settle(pilot)
        assert kinds(table)[0] == states.LEAKED and kinds(table)[-1] == states.ACTIVE
        await pilot.press("S")
        await settle(pilot)
        assert kinds(table)[0] == states.ACTIVE and kinds(table)[-1] == states.LEAKED


async def test_a_header_click_sorts_and_a_second_click_reverses(triage: KeyStore) -> None:
    """Clicking State sorts by urgency; again, the other way; clicking Expires, soonest first."""
    app = make_app(triage)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)

        async def click(column: str) -> None:
            x = 1 + sum(w + 2 for w in table.widths[: table.columns.index(column)])
            await pilot.click(KeyTable, offset=(x + 1, 0))
            await settle(pilot)

        await click("state")
        assert (table.sort_column, table.reverse) == ("state", False)
        order = list(dict.fromkeys(kinds(table)))
        assert order == [k for k in states.URGENCY if k in order]
        await click("state")
        assert table.reverse and kinds(table)[0] == states.ACTIVE
        await click("expires")
        assert (table.sort_column, table.reverse) == ("expires", False)
        expiries = [k.expires_at for k in table.rows]
        dated = [e for e in expiries if e is not None]
        assert expiries[: len(dated)] == sorted(dated) and expiries[-1] is None  # never: last
        assert "Expires ▲" in "".join(s.text for s in table.render_line(0))


async def test_the_filter_finds_states_and_escape_in_the_table_clears_it(
    triage: KeyStore,
) -> None:
    """'/disabled' shows the disabled keys, leaked included (not '0 keys match'); Escape in
    the table clears it."""
    app = make_app(triage)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        everyone = table.total
        await pilot.press("slash", *"disabled", "enter")
        await settle(pilot)
        # reports leaked (disabled for it), switched-off was disabled by hand
        assert [k.name for k in table.rows] == ["reports", "switched-off"] and table.has_focus
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen.query_one(KeyFilter).value == "" and table.total == everyone


@pytest.mark.parametrize(("width", "height"), SIZES)
async def test_picture_of_long_twin_names(triage: KeyStore, width: int, height: int) -> None:
    """The picture shows the two long names apart: whole where they fit, else cut in the
    middle with their different ends visible."""
    app = new_app(triage, "textual-dark")
    async with app.run_test(size=(width, height)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(KeyTable)
        drawn = ["".join(s.text for s in table.render_line(y)) for y in (4, 5)]
        assert drawn[0] != drawn[1] and "west-1" in drawn[0] and "west-2" in drawn[1]
        await snapshot(pilot, f"triage_twins_{width}x{height}")


@pytest.mark.parametrize(("width", "height"), SIZES)
async def test_picture_of_the_expires_column_sorted_by_state(
    triage: KeyStore, width: int, height: int
) -> None:
    """The picture shows the Expires column and the keys sorted by State, most urgent first."""
    app = new_app(triage, "textual-dark")
    async with app.run_test(size=(width, height)) as pilot:
        await settle(pilot)
        await _sort_by_state(pilot)
        table = app.screen.query_one(KeyTable)
        header = "".join(s.text for s in table.render_line(0))
        assert "State ▲" in header and COLUMNS["expires"] in header
        assert kinds(table)[0] == states.LEAKED
        await snapshot(pilot, f"triage_by_state_{width}x{height}")


async def _sort_by_state(pilot: Pilot[Any]) -> None:
    table = pilot.app.screen.query_one(KeyTable)
    while table.sort_column != "state":
        await pilot.press("s")
    await settle(pilot)


def test_spans_round_to_the_nearest_so_a_fresh_expiry_or_grace_reads_whole() -> None:
    """Seconds after set-expiry 3d the key reads '⚠ 3d left' and 'in 3 d'; a 2 h grace reads
    'in 2 h', not 'in 1 h'; 23 h 40 min reads '1d left'."""
    now = NOW
    key = KeyInfo("alice", "k", "ak0", ("project",), now, expires_at=now + timedelta(days=3))
    later = now + timedelta(seconds=5)
    assert states.marker(key, later) == ("⚠ 3d left", states.SOON_KIND)
    assert times.relative(key.expires_at, later) == "in 3 d"
    assert times.relative(now + timedelta(hours=2), later) == "in 2 h"
    assert times.relative(now - timedelta(minutes=59, seconds=40), now) == "1 h ago"
    soon = KeyInfo(
        "alice", "k", "ak0", ("p",), now, expires_at=now + timedelta(hours=23, minutes=40)
    )
    assert states.marker(soon, now)[0] == "⚠ 1d left"


def test_a_cut_name_keeps_both_ends() -> None:
    """fit_middle keeps the start and the end: 'production-i…ay-eu-west-2' in 25 cells."""
    name = "production-inference-gateway-eu-west-2"
    assert fit_middle(name, 25) == "production-i…ay-eu-west-2"
    assert fit_middle("short", 8) == "short   " and len(fit_middle(name, 12)) == 12
