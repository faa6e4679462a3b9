"""The key table: windows read from the database, truncation with '…', pinned columns, keys.

Store tests run on SQLite and PostgreSQL; pilot tests on SQLite with a fixed clock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert
from textual import events
from textual.pilot import Pilot
from textual.strip import Strip

from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.store import KeyQuery, KeyStore, key_filter
from apikey_tui.tui.key_table import FILTER_MAX, KeyFilter, KeyTable
from apikey_tui.tui.text import fit
from apikey_tui.tui.times import relative
from tests.conftest import FakeClock
from tests.tui.conftest import make_app, row_text
from tests.tui.test_app import settle

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
LONG = "a-very-long-key-name-for-the-nightly-reporting-job-of-team-42"  # 61 characters
LONG_TWIN = LONG[:-1] + "3"  # differs only in the last character


@pytest.fixture(autouse=True)
def fixed_clock(clock: FakeClock) -> None:
    """The app's clock stands at NOW: relative times are computed against it."""
    clock.now = NOW


def add_keys(store: KeyStore, count: int, owner: str = "alice", prefix: str = "key") -> None:
    """count keys named prefix-0000… with created one minute apart (fake hashes: display only)."""
    rows = [
        {
            "owner": owner,
            "name": f"{prefix}-{n:04d}",
            "public_id": "ak" + (prefix + owner)[:6].ljust(6, "x") + f"{n:010d}",
            "secret_hash": "not-a-hash",
            "created_at": NOW - timedelta(minutes=count - n),
            "last_used_at": None if n % 2 else NOW - timedelta(minutes=3 + n),
        }
        for n in range(count)
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(KeyRow), rows)
        key = KeyRow.__table__  # type: ignore[attr-defined]
        names = [r["name"] for r in rows]
        ids = conn.execute(key.select().where(key.c.owner == owner, key.c.name.in_(names))).all()
        conn.execute(insert(KeyScopeRow), [{"key_id": r.id, "scope": "project"} for r in ids])


def status_line(app: Any) -> str:
    """The keys screen's status line as shown."""
    return str(app.screen.query_one("#status").render())


def line(table: KeyTable, y: int) -> str:
    strip: Strip = table.render_line(y)
    return "".join(segment.text for segment in strip)


async def loaded(pilot: Pilot[Any]) -> KeyTable:
    await settle(pilot)
    return pilot.app.screen.query_one(KeyTable)


# --- the store's window ---------------------------------------------------------------------------


def test_window_count_and_position_agree_with_a_full_sort(store: KeyStore) -> None:
    """Every indexed sort, both directions: windows, keyset pages and positions match a Python
    sort (the computed ones, State, Expires and Scopes: tests/test_key_orders.py)."""
    add_keys(store, 30)
    add_keys(store, 5, owner="bob", prefix="b")
    everything = store.list_keys()
    sort_keys: dict[str, Any] = {
        "owner": lambda k: (k.owner, k.name),
        "name": lambda k: (k.name, k.owner),
        "public_id": lambda k: k.public_id,
        "created": lambda k: (k.created_at, k.owner, k.name),
        "last_used": lambda k: (k.last_used_at is not None, k.last_used_at or NOW, k.owner, k.name),
    }
    for owner in (None, "alice"):
        for sort in sort_keys:
            for reverse in (False, True):
                query = KeyQuery(owner, "", sort, reverse)
                mine = [k for k in everything if owner is None or k.owner == owner]
                expected = sorted(mine, key=sort_keys[sort], reverse=reverse)
                assert store.count_keys(query) == len(expected)
                assert store.key_window(query, 0, 100) == expected, (owner, sort, reverse)
                total = len(expected)
                assert (
                    store.key_window(query, 20, 7, total=total) == expected[20:27]
                )  # from the end
                assert store.key_window(query, 0, 5, after=expected[9]) == expected[10:15]
                assert store.key_window(query, 0, 5, before=expected[9]) == expected[4:9]
                for index in (0, 13, total - 1):
                    key = expected[index]
                    assert store.key_position(query, key.owner, key.name) == index


def test_window_filter_matches_name_id_owner_and_scope(store: KeyStore) -> None:
    """The filter is case-insensitive; '%' and '_' are literal; a scope name matches its keys."""
    add_keys(store, 3)
    store.create_key("bob", "Deploy_Prod", ["serving"])

    def names(text: str) -> list[str]:
        return [k.name for k in store.key_window(KeyQuery(None, text), 0, 50)]

    assert names("deploy_") == ["Deploy_Prod"]
    assert names("%") == []
    assert names("serv") == ["Deploy_Prod"]  # the scope
    assert names("BOB") == ["Deploy_Prod"]  # the owner
    assert names("key-0001") == ["key-0001"]
    assert store.key_position(KeyQuery(None, "serv"), "alice", "key-0001") is None


