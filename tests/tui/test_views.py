"""Pilot tests of the key detail, scope catalog, audit trail and owner switch, on a real store."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import text
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Input, OptionList, Static

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp, help_sections
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog
from apikey_tui.tui.dialogs.help import help_text
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.dialogs.scope_form import ScopeFormDialog
from apikey_tui.tui.dialogs.switch_owner import SwitchOwnerDialog
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen
from tests.conftest import FakeClock
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import settle

SIZE = (100, 30)


def shown(app: ApiKeysApp, selector: str) -> str:
    """The text a widget (a Static, the context line) shows."""
    return str(app.screen.query_one(selector).render())


def table_cells(app: ApiKeysApp, selector: str) -> list[list[str]]:
    table = app.screen.query_one(selector, DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def wait_for_poll(pilot: Pilot[Any], app: ApiKeysApp) -> None:
    """Let one poll interval pass, then let the reads it starts finish."""
    await pilot.pause(app.poll_seconds * 2)
    await settle(pilot)


async def open_detail(pilot: Pilot[Any]) -> KeyDetailScreen:
    await settle(pilot)
    await pilot.press("enter")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, KeyDetailScreen)
    return screen


# --- the key detail ----------------------------------------------------------------------------


async def test_enter_shows_the_key_in_full(tui_store: KeyStore, clock: FakeClock) -> None:
    """Enter shows owner, name, id, scopes with descriptions, times, its maker and its events."""
    info = tui_store.create_key("alice", "ci-deploy", ["project", "serving"]).info
    used = (clock() - timedelta(days=3)).replace(second=0)
    tui_store.record_use({info.public_id: used})
    clock.now = used + timedelta(days=3)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot)
        fields = shown(app, "#detail-fields")
        assert "Owner        alice" in fields
        assert "Name         ci-deploy" in fields
        assert f"Public id    {info.public_id}" in fields
        assert f"Created      {info.created_at:%Y-%m-%d %H:%M:%S} UTC" in fields
        assert f"Last used    3 d ago ({used:%Y-%m-%d %H:%M} UTC)" in fields
        assert "Created by   admin-test (192.0.2.7) · just now" in fields
        scopes = [str(s.render()) for s in screen.query("#detail-scopes Static")]
        assert scopes[0::3] == ["project", "serving"]  # name, description, use
        assert scopes[1].startswith("Project API") and scopes[4].startswith("Model serving API")
        events = table_cells(app, "#key-events")
        assert [row[1:3] for row in events] == [["key.create", "admin-test (192.0.2.7)"]]
        assert "alice" in shown(app, "#context") and "ci-deploy" in shown(app, "#context")
        await pilot.press("escape")
        assert isinstance(app.screen, KeysScreen)


async def test_made_by_names_whoever_recreated_the_key(tui_store: KeyStore) -> None:
    """After a recreate by another admin, the detail names that admin and 'recreated'."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    other = KeyStore(tui_store.engine, hasher=tui_store.hasher, clock=tui_store.clock)
    other.actor = type(tui_store.actor)("bob-admin", None)
    other.recreate_key("alice", "ci-deploy")
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        assert "Recreated by bob-admin · just now" in shown(app, "#detail-fields")
        assert [r[1] for r in table_cells(app, "#key-events")] == ["key.recreate", "key.create"]


