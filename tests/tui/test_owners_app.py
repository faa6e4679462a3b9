"""Owners in the app at 70x24: the `:owners` view, its pool with undo, offboarding, and a
key's transfer and tags from its detail."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import help_sections
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.owners import OwnersScreen, preview_lines
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle
from tests.tui.test_views import open_detail, shown

SMALL = (70, 24)


async def jump(pilot: Pilot[Any], view: str) -> None:
    """Type `:view` and Enter, as an admin does."""
    await settle(pilot)
    await pilot.press("colon")
    await pilot.pause()
    await pilot.press(*view, "enter")
    await settle(pilot)


def rows(app: Any) -> list[list[str]]:
    table = app.screen.query_one("#owner-table", DataTable)
    return [[str(c).strip() for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_owners_view_lists_kinds_members_and_key_counts_at_70x24(
    tui_store: KeyStore,
) -> None:
    """`:owners` lists each owner with kind, key count, members and pool, fitting 70 columns;
    Enter shows the owner's keys."""
    tui_store.add_owner("payments", "team", members=["alice", "bob"])
    tui_store.create_key("payments", "deploy", ["project"])
    tui_store.create_key("alice", "laptop", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await jump(pilot, "owners")
        assert isinstance(app.screen, OwnersScreen)
        assert rows(app) == [
            ["alice", "person", "1", "-", "none"],
            ["bob", "person", "0", "-", "none"],
            ["payments", "team", "1", "alice bob", "none"],
        ]
        assert shown(app, "#status").startswith("3 owners (1 team, 0 service accounts)")
        assert app.screen.query_one("#owner-table", DataTable).size.width <= 70
        await pilot.press("down", "down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen) and app.owner == "payments"


async def test_the_pool_is_edited_in_the_owners_view_and_undone(tui_store: KeyStore) -> None:
    """L on a team sets its pool (one owner.limits event); u puts back what it had."""
    tui_store.add_owner("payments", "team")
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SMALL, message_hook=toasts.hook) as pilot:
        await jump(pilot, "owners")
        await pilot.press("down", "L")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, AskValueDialog)
        dialog.query_one(Input).value = "600/m"
        await pilot.press("enter")
        await settle(pilot)
        assert tui_store.owner_limits("payments") == (parse_limit("600/m"),)
        assert "Press u to undo" in toasts.messages[-1]
        await pilot.press("u")
        await settle(pilot)
    assert tui_store.owner_limits("payments") == ()


async def test_offboarding_preview_and_apply_from_the_owners_view(tui_store: KeyStore) -> None:
    """b on a person shows what they hold; Offboard disables their own key, keeps the
    team's, ends their membership; u undoes it."""
    tui_store.add_owner("payments", "team", members=["alice"])
    tui_store.create_key("alice", "laptop", ["project"])
    tui_store.create_key("payments", "deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await jump(pilot, "owners")
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "alice/laptop · owns" in body and "leaves payments (team" in body
        await pilot.press("y")
        await settle(pilot)
        assert tui_store.get_key("alice", "laptop").disabled
        assert not tui_store.get_key("payments", "deploy").disabled
        assert tui_store.get_owner("payments").members == ()
        await pilot.press("u")
        await settle(pilot)
    assert not tui_store.get_key("alice", "laptop").disabled
    assert tui_store.get_owner("payments").members == ("alice",)


async def test_the_status_line_fits_70_columns_with_undo_in_it(tui_store: KeyStore) -> None:
    """At 70 columns the Owners view's status line fits its width after an offboarding: the
    counts, u undo and Enter keys stay; hints the footer shows go; at 120 all are there."""
    tui_store.add_owner("payments", "team", members=["alice"])
    tui_store.add_owner("svc-billing", "service", members=["alice"])
    tui_store.create_key("alice", "laptop", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await jump(pilot, "owners")
        await pilot.press("b")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        status = app.screen.query_one("#status", Static)
        line = shown(app, "#status")
        assert cell_len(line) <= status.content_region.width == 68, line
        assert line == "3 owners (1 team, 1 service account) · u undo · Enter keys · L pool"
        await pilot.resize_terminal(120, 24)
        await settle(pilot)
        assert shown(app, "#status").endswith("u undo · Enter keys · L pool · b offboard")


async def test_transfer_and_tags_from_a_keys_detail(tui_store: KeyStore) -> None:
    """T gives the key to another owner (the detail follows it); g sets its tags, shown in
    the detail; u undoes the tags."""
    tui_store.add_owner("payments", "team")
    made = tui_store.create_key("alice", "laptop", ["project"], tags=[("env", "dev")])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await open_detail(pilot)
        assert "Tags         env=dev" in shown(app, "#detail-fields")
        await pilot.press("T")
        await pilot.pause()
        assert isinstance(app.screen, AskValueDialog)
        app.screen.query_one(Input).value = "payments"
        await pilot.press("enter")
        await settle(pilot)
        assert tui_store.get_key("payments", "laptop").public_id == made.info.public_id
        assert isinstance(app.screen, KeyDetailScreen)
        assert "Owner        payments" in shown(app, "#detail-fields")
        await pilot.press("g")
        await pilot.pause()
        app.screen.query_one(Input).value = "env=prod team=pay"
        await pilot.press("enter")
        await settle(pilot)
        assert tui_store.get_key("payments", "laptop").tags == (("env", "prod"), ("team", "pay"))
        assert "Tags         env=prod team=pay" in shown(app, "#detail-fields")
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
    assert tui_store.get_key("payments", "laptop").tags == (("env", "dev"),)


async def test_the_offboarding_question_has_real_lines_and_the_stored_reason(
    tui_store: KeyStore,
) -> None:
    """b's question shows each key on a line of its own (no literal '\\n') and names the
    reason the disabled keys then hold ('offboarded: frank')."""
    tui_store.create_key("frank", "fk1", ["project"])
    tui_store.create_key("frank", "fk2", ["project"])
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=SMALL) as pilot:
        await jump(pilot, "owners")
        await pilot.press("b")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "\\n" not in body
        lines = body.splitlines()
        assert lines[0].startswith("frank/fk1 · owns") and lines[1].startswith("frank/fk2")
        assert "(reason 'offboarded: frank')" in body
        await pilot.press("y")
        await settle(pilot)
    assert tui_store.get_key("frank", "fk1").disabled_reason == "offboarded: frank"


def test_the_offboarding_preview_cuts_a_long_name_not_what_applying_does(
    tui_store: KeyStore,
) -> None:
    """At 70 columns a 64-character key name is cut in the middle, so its line still ends
    with what applying does ('disable'), as a short name's does."""
    long_name = "k" * 30 + "-middle-" + "z" * 26
    tui_store.create_key("frank", long_name, ["project"])
    tui_store.create_key("frank", "fk2", ["project"])
    lines = preview_lines(tui_store.offboard_preview("frank"), 66)
    assert len(lines) == 2 and all(len(line) <= 66 for line in lines)
    assert all(line.endswith(" · never used · disable") for line in lines), lines
    cut = next(line for line in lines if "kkk" in line)
    assert cut.startswith("frank/kkk") and "…" in cut and "zzz · owns" in cut


async def test_the_detail_title_names_the_new_owner_after_a_transfer(tui_store: KeyStore) -> None:
    """After T the detail's top line says whose key it now is, as its Owner row does."""
    tui_store.add_owner("svc-f", "service")
    tui_store.create_key("frank", "fk1", ["project"])
    app = make_app(tui_store, owner="frank")
    async with app.run_test(size=SMALL) as pilot:
        await open_detail(pilot)
        assert shown(app, "#context").startswith("Key of frank: fk1")
        await pilot.press("T")
        await pilot.pause()
        app.screen.query_one(Input).value = "svc-f"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen)
        assert "Owner        svc-f" in shown(app, "#detail-fields")
        assert shown(app, "#context").startswith("Key of svc-f: fk1")