# --- drawing ------------------------------------------------------------------------------------


def test_fit_cuts_with_an_ellipsis_and_relative_times_read_naturally() -> None:
    """A cut cell ends in '…'; times read 'just now', '3 min ago', '2 d ago', 'in 5 h', 'never'.

    The one wording of tui.times: the table, the detail and the dialogs all say it this way.
    """
    assert fit("abcdef", 4) == "abc…" and fit("ab", 4) == "ab  "
    assert relative(NOW - timedelta(seconds=5), NOW) == "just now"
    assert relative(NOW - timedelta(minutes=3), NOW) == "3 min ago"
    assert relative(NOW - timedelta(days=2, hours=1), NOW) == "2 d ago"
    assert relative(NOW + timedelta(hours=5, minutes=2), NOW) == "in 5 h"
    assert relative(None, NOW) == "never"


@pytest.mark.parametrize(("width", "height"), [(70, 24), (80, 24), (120, 40)])
async def test_long_names_that_differ_only_at_the_end_look_different(
    tui_store: KeyStore, width: int, height: int
) -> None:
    """Two 61-character names differing in their last character are cut in the middle: both
    show their start and their different end; the wider the terminal, the more of the name."""
    tui_store.create_key("alice", LONG, ["project"])
    tui_store.create_key("alice", LONG_TWIN, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(width, height)) as pilot:
        table = await loaded(pilot)
        name = table.widths[table.columns.index("name")]
        first, second = line(table, 1)[1 : 1 + name], line(table, 2)[1 : 1 + name]
        assert first != second and "…" in first
        assert first.startswith("a-very-long") and first.endswith("team-42")
        assert second.endswith("team-43")
        assert row_text(table, 0)[0] == LONG  # the value itself is whole
        assert name >= 24
        if width == 120:  # the free width goes to the name: the row fills the table
            assert table.virtual_size.width == table.scrollable_content_region.width


async def test_all_owners_at_80_columns_pins_owner_and_name(tui_store: KeyStore) -> None:
    """--all at 80 columns: owner and name keep a readable width (both ends), State and the
    times show whole, the rest scrolls sideways whole; the right arrow never moves the names."""
    tui_store.create_key("a-rather-long-owner-name", LONG, ["project", "serving"])
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await loaded(pilot)
        header = line(table, 0)
        for title in ("Owner", "Name", "State", "Expires", "Last used"):
            assert title in header
        row = line(table, 1)
        assert row.startswith(" a-rath…-name") and "a-very-long-k…ob-of-team-42" in row
        assert "unused" not in row and " active " in row and " never " in row
        seen: set[str] = set()
        for _ in range(12):
            await pilot.press("right", "right", "right", "right", "right")
            moved = line(table, 1)
            assert moved.startswith(row[:42])  # owner and name stay
            seen.update(w for w in ("project serving", "2026-", "h ago") if w in moved)
        assert "project serving" in seen  # scopes whole, never 'project se…'


async def test_j_k_g_and_capital_g_move_the_cursor(tui_store: KeyStore) -> None:
    """j/k move one row; G goes to the last key (read from the database), g to the first."""
    add_keys(tui_store, 250)
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        await pilot.press("j", "j", "k")
        assert table.cursor_row == 1
        await pilot.press("G")
        await settle(pilot)
        assert table.selected is not None and table.selected.name == "key-0249"
        await pilot.press("g")
        assert table.selected is not None and table.selected.name == "key-0000"


async def test_capital_s_reverses_the_sort(tui_store: KeyStore) -> None:
    """S flips the order of the current column; the header arrow says so."""
    add_keys(tui_store, 3)
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        assert [k.name for k in table.rows] == ["key-0000", "key-0001", "key-0002"]
        await pilot.press("S")
        await settle(pilot)
        assert [k.name for k in table.rows] == ["key-0002", "key-0001", "key-0000"]
        assert "Name ▼" in line(table, 0)