async def test_edit_scopes_confirms_naming_the_key_and_records_it(tui_store: KeyStore) -> None:
    """e opens the scopes; Save asks 'Change the scopes of key …', yes writes and audits it."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        await pilot.press("e")
        dialog = app.screen
        assert isinstance(dialog, EditScopesDialog)
        assert dialog.query_one("#save", Button).disabled  # nothing changed yet
        selection = dialog.query_one("#scopes", ScopePicker)
        selection.deselect_all()
        await pilot.pause()
        assert dialog.query_one("#save", Button).disabled
        assert "at least one scope" in str(dialog.query_one("#scope-error", Static).render())
        selection.select("serving")
        await pilot.pause()
        await pilot.click("#save")
        confirm = app.screen
        assert isinstance(confirm, ConfirmDialog)
        title = str(confirm.query_one(".dialog-title", Static).render())
        assert title == "Change the scopes of key 'ci-deploy' of alice?"
        assert "Adds: serving. Removes: project." in str(
            confirm.query_one(".dialog-body", Static).render()
        )
        await pilot.press("y")
        await settle(pilot)
        assert tui_store.get_key("alice", "ci-deploy").scopes == ("serving",)
        event = tui_store.events(1)[0]
        assert (event.action, event.detail) == ("key.rescope", "scopes: serving")
        assert isinstance(app.screen, KeyDetailScreen)
        assert [str(s.render()) for s in app.screen.query("#detail-scopes .scope-name")] == [
            "serving"
        ]


async def change_scopes_to_project_and_serving(pilot: Pilot[Any]) -> None:
    """In an open key detail: e, add serving, Save, and yes."""
    await pilot.press("e")
    pilot.app.screen.query_one("#scopes", ScopePicker).select("serving")
    await pilot.pause()
    await pilot.click("#save")
    assert isinstance(pilot.app.screen, ConfirmDialog)
    await pilot.press("y")
    await settle(pilot)


async def test_a_scope_edit_in_the_detail_is_undone_with_u(tui_store: KeyStore) -> None:
    """After e changes a key's scopes, the notice and status offer u; u in the detail asks,
    then puts back exactly the scopes the key had, audited as key.restore."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        await change_scopes_to_project_and_serving(pilot)
        assert tui_store.get_key("alice", "ci-deploy").scopes == ("project", "serving")
        assert toasts.messages[-1] == (
            "Key 'ci-deploy' of alice now has: project serving. Press u to undo."
        )
        assert isinstance(app.screen, KeyDetailScreen)
        assert shown(app, "#status").startswith("u undo scopes change of ci-deploy of alice · ")
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert body.startswith(
            "Key 'ci-deploy' of alice: its scopes go back to project (now project serving)."
        )
        await pilot.press("y")
        await settle(pilot)
        assert tui_store.get_key("alice", "ci-deploy").scopes == ("project",)
        assert tui_store.events(1)[0].action == "key.restore"
        assert isinstance(app.screen, KeyDetailScreen)
        assert "u undo" not in shown(app, "#status")


async def test_a_write_in_another_view_ends_the_offer_of_undo(tui_store: KeyStore) -> None:
    """A scope edit's undo is offered only until the next change: after a scope is added in
    the catalog view, u in the key table has nothing to undo and the key keeps its scopes."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        await change_scopes_to_project_and_serving(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert "u: undo" in shown(app, "#status")  # offered in the table too
        await open_catalog(pilot)
        await pilot.press("n")
        assert isinstance(app.screen, ScopeFormDialog)
        app.screen.query_one("#scope-name", Input).value = "billing"
        await pilot.pause()
        await pilot.click("#save")
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
        await pilot.press("u")
        await settle(pilot)
        assert toasts.messages[-1].startswith("Nothing to undo")
        assert tui_store.get_key("alice", "ci-deploy").scopes == ("project", "serving")


async def test_edit_scopes_cancel_changes_nothing(tui_store: KeyStore) -> None:
    """Escape in the scopes dialog, or Cancel in the confirmation, writes nothing."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        await pilot.press("e", "escape")
        await pilot.press("e")
        app.screen.query_one("#scopes", ScopePicker).select("serving")
        await pilot.pause()
        await pilot.click("#save")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, KeyDetailScreen)
    assert tui_store.get_key("alice", "ci-deploy").scopes == ("project",)
    assert [e.action for e in tui_store.events()] == ["key.create"]