async def test_a_refused_pool_reopens_the_dialog_with_the_text(tui_store: KeyStore) -> None:
    """A pool the store refuses (two limits of one window) opens the dialog again holding what
    was typed and why, as a key's L does; nothing is written."""
    tui_store.add_owner("payments", "team")
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await jump(pilot, "owners")
        await pilot.press("down", "L")
        await pilot.pause()
        app.screen.query_one(Input).value = "10/s 10/s"
        await pilot.press("enter")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, AskValueDialog)
        assert dialog.query_one(Input).value == "10/s 10/s"
    assert tui_store.owner_limits("payments") == ()


async def test_nothing_to_undo_names_every_change_u_undoes(tui_store: KeyStore) -> None:
    """After one undo, u says which changes it can undo: transfer and tags among them, every
    action the store can undo (bulk.UNDOABLE) but an offboarding, which :owners undoes."""
    tui_store.create_key("alice", "laptop", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SMALL, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        await pilot.press("u")
        await settle(pilot)
    said = toasts.messages[-1]
    assert said.startswith("Nothing to undo: only the last disable, enable, expiry, limits, ")
    for change in ("metadata", "networks", "scopes", "tags or transfer change", ":owners"):
        assert change in said, change


async def test_the_detail_says_which_keys_set_owner_and_tags(tui_store: KeyStore) -> None:
    """The detail's Owner row names T (and g while the key has no tags, saving a row), a
    tagged key's Tags row names g, as Limits names L."""
    tui_store.create_key("alice", "laptop", ["project"])
    tui_store.create_key("alice", "ci", ["project"], tags=[("env", "dev")])
    app = make_app(tui_store)
    async with app.run_test(size=SMALL) as pilot:
        await open_detail(pilot)  # ci, the first by name
        tagged = shown(app, "#detail-fields")
        await pilot.press("escape", "down")
        await open_detail(pilot)
        untagged = shown(app, "#detail-fields")
    assert "Owner        alice · T transfers it\n" in tagged
    assert "Tags         env=dev · g sets them" in tagged
    assert "Owner        alice · T transfers it · g tags it" in untagged
    assert "Tags " not in untagged
    assert "Limits       none · L sets them" in untagged


def test_the_owners_help_says_what_each_key_does() -> None:
    """The help's Owners lines say what each key does, not the footer's bare labels."""
    section = next(s for s in help_sections() if s.title.startswith("Owners"))
    rows = dict(section.rows())
    assert rows["L"].startswith("set its limit pool")
    assert rows["b"].startswith("offboard a person")
    assert rows["j / k"] == "next / previous owner (as ↓ / ↑)"
    assert not {"Pool", "Offboard", "Down", "Up", "Keys", "Undo", "Back"} & set(rows.values())


def test_the_offboarding_preview_says_what_applying_does_in_the_clis_words(
    tui_store: KeyStore,
) -> None:
    """A key still enabled reads 'disable' (what applying does, as `offboard` prints), never
    'disabled', which reads as the state it is in now; a disabled one 'stays disabled'."""
    tui_store.create_key("frank", "fk1", ["project"])
    tui_store.create_key("frank", "fk2", ["project"])
    tui_store.disable_key("frank", "fk2", reason="lost laptop")
    lines = preview_lines(tui_store.offboard_preview("frank"), 66)
    assert [line.rsplit(" · ", 1)[1] for line in lines] == ["disable", "stays disabled"], lines