async def test_escape_clears_the_filter(tui_store: KeyStore) -> None:
    """Escape in the filter empties it (every key is back); a second Escape returns to the table."""
    add_keys(tui_store, 3)
    tui_store.create_key("alice", "deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        await pilot.press("slash", "d", "e", "p")
        await settle(pilot)
        assert [k.name for k in table.rows] == ["deploy"]
        await pilot.press("escape")
        await settle(pilot)
        box = app.screen.query_one(KeyFilter)
        assert box.value == "" and len(table.rows) == 4 and box.has_focus
        await pilot.press("escape")
        assert table.has_focus


async def test_times_are_relative_and_t_shows_them_absolute(tui_store: KeyStore) -> None:
    """With a fixed clock the row reads '3 min ago'; t switches to the UTC time and back."""
    add_keys(tui_store, 1)
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        times = [table.columns.index(c) for c in ("expires", "last_used", "created")]
        assert [row_text(table, 0)[i] for i in times] == ["never", "3 min ago", "1 min ago"]
        assert "t: absolute times" in status_line(app)
        await pilot.press("t")
        await settle(pilot)
        assert [row_text(table, 0)[i] for i in times] == [
            "never",
            "2026-11-20 11:57",
            "2026-11-20 11:59",
        ]
        assert "t: relative times" in status_line(app)  # what t would switch to
        await pilot.press("t")
        assert "3 min ago" in line(table, 1)


async def test_a_large_table_reads_only_a_window(tui_store: KeyStore) -> None:
    """With 3,000 keys the table holds a few hundred rows, counts all, and pages on demand."""
    add_keys(tui_store, 3000)
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        assert table.total == 3000 and len(table.rows) <= 200
        await pilot.press("pagedown", "pagedown")
        await settle(pilot)
        assert table.selected is not None and table.selected.name == f"key-{table.cursor_row:04d}"


async def test_selection_follows_its_key_through_a_reload_in_a_window(tui_store: KeyStore) -> None:
    """Keys added before the selected one move it down; the cursor stays on it (by identity)."""
    add_keys(tui_store, 300)
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30)) as pilot:
        table = await loaded(pilot)
        await pilot.press("G")
        await settle(pilot)
        await pilot.press("k", "k")
        chosen = table.selected_identity
        assert chosen == ("alice", "key-0297")
        add_keys(tui_store, 50, prefix="a-early")  # sorts before every 'key-…'
        tui_store.create_key("alice", "a-marker", ["project"])  # an event: the marker moves
        await pilot.pause(0.5)
        await settle(pilot)
        assert table.total == 351
        assert table.selected_identity == chosen and table.cursor_row == 348


def cursor_on_screen(app: Any, table: KeyTable) -> bool:
    """Whether the selected key's row is drawn where the admin can see it (not under a scrollbar).

    Read from the frame the terminal gets: the row of the table's visible area that shows the
    selected key's name, and no row when it is scrolled out or covered.
    """
    key = table.selected
    assert key is not None
    region = table.scrollable_content_region  # the table's area less its scrollbars
    strips = app.screen._compositor.render_strips()
    shown = [s.text[region.x : region.right] for s in strips[region.y + 1 : region.bottom]]
    return any(f" {key.name} " in text and key.owner[:5] in text for text in shown)


@pytest.mark.parametrize(
    ("width", "absolute", "scrollbar"), [(70, False, True), (80, True, True), (120, False, False)]
)
async def test_the_selected_row_is_always_visible_above_the_scrollbar(
    tui_store: KeyStore, width: int, absolute: bool, scrollbar: bool
) -> None:
    """--all at 70x24, 80x24 and 120x24, with and without a horizontal scrollbar: moves keep
    the selected row seen."""
    add_keys(tui_store, 40, owner="a-rather-long-owner-name", prefix="k")  # names unique on screen
    add_keys(tui_store, 40, owner="bob", prefix="k")
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=(width, 24)) as pilot:
        table = await loaded(pilot)
        if absolute:
            await pilot.press("t")  # 16-cell times: at 80 columns the row no longer fits
            await settle(pilot)
        assert table.show_horizontal_scrollbar == scrollbar
        assert cursor_on_screen(app, table)
        moves = (["G"], ["g"], ["j"] * 25, ["k"] * 3, ["pagedown"], ["G"], ["k"], ["end"], ["t"])
        for keys in moves:  # t: times change width, so the scrollbar may come or go
            await pilot.press(*keys)
            await settle(pilot)
            assert cursor_on_screen(app, table), f"after {keys}: row {table.cursor_row} unseen"
        assert table.selected is not None and table.selected.name == "k-0039"


EU = "production-infrastructure-eu-west-2-primary-cluster"
US = "production-infrastructure-us-east-1-primary-cluster"