async def test_delete_from_the_detail_uses_the_tables_confirmation(tui_store: KeyStore) -> None:
    """d asks 'Delete key … of alice?' with its public id; yes deletes it and closes the view."""
    info = tui_store.create_key("alice", "ci-deploy", ["project"]).info
    tui_store.create_key("alice", "other", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        await pilot.press("d")
        confirm = app.screen
        assert isinstance(confirm, ConfirmDialog)
        assert "Delete key 'ci-deploy' of alice?" in str(
            confirm.query_one(".dialog-title", Static).render()
        )
        assert info.public_id in str(confirm.query_one(".dialog-body", Static).render())
        await pilot.press("y")
        await settle(pilot)
        await wait_for_poll(pilot, app)
        assert isinstance(app.screen, KeysScreen)
        messages = toasts.messages
        assert messages == ["Deleted key 'ci-deploy' of alice."]  # said once, not twice
    assert [k.name for k in tui_store.list_keys("alice")] == ["other"]


async def test_recreate_from_the_detail_reveals_and_shows_the_new_id(tui_store: KeyStore) -> None:
    """r asks, recreates, reveals the new key once, and the detail then shows the new id."""
    old = tui_store.create_key("alice", "ci-deploy", ["project"]).info
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, RevealSecretDialog)
        await pilot.press("c", "enter")
        await wait_for_poll(pilot, app)
        assert isinstance(app.screen, KeyDetailScreen)
        new = tui_store.get_key("alice", "ci-deploy")
        assert new.public_id != old.public_id
        assert f"Public id    {new.public_id}" in shown(app, "#detail-fields")
        assert "Recreated by admin-test (192.0.2.7) · just now" in shown(app, "#detail-fields")


async def test_detail_closes_when_the_key_is_deleted_elsewhere(tui_store: KeyStore) -> None:
    """A deletion by the CLI or another admin closes the detail with one warning."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        tui_store.delete_key("alice", "ci-deploy")
        await wait_for_poll(pilot, app)
        assert isinstance(app.screen, KeysScreen)
        assert toasts.messages == ["Key 'ci-deploy' of alice no longer exists."]


async def test_detail_follows_changes_from_elsewhere(tui_store: KeyStore) -> None:
    """A rescope by the CLI shows in the open detail view after one poll."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_detail(pilot)
        tui_store.set_key_scopes("alice", "ci-deploy", ["project", "serving"])
        await wait_for_poll(pilot, app)
        names = [str(s.render()) for s in screen.query("#detail-scopes .scope-name")]
        assert names == ["project", "serving"]
        assert len(table_cells(app, "#key-events")) == 2


# --- the scope catalog -------------------------------------------------------------------------


async def open_catalog(pilot: Pilot[Any]) -> ScopeCatalogScreen:
    await settle(pilot)
    await pilot.press("c")
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, ScopeCatalogScreen)
    return screen


async def test_catalog_shows_each_scope_its_description_and_key_count(tui_store: KeyStore) -> None:
    """c lists every scope with how many keys (of any owner) hold it."""
    tui_store.create_key("alice", "a", ["project"])
    tui_store.create_key("bob", "b", ["project", "serving"])
    tui_store.add_scope("billing", "[red]Invoices[/red]")  # markup is shown as typed
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_catalog(pilot)
        rows = table_cells(app, "#scope-table")
        assert [r[:2] for r in rows] == [["billing", "0"], ["project", "2"], ["serving", "1"]]
        assert rows[0][2] == "[red]Invoices[/red]"
        assert shown(app, "#scope-description") == "billing: [red]Invoices[/red]"
        await pilot.press("down")
        assert shown(app, "#scope-description").startswith("project: Project API")
        await pilot.press("escape")
        assert isinstance(app.screen, KeysScreen)


async def test_add_scope_validates_then_writes(tui_store: KeyStore) -> None:
    """n checks the name as typed (rules, taken); Add writes the scope and its event."""
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_catalog(pilot)
        await pilot.press("n")
        dialog = app.screen
        assert isinstance(dialog, ScopeFormDialog)
        name = dialog.query_one("#scope-name", Input)
        name.value = "Billing"
        await pilot.pause()
        assert "is not allowed" in str(dialog.query_one("#name-error", Static).render())
        assert dialog.query_one("#save", Button).disabled
        name.value = "project"
        await pilot.pause()
        assert "already has a scope 'project'" in str(
            dialog.query_one("#name-error", Static).render()
        )
        name.value = "billing"
        dialog.query_one("#description", Input).value = "Invoices and payments"
        await pilot.pause()
        assert not dialog.query_one("#save", Button).disabled
        await pilot.click("#save")
        await settle(pilot)
        assert isinstance(app.screen, ScopeCatalogScreen)
        assert [r[0] for r in table_cells(app, "#scope-table")] == ["billing", "project", "serving"]
        assert "Added scope 'billing'." in toasts.messages
    assert tui_store.events(1)[0].action == "scope.add"


async def test_describe_scope_changes_its_description(tui_store: KeyStore) -> None:
    """e opens the selected scope's description; Save writes the new one."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_catalog(pilot)
        await pilot.press("e")
        dialog = app.screen
        assert isinstance(dialog, ScopeFormDialog)
        description = dialog.query_one("#description", Input)
        assert description.value.startswith("Project API")
        description.value = "bad \x1b[31m"
        await pilot.pause()
        assert dialog.query_one("#save", Button).disabled
        description.value = "Projects: everything"
        await pilot.press("enter")
        await settle(pilot)
        assert table_cells(app, "#scope-table")[0][2] == "Projects: everything"
    assert tui_store.list_scopes()[0].description == "Projects: everything"


async def test_a_held_scope_is_not_offered_for_removal_and_its_keys_are_named(
    tui_store: KeyStore,
) -> None:
    """d on a scope keys hold offers no Remove: it says which keys hold it; the scope stays."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    tui_store.create_key("bob", "reports", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_catalog(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmDialog)
        expected = (
            "Scope 'project' is held by 2 keys: alice/ci-deploy, bob/reports. "
            "Remove it from those keys first."
        )
        assert toasts.messages == [expected]
        assert shown(app, "#status") == expected
    assert [s.name for s in tui_store.list_scopes()] == ["project", "serving"]


async def test_remove_an_unused_scope(tui_store: KeyStore) -> None:
    """d on a scope no key holds removes it after the confirmation."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_catalog(pilot)
        await pilot.press("down", "d")
        assert "'serving'" in str(app.screen.query_one(".dialog-title", Static).render())
        await pilot.press("y")
        await settle(pilot)
        assert [r[0] for r in table_cells(app, "#scope-table")] == ["project"]
    assert [s.name for s in tui_store.list_scopes()] == ["project"]
    assert tui_store.events(1)[0].action == "scope.remove"


# --- the audit trail ---------------------------------------------------------------------------


async def test_audit_trail_is_newest_first_filterable_and_live(tui_store: KeyStore) -> None:
    """a shows every event newest first; the key, actor and action filters narrow it; new
    events appear without a keypress."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    tui_store.create_key("bob", "reports", ["serving"])
    tui_store.add_scope("billing")
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, AuditTrailScreen)
        rows = table_cells(app, "#events-table")
        assert [(r[1], r[2]) for r in rows] == [
            ("scope.add", "scope billing"),
            ("key.create", "bob/reports"),
            ("key.create", "alice/ci-deploy"),
        ]
        assert rows[0][3] == "admin-test"
        screen.query_one("#filter-key", Input).value = "ALICE"
        await settle(pilot)
        assert [r[2] for r in table_cells(app, "#events-table")] == ["alice/ci-deploy"]
        screen.query_one("#filter-key", Input).value = ""
        screen.query_one("#filter-action", Input).value = "scope."
        await settle(pilot)
        assert [r[1] for r in table_cells(app, "#events-table")] == ["scope.add"]
        screen.query_one("#filter-action", Input).value = ""
        screen.query_one("#filter-actor", Input).value = "nobody"
        await settle(pilot)
        assert table_cells(app, "#events-table") == []
        screen.query_one("#filter-actor", Input).value = "192.0.2"  # the SSH address counts
        await settle(pilot)
        assert len(table_cells(app, "#events-table")) == 3
        tui_store.delete_key("bob", "reports")  # the CLI, another admin
        await wait_for_poll(pilot, app)
        assert table_cells(app, "#events-table")[0][1:3] == ["key.delete", "bob/reports"]
        assert "newest first · live" in shown(app, "#status")
        assert "key.delete · bob/reports" in shown(app, "#event-full")