@pytest.mark.parametrize(("width", "height"), [(70, 24), (80, 24), (120, 40)])
@pytest.mark.parametrize("owner", ["alice", None])
async def test_names_that_differ_in_the_middle_look_different(
    tui_store: KeyStore, width: int, height: int, owner: str | None
) -> None:
    """'…-eu-west-2-primary-cluster' and '…-us-east-1-primary-cluster' cut to the name column
    still show where they differ (eu-west / us-east), at 70, 80 and 120 columns, one owner or
    every owner."""
    for name in (EU, US):
        tui_store.create_key("alice", name, ["project", "serving"])
    app = make_app(tui_store, owner=owner)
    async with app.run_test(size=(width, height)) as pilot:
        table = await loaded(pilot)
        lines = [line(table, 1), line(table, 2)]
        assert any("eu-west" in x for x in lines) and any("us-east" in x for x in lines), lines


async def test_one_long_name_leaves_the_scopes_a_fair_width(tui_store: KeyStore) -> None:
    """At 80 columns one 51-character name does not cut every row's scopes to 'proje…':
    'project serving' shows whole on the short-named rows."""
    tui_store.create_key("alice", EU, ["project", "serving"])
    tui_store.create_key("alice", "ci", ["project", "serving"])
    app = make_app(tui_store)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await loaded(pilot)
        assert table.widths[table.shown_columns.index("scopes")] >= len("project serving")
        assert "project serving" in line(table, 2), line(table, 2)


async def test_every_owner_lays_its_columns_once(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every owner and more keys than the screen holds, the column widths of the first
    paint are the widths once the count has arrived (they used to change half a second
    later, when the scrollbar came)."""
    add_keys(tui_store, 60, owner="alice")
    add_keys(tui_store, 5, owner="a-rather-long-owner", prefix="service")
    app = make_app(tui_store, owner=None)
    painted: list[list[int]] = []  # the widths of each paint of a row, in turn
    original = KeyTable.render_line

    def render_line(table: KeyTable, y: int) -> Strip:
        if y == 1 and table.rows and (not painted or painted[-1] != table.widths):
            painted.append(list(table.widths))
        return original(table, y)

    monkeypatch.setattr(KeyTable, "render_line", render_line)
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(KeyTable)
        await settle(pilot)
        await pilot.pause(1.0)  # the count and the usage column have long arrived
        assert table.total == 65
        assert painted == [table.widths], painted


async def test_slash_in_the_emptied_filter_types_nothing(tui_store: KeyStore) -> None:
    """After Escape emptied the filter (the focus stays in it), `/` keeps the focus there and
    types nothing: 'bob' typed next is the filter, not '/bob'; inside a filter '/' is text."""
    tui_store.create_key("bob", "deploy", ["project"])
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=(70, 24)) as pilot:
        await loaded(pilot)
        await pilot.press("slash", "d", "e", "escape")
        await settle(pilot)
        box = app.screen.query_one(KeyFilter)
        assert box.value == "" and box.has_focus
        await pilot.press("slash", "b", "o", "b")
        await settle(pilot)
        assert box.value == "bob" and box.has_focus
        await pilot.press("slash")
        assert box.value == "bob/"


async def test_keys_typed_in_one_burst_read_the_keys_once(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long text typed key by key in one burst (no bracketed paste) asks the database once,
    for the newest text, not once per keystroke; the box takes at most FILTER_MAX characters."""
    tui_store.create_key("bob", "deploy", ["project"])
    asked: list[str] = []
    set_filter = KeyTable.set_filter

    def counted_set_filter(table: KeyTable, text: str) -> None:
        asked.append(text)
        set_filter(table, text)

    monkeypatch.setattr(KeyTable, "set_filter", counted_set_filter)
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await loaded(pilot)
        await pilot.press("slash")
        typed = "owner:bob " * 150  # 1,500 characters
        for char in typed:
            app.post_message(events.Key("space" if char == " " else char, char))
        await settle(pilot)
        assert table.key_query.text == typed[:FILTER_MAX]
        assert len(asked) <= 3, len(asked)  # not 1,000
    assert FILTER_MAX == key_filter.TEXT_MAX  # the store's bound, which it refuses beyond


async def test_the_filter_placeholder_names_terms_and_fits_70_columns(tui_store: KeyStore) -> None:
    """The empty filter says it takes tag: and kind: terms too, whole at 70 columns, and does
    not start with '/' (which the focused box would not take as text)."""
    app = make_app(tui_store)
    async with app.run_test(size=(70, 24)) as pilot:
        await loaded(pilot)
        box = app.screen.query_one(KeyFilter)
        hint = box.placeholder
        assert "tag:" in hint and "kind:" in hint and not hint.startswith("/")
        assert len(hint) < box.content_region.width, (len(hint), box.content_region.width)