async def test_audit_trail_shows_database_text_literally(tui_store: KeyStore) -> None:
    """An actor holding an escape sequence and markup is shown as text, not obeyed."""
    tui_store.add_scope("billing", "[link=https://x]click[/link]")
    with tui_store.engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_event SET actor = :a"), {"a": "ev\x1b[31mil"})
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        row = table_cells(app, "#events-table")[0]
        assert row[3] == "ev\\x1b[31mil"
        assert "[link=https://x]click[/link]" in shown(app, "#event-full")


# --- switching owner ---------------------------------------------------------------------------


async def test_switch_owner_and_all_owners_without_restarting(tui_store: KeyStore) -> None:
    """o takes a valid owner name (or All owners); the top line and table follow at once."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    tui_store.create_key("bob", "reports", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "owner: alice" in shown(app, "#context")
        await pilot.press("o")
        dialog = app.screen
        assert isinstance(dialog, SwitchOwnerDialog)
        owner = dialog.query_one("#owner", Input)
        assert owner.value == "alice"
        owner.value = "bo b"
        await pilot.pause()
        assert dialog.query_one("#show", Button).disabled
        assert "is not allowed" in str(dialog.query_one("#owner-error", Static).render())
        await pilot.press("enter")  # refused: still asking
        assert app.screen is dialog
        owner.value = ""
        await pilot.pause()
        assert "owner is required" in str(dialog.query_one("#owner-error", Static).render())
        owner.value = "bob"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen) and app.owner == "bob"
        assert "owner: bob" in shown(app, "#context")
        await settle(pilot)
        assert [k.name for k in app.screen.query_one(KeyTable).rows] == ["reports"]
        await pilot.press("o")
        await pilot.click("#all")
        await settle(pilot)
        assert app.owner is None and "all owners" in shown(app, "#context")
        assert isinstance(app.screen, KeysScreen)
        assert {k.name for k in app.screen.query_one(KeyTable).rows} == {"ci-deploy", "reports"}
        assert len(app.screen_stack) == 2  # replaced, not stacked
        await pilot.press("o", "escape")
        assert app.owner is None and isinstance(app.screen, KeysScreen)


# --- help --------------------------------------------------------------------------------------


def test_help_lists_the_view_keys() -> None:
    """The help text names Enter, c, a, o and the keys inside the detail and catalog views."""
    text = help_text(help_sections())
    for row in ("Enter  the selected key", "c  the scope catalog", "a  the audit trail"):
        assert row in text
    assert "o  switch owner" in text and "e  edit the key's scopes" in text


async def test_the_owner_switch_lists_owners_with_counts_and_names_a_typo(
    tui_store: KeyStore,
) -> None:
    """o lists each owner with keys and its count; typing narrows it; a name with no keys is
    said to have none (a typo never looks like a real owner); Enter on an owner shows it."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    tui_store.create_key("bob", "reports", ["project"])
    tui_store.create_key("bob", "etl", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, SwitchOwnerDialog)
        listing = dialog.query_one("#owners", OptionList)
        lines = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert lines == ["alice  1 key", "bob    2 keys"]
        dialog.query_one("#owner", Input).value = "bobb"
        await pilot.pause()
        note = shown(app, "#owner-note")
        assert "bobb has no keys in this database" in note and listing.option_count == 0
        dialog.query_one("#owner", Input).value = "bo"
        await pilot.pause()
        assert listing.option_count == 1
        await pilot.press("down", "enter")
        await settle(pilot)
        assert app.owner == "bob" and isinstance(app.screen, KeysScreen)
        await pilot.press("o")
        await settle(pilot)
        app.screen.query_one("#owner", Input).value = "nobody"
        await pilot.press("enter")
        await settle(pilot)
        assert "this database has no key of that owner" in shown(app, "#empty")


async def test_enter_in_the_owner_switch_takes_the_one_owner_that_matches(
    tui_store: KeyStore,
) -> None:
    """'ali' then Enter shows alice (the one owner that matches, as fzf does), and the note
    says so; the Show owner button takes 'ali' as typed, a new owner."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    tui_store.create_key("bob", "reports", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("o")
        await settle(pilot)
        app.screen.query_one("#owner", Input).value = "ali"
        await pilot.pause()
        assert "Enter shows alice, the one owner that matches" in shown(app, "#owner-note")
        await pilot.press("enter")
        await settle(pilot)
        assert app.owner == "alice" and isinstance(app.screen, KeysScreen)
        await pilot.press("o")
        await settle(pilot)
        app.screen.query_one("#owner", Input).value = "ali"
        await pilot.pause()
        await pilot.click("#show")
        await settle(pilot)
        assert app.owner == "ali"
