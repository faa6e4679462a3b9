"""Pilot tests of the terminal app: every flow, against a real SQLite store."""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from textual import events
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widgets import Button, Input, Static
from textual.worker import WorkerCancelled, WorkerFailed

from apikey_tui import keyformat
from apikey_tui.cli import build_parser
from apikey_tui.clock import system_clock
from apikey_tui.errors import StoreUnavailableError
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ERROR_TOAST_SECONDS, ApiKeysApp
from apikey_tui.tui.context_line import ContextLine, database_forms, fit_context
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog, expiry_problem
from apikey_tui.tui.dialogs.help import HelpScreen
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP
from tests.throwaway_postgres import ThrowawayPostgres
from tests.tui.conftest import Toasts, make_app, row_text

SIZE = (100, 30)


async def settle(pilot: Pilot[Any]) -> None:
    """Let workers finish and their messages be handled.

    A worker the app cancels on purpose (a newer read replaces an older one) makes
    wait_for_complete raise WorkerCancelled, and one that failed (its failure said by the one
    boundary, workers.WorkerHost) WorkerFailed; that is the app working, so wait again.
    """
    for _ in range(3):
        for _attempt in range(20):
            try:
                await pilot.app.workers.wait_for_complete()
                break
            except (WorkerCancelled, WorkerFailed):
                continue
        await pilot.pause()
    # A text cursor blinks every 0.5 s: on a loaded machine a picture could catch either phase.
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False  # and shown
    await pilot.pause()


def table_rows(app: ApiKeysApp) -> list[list[str]]:
    table = app.screen.query_one(KeyTable)
    return [row_text(table, i) for i in range(len(table.rows))] if table.display else []


def keys_screen(app: ApiKeysApp) -> KeysScreen:
    screen = app.screen_stack[1]
    assert isinstance(screen, KeysScreen)
    return screen


async def open_create(pilot: Pilot[Any], name: str, scopes: list[str]) -> CreateKeyDialog:
    await pilot.press("n")
    await pilot.pause()
    dialog = pilot.app.screen
    assert isinstance(dialog, CreateKeyDialog)
    dialog.query_one("#name", Input).value = name
    selection = dialog.query_one("#scopes", ScopePicker)
    for scope in scopes:
        selection.select(scope)
    await pilot.pause()
    return dialog


async def test_create_reveal_copy_acknowledge(tui_store: KeyStore) -> None:
    """Create shows the key once, c copies it, Enter closes, and the row is in the table."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "ci-deploy", ["project", "serving"])
        assert not dialog.query_one("#create", Button).disabled
        await pilot.click("#create")
        await settle(pilot)
        assert isinstance(app.screen, RevealSecretDialog)
        await pilot.press("c")
        key = app.clipboard
        info = tui_store.get_key("alice", "ci-deploy")
        assert keyformat.parse(key).public_id == info.public_id
        assert info.scopes == ("project", "serving")
        assert (
            Verifier(tui_store.engine, hasher=CHEAP).verify(f"ApiKey {key}").key_name == "ci-deploy"
        )
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
        assert [r[0] for r in table_rows(app)] == ["ci-deploy"]
        # After the reveal is closed the secret is nowhere in the app.
        assert app.clipboard == ""
        assert keyformat.parse(key).secret[:16] not in app.export_screenshot()
        assert all(key not in repr(w.render()) for w in app.screen.query("*"))


async def test_closing_without_copy_asks_once_more(tui_store: KeyStore) -> None:
    """Enter without copying warns first; a second Enter closes the reveal."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_create(pilot, "laptop", ["project"])
        await pilot.press("enter")  # Enter in the name field submits the dialog
        await settle(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)
        await pilot.press("enter")
        assert app.screen is reveal
        assert "not copied" in str(reveal.query_one("#copy-status", Static).render())
        await pilot.press("enter")
        assert isinstance(app.screen, KeysScreen)


async def test_name_validation_is_live_and_create_needs_a_scope(tui_store: KeyStore) -> None:
    """Bad names and taken names show inline errors; Create stays disabled without a scope."""
    tui_store.create_key("alice", "taken", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "[bold red]x", ["project"])
        error = dialog.query_one("#name-error", Static)
        assert "is not allowed" in str(error.render())
        assert dialog.query_one("#create", Button).disabled
        dialog.query_one("#name", Input).value = "taken"
        await pilot.pause()
        assert "already has a key named 'taken'" in str(error.render())
        dialog.query_one("#name", Input).value = "fresh"
        dialog.query_one("#scopes", ScopePicker).deselect_all()
        await pilot.pause()
        assert dialog.query_one("#create", Button).disabled
        assert "at least one scope" in str(dialog.query_one("#scope-error", Static).render())
        dialog.query_one("#scopes", ScopePicker).select("serving")
        await pilot.pause()
        assert not dialog.query_one("#create", Button).disabled


@pytest.mark.parametrize("owner", ["alice", None])
async def test_a_fresh_create_dialog_shows_no_error_until_create_is_pressed(
    tui_store: KeyStore, owner: str | None
) -> None:
    """The create dialog opens without errors, with or without its Owner field; Enter on the
    untouched form then names both the missing name and the missing scope."""
    app = make_app(tui_store, owner=owner)
    async with app.run_test(size=(70, 24)) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, CreateKeyDialog)
        errors = [dialog.query_one(f"#{e}-error", Static) for e in ("name", "scope")]
        assert [str(e.render()) for e in errors] == ["", ""]
        await pilot.press("enter")
        await pilot.pause()
        assert "required" in str(errors[0].render())
        assert "at least one scope" in str(errors[1].render())


async def test_create_sets_the_expiry_asked_for(tui_store: KeyStore) -> None:
    """Expires: 90d gives a key expiring 90 days out; a past date keeps the dialog open."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "short-lived", ["project"])
        expires = dialog.query_one("#expires", Input)
        expires.value = "2001-01-01"
        await pilot.pause()
        assert "is not in the future" in str(dialog.query_one("#expires-error", Static).render())
        assert dialog.query_one("#create", Button).disabled
        expires.value = "90d"
        await pilot.pause()
        assert not dialog.query_one("#expires-error", Static).display
        await pilot.click("#create")
        await settle(pilot)
        assert isinstance(app.screen, RevealSecretDialog)
    key = tui_store.get_key("alice", "short-lived")
    assert key.expires_at == tui_store.clock() + timedelta(days=90)


@pytest.mark.parametrize(
    "text", ["", "90d", "24h", "never", "NEVER", "2099-01-31", "2099-01-31T12:00Z", "36500d",
             "36501d", "5y", "-5d", "soon", "9999-12-31", "2099-02-30"],
)  # fmt: skip
def test_create_reads_an_expiry_as_the_cli_does(text: str) -> None:
    """The dialog accepts an expiry exactly when `keys create --expires` parses it."""
    args = ["keys", "create", "k", "--scope", "project"] + (["--expires", text] if text else [])
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        parsed = None
    expiry, problem = expiry_problem(text, system_clock())
    assert (problem is None) == (parsed is not None), problem
    assert expiry == (parsed.expires if parsed is not None else None)


async def test_escape_cancels_and_writes_nothing(tui_store: KeyStore) -> None:
    """Escape closes the create dialog and no key or event is written."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_create(pilot, "never", ["project"])
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
    assert tui_store.list_keys() == [] and tui_store.events() == []


async def test_delete_confirms_and_the_key_stops_working(tui_store: KeyStore) -> None:
    """d asks, naming key and owner; y deletes it from the table, the store and the verifier."""
    created = tui_store.create_key("alice", "old", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        confirm = app.screen
        assert isinstance(confirm, ConfirmDialog)
        title = str(confirm.query_one(".dialog-title", Static).render())
        assert title == "Delete key 'old' of alice?"
        await pilot.press("y")
        await settle(pilot)
        assert table_rows(app) == []
        assert "No API keys for alice yet" in str(app.screen.query_one("#empty", Static).render())
    assert tui_store.credential(created.info.public_id) is None


async def test_a_key_read_before_the_question_was_drawn_never_answers_it(
    tui_store: KeyStore,
) -> None:
    """A 'y' read before the confirmation opened but handled after it was drawn (a slow
    machine: the burst "d y" read in one go) is no answer; a 'y' typed after it deletes."""
    tui_store.create_key("alice", "victim", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        stale = events.Key("y", "y")  # read now, with the 'd' that opens the question
        await pilot.press("d")
        await settle(pilot)  # the question is drawn
        assert isinstance(app.screen, ConfirmDialog)
        app.post_message(stale)
        await settle(pilot)
        assert isinstance(app.screen, ConfirmDialog)
        assert tui_store.get_key("alice", "victim") is not None
        await pilot.press("y")
        await settle(pilot)
        assert table_rows(app) == []


async def test_delete_cancel_keeps_the_key(tui_store: KeyStore) -> None:
    """Enter on the confirmation (Cancel has focus) keeps the key."""
    tui_store.create_key("alice", "keep", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d", "enter")
        await settle(pilot)
    assert [k.name for k in tui_store.list_keys("alice")] == ["keep"]


async def test_recreate_refuses_the_old_secret_and_accepts_the_new(tui_store: KeyStore) -> None:
    """r then y recreates: the reveal shows a new key; the old one is refused at once."""
    old = tui_store.create_key("alice", "stolen", ["project", "serving"]).plaintext
    verifier = Verifier(tui_store.engine, hasher=CHEAP, revocation_bound=0)
    assert verifier.verify(f"ApiKey {old}", ["serving"]).key_name == "stolen"
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await settle(pilot)
        assert isinstance(app.screen, RevealSecretDialog)
        await pilot.press("c")
        new = app.clipboard
        await pilot.press("enter")
    assert new != old
    assert verifier.verify(f"ApiKey {new}", ["serving", "project"]).key_name == "stolen"
    try:
        verifier.verify(f"ApiKey {old}")
    except Exception as exc:  # the typed 401
        assert type(exc).__name__ == "InvalidKeyError"
    else:
        raise AssertionError("the old key still works")


async def test_key_deleted_elsewhere_is_a_notification(tui_store: KeyStore) -> None:
    """Deleting a key someone else deleted meanwhile notifies and refreshes; the app stays up."""
    tui_store.create_key("alice", "gone", ["project"])
    app = make_app(tui_store, owner="alice")
    app.poll_seconds = 60  # keep the stale row on screen for this test
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        tui_store.delete_key("alice", "gone")
        await pilot.press("d", "y")
        await settle(pilot)
        messages = toasts.messages
        assert any("alice has no key named 'gone'" in m for m in messages)
        assert table_rows(app) == []
        assert isinstance(app.screen, KeysScreen)


async def test_an_error_toast_stays_long_enough_to_read(tui_store: KeyStore) -> None:
    """A failed change's toast (often several lines at 70 columns: why, and that nothing
    changed) stays 15 s, where Textual's default took every toast away after 5; the others
    keep the default."""
    tui_store.create_key("alice", "gone", ["project"])
    app = make_app(tui_store, owner="alice")
    app.poll_seconds = 60  # keep the stale row on screen for this test
    toasts = Toasts()
    async with app.run_test(size=(70, 24), message_hook=toasts.hook) as pilot:
        await settle(pilot)
        tui_store.delete_key("alice", "gone")
        await pilot.press("d", "y")
        await settle(pilot)
        app.notify("done")
        await settle(pilot)
        timeouts = {n.severity: n.timeout for n in toasts.shown}
        assert timeouts == {"error": ERROR_TOAST_SECONDS, "information": app.NOTIFICATION_TIMEOUT}
        assert ERROR_TOAST_SECONDS >= 3 * app.NOTIFICATION_TIMEOUT


async def test_database_down_is_a_notification(throwaway_postgres: ThrowawayPostgres) -> None:
    """With the database stopped, reload and create show one-line notifications, no traceback."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    store.create_key("alice", "k", ["project"])
    app = make_app(store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        throwaway_postgres.stop()
        await pilot.press("f5")
        await settle(pilot)
        await open_create(pilot, "new", ["project"])
        await pilot.click("#create")
        await settle(pilot)
        messages = toasts.messages
        assert sum("database unavailable" in m for m in messages) >= 2
        assert all("\n" not in m for m in messages)
        assert isinstance(app.screen, KeysScreen)
        assert [r[0] for r in table_rows(app)] == ["k"]
        await pilot.pause(0.5)  # a poll notices, and says so in the status line
        await settle(pilot)
        status = str(app.screen.query_one("#status", Static).render())
        assert status.startswith("⚠ showing the last keys read: database unavailable")
        throwaway_postgres.start()
        await pilot.pause(0.8)
        await settle(pilot)
        assert str(app.screen.query_one("#status", Static).render()).startswith("1 key ·")
    store.close()


async def test_markup_and_escapes_in_the_database_are_shown_literally(tui_store: KeyStore) -> None:
    """A name with Rich markup and an escape sequence (written around the rules) shows as text."""
    tui_store.create_key("alice", "plain", ["project"])
    with tui_store.engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_key SET name = :n"), {"n": "[bold red]x\x1b[2J"})
        conn.execute(
            text("UPDATE apikey_tui_scope SET description = :d WHERE name = 'project'"),
            {"d": "[link=https://evil.example]click[/link]"},
        )
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert table_rows(app)[0][0] == "[bold red]x\\x1b[2J"
        assert "\x1b" not in app.export_screenshot()
        dialog = await open_create(pilot, "y", [])
        shown = "".join(screen_lines(app, dialog.query_one("#scopes", ScopePicker).region))
        assert "[link=https://evil.example]click[/link]" in shown


async def test_filter_narrows_and_sort_reorders(tui_store: KeyStore) -> None:
    """Typing in the filter narrows rows; s and header clicks change the sort column."""
    for name in ("zeta", "alpha", "deploy-a", "deploy-b"):
        tui_store.create_key("alice", name, ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert [r[0] for r in table_rows(app)] == ["alpha", "deploy-a", "deploy-b", "zeta"]
        await pilot.press("slash", "d", "e", "p")
        assert [r[0] for r in table_rows(app)] == ["deploy-a", "deploy-b"]
        await pilot.press("escape")
        app.screen.query_one("#filter", Input).value = ""
        await pilot.pause()
        await pilot.click("#keys", offset=(2, 0))  # the Name header, already sorted: reverse
        assert [r[0] for r in table_rows(app)] == ["zeta", "deploy-b", "deploy-a", "alpha"]
        await pilot.press("s")  # next column: State
        assert keys_screen(app).query_one(KeyTable).sort_column == "state"


async def test_changes_from_elsewhere_appear_without_restart(tui_store: KeyStore) -> None:
    """A key created and deleted by another client shows up and disappears within a poll."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert table_rows(app) == []
        tui_store.create_key("alice", "from-cli", ["project"])
        await pilot.pause(0.6)
        await settle(pilot)
        assert [r[0] for r in table_rows(app)] == ["from-cli"]
        tui_store.delete_key("alice", "from-cli")
        await pilot.pause(0.6)
        await settle(pilot)
        assert table_rows(app) == []


async def test_all_owners_mode_shows_owner_column_and_asks_owner(tui_store: KeyStore) -> None:
    """With --all the table has an owner column and the create dialog asks for the owner."""
    tui_store.create_key("bob", "b", ["project"])
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert table_rows(app)[0][:2] == ["bob", "b"]
        dialog = await open_create(pilot, "svc", ["project"])
        dialog.query_one("#owner", Input).value = "carol"
        await pilot.pause()
        await pilot.click("#create")
        await settle(pilot)
        await pilot.press("c", "enter")
        await settle(pilot)
    assert tui_store.get_key("carol", "svc").scopes == ("project",)


async def test_help_palette_and_header(tui_store: KeyStore) -> None:
    """? opens help; the palette lists every action; the header names database and owner."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        context = app.screen.query_one("#context", ContextLine).text
        telling = database_forms(tui_store.label)[-1].removeprefix("…")  # /directory/keys.db
        assert "owner: alice" in context and telling in context
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Create key", "Delete key", "Recreate key", "Filter keys", "Help"} <= titles
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, KeysScreen)


async def test_masked_password_in_header(postgres_url: str) -> None:
    """A database URL with a password is shown masked in the header."""
    store = KeyStore.open(postgres_url.replace("postgres@", "postgres:s3cret@"), hasher=CHEAP)
    app = make_app(store)
    async with app.run_test(size=(160, 30)) as pilot:
        await settle(pilot)
        context = app.screen.query_one("#context", ContextLine).text
        assert "s3cret" not in context and "postgres:***@" in context
    store.close()


async def test_selection_follows_the_key_when_its_row_changes(tui_store: KeyStore) -> None:
    """A use recorded for the selected key refreshes its row; the cursor and d stay on that key."""
    for name in ("aaa", "bbb", "ccc"):
        tui_store.create_key("alice", name, ["project"])
    chosen = tui_store.get_key("alice", "bbb")
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down")
        table = app.screen.query_one(KeyTable)
        assert table.selected is not None and table.selected.name == "bbb"
        tui_store.record_use({chosen.public_id: tui_store.clock()})
        await pilot.pause(0.6)
        await settle(pilot)
        assert table.selected is not None and table.selected.last_used_at is not None
        assert table.selected.name == "bbb"
        await pilot.press("d")
        confirm = app.screen
        assert isinstance(confirm, ConfirmDialog)
        assert str(confirm.query_one(".dialog-title", Static).render()) == (
            "Delete key 'bbb' of alice?"
        )
        assert chosen.public_id in str(confirm.query_one(".dialog-body", Static).render())
        await pilot.press("y")
        await settle(pilot)
    assert [k.name for k in tui_store.list_keys("alice")] == ["aaa", "ccc"]


async def test_a_key_recreated_while_confirming_is_not_deleted(tui_store: KeyStore) -> None:
    """If the confirmed key is recreated before y, the app says so and deletes nothing."""
    tui_store.create_key("alice", "busy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmDialog)
        recreated = tui_store.recreate_key("alice", "busy").info
        await pilot.press("y")
        await settle(pilot)
        messages = toasts.messages
        assert any("changed meanwhile" in m and "nothing was done" in m for m in messages)
        assert isinstance(app.screen, KeysScreen)
    assert tui_store.get_key("alice", "busy") == recreated


async def test_a_key_deleted_while_confirming_recreate_is_not_recreated(
    tui_store: KeyStore,
) -> None:
    """If the key is deleted (and a new one of that name made) before y, recreate does nothing."""
    tui_store.create_key("alice", "twin", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmDialog)
        tui_store.delete_key("alice", "twin")
        await pilot.press("y")
        await settle(pilot)
        messages = toasts.messages
        assert any("deleted meanwhile; nothing was done" in m for m in messages)
        assert not any(isinstance(s, RevealSecretDialog) for s in app.screen_stack)
    assert tui_store.list_keys("alice") == []


def _fake_tmux(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    """Run as if inside tmux, with a tmux whose set-clipboard option is setting."""
    tmux = tmp_path / "bin" / "tmux"
    tmux.parent.mkdir()
    tmux.write_text(f"#!/bin/sh\necho {setting}\n")
    tmux.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmux.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TMUX", "/tmp/tmux-test/default,1,0")
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    monkeypatch.delenv("SSH_CLIENT", raising=False)


@pytest.mark.parametrize("setting", ["external", "off"])
async def test_copy_dropped_by_tmux_says_not_copied(
    tui_store: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    """Under tmux without set-clipboard on, c says only that the key was not copied, and why."""
    _fake_tmux(tmp_path, monkeypatch, setting)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_create(pilot, "k", ["project"])
        await pilot.press("enter")
        await settle(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)
        await pilot.press("c")
        note = str(reveal.query_one("#copy-status", Static).render())
        assert note.startswith("Not copied: tmux") and "set-clipboard on" in note
        assert "Copied" not in note and "Sent" not in note
        await pilot.press("enter")  # a copy that cannot arrive does not count as a copy
        assert app.screen is reveal


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"TMUX": "x"}, "Sent through tmux"),
        ({"SSH_CONNECTION": "10.0.0.1 5 10.0.0.2 22"}, "Sent over SSH"),
        ({}, "Sent to your terminal's clipboard"),
    ],
)
async def test_copy_note_says_one_thing_where_the_copy_can_arrive(
    tui_store: KeyStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    expected: str,
) -> None:
    """Where the copy can arrive, c says where it was sent, never 'copied' or 'not copied'."""
    _fake_tmux(tmp_path, monkeypatch, "on")
    monkeypatch.delenv("TMUX")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await open_create(pilot, "k", ["project"])
        await pilot.press("enter")
        await settle(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)
        await pilot.press("c")
        note = str(reveal.query_one("#copy-status", Static).render())
        assert note.startswith(expected)
        assert "copied" not in note.lower() and "did not" not in note
        await pilot.press("enter")
        assert isinstance(app.screen, KeysScreen)


def top_line(app: ApiKeysApp) -> str:
    """The first line of the screen as the terminal shows it."""
    return app.screen._compositor.render_strips()[0].text


@pytest.mark.parametrize("width", [40, 70, 80])
async def test_the_top_line_names_the_database_at_any_width(
    tui_store: KeyStore, width: int
) -> None:
    """Below the width of the full URL the top line names the file and its directory; from 70
    columns the owner too (at 40 the directory wins: it tells production from staging)."""
    label = "sqlite:////var/lib/apikey-tui/production-eu/keys.db"
    app = ApiKeysApp(tui_store, owner="alice", database_label=label, poll_seconds=60)
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot)
        line = top_line(app)
        assert "/production-eu/keys.db" in line, line
        assert "owner: alice" in line or width < 70, line
        assert len(label) + 30 > width  # the full label cannot fit here


async def test_the_top_line_shows_the_full_database_when_it_fits(tui_store: KeyStore) -> None:
    """At a width that holds the full (masked) URL, the top line shows it whole."""
    app = make_app(tui_store)
    async with app.run_test(size=(len(tui_store.label) + 40, 24)) as pilot:
        await settle(pilot)
        assert f"database: {tui_store.label}" in top_line(app)


@pytest.mark.parametrize("width", [70, 80])
async def test_the_top_line_tells_apart_databases_that_differ_in_a_parent_directory(
    tui_store: KeyStore, width: int
) -> None:
    """Staging and production files of one name: the table's and the detail's top lines differ."""
    tui_store.create_key("alice", "nightly-reporting-job", ["project"])
    for place in ("staging", "prod"):
        label = f"sqlite:////var/lib/apikey-tui/{place}/keys.db"
        app = ApiKeysApp(tui_store, owner="alice", database_label=label, poll_seconds=60)
        async with app.run_test(size=(width, 24)) as pilot:
            await settle(pilot)
            lines = [top_line(app)]
            await pilot.press("enter")
            await settle(pilot)
            lines.append(top_line(app))
        table, detail = lines
        assert f"/{place}/keys.db" in table and "owner: alice" in table, table
        assert f"/{place}/keys.db" in detail and "nightly-reporting-job" in detail, detail


def test_database_forms_keep_what_tells_databases_apart() -> None:
    """Shorter forms drop whole directories from the middle, never the file's own directory."""
    label = "sqlite:////home/admin/deployments/eu-west/staging/keys.db"
    assert database_forms(label) == [
        label,
        "/home/admin/deployments/eu-west/staging/keys.db",
        "…/admin/deployments/eu-west/staging/keys.db",
        "/home/…/deployments/eu-west/staging/keys.db",
        "…/deployments/eu-west/staging/keys.db",
        "/home/…/eu-west/staging/keys.db",
        "…/eu-west/staging/keys.db",
        "/home/…/staging/keys.db",
        "…/staging/keys.db",
    ]
    what = "Key nightly-reporting-job · owner: alice"
    for width in (60, 70, 80):
        line = fit_context(what, label, width)
        assert "/staging/keys.db" in line and len(line) <= width, line
    assert fit_context(what, label, 30) == "db: …/staging/keys.db · Key n…"
    assert fit_context(what, label, 12).endswith("/keys.db")  # not even the words fit
    url = "postgresql+psycopg://admin:***@db-staging.internal:5433/keys"
    assert database_forms(url) == [url, "db-staging.internal:5433/keys"]
    assert fit_context(what, url, 40).startswith("db: db-staging.internal:5433/keys · ")


def test_database_labels_shorten_to_host_and_database_or_file_and_directory() -> None:
    """PostgreSQL shortens to host[:port]/db, SQLite to the file in its directory, in order."""
    assert database_forms("postgresql+psycopg://admin:***@db.example.com/keys")[-1] == (
        "db.example.com/keys"
    )
    assert database_forms("postgresql+psycopg://admin@db:5433/keys")[-1] == "db:5433/keys"
    short = database_forms("sqlite:////var/lib/apikey-tui/prod-keys.db")[-1]
    assert short == "…/apikey-tui/prod-keys.db"
    label = "postgresql+psycopg://admin:***@db.example.com/keys"
    assert fit_context("API keys · owner: alice", label, 200).endswith(f"database: {label}")
    assert fit_context("API keys · owner: alice", label, 80) == (
        "API keys · owner: alice · database: db.example.com/keys"
    )
    narrow = fit_context("API keys · owner: alice", label, 30)
    assert len(narrow) == 30 and narrow.startswith("db: db.example.com/keys")


EIGHT_SCOPES = {
    "audit": "read the audit trail of every project",
    "billing": "read invoices and usage reports",
    "datasets": "read and write datasets, including uploads of large files",
    "registry": "push and pull images in the container registry",
    "secrets": "read the secrets a project's pipelines use",
    "webhooks": "create and remove webhooks",
}


def add_eight_scopes(store: KeyStore) -> None:
    """Grow the catalog (project, serving) to eight scopes with long descriptions."""
    for name, description in EIGHT_SCOPES.items():
        store.add_scope(name, description)
    assert len(store.list_scopes()) == 8


def on_screen(app: ApiKeysApp, selector: str) -> bool:
    """Whether every widget matching selector lies wholly inside the terminal."""
    screen = app.screen.region
    widgets = list(app.screen.query(selector))
    return bool(widgets) and all(screen.contains_region(w.region) for w in widgets)


@pytest.mark.parametrize("owner", ["alice", None])
async def test_create_dialog_with_eight_scopes_fits_80x24(
    tui_store: KeyStore, owner: str | None
) -> None:
    """At 80x24 with eight scopes the create dialog's buttons are on screen, and it still works."""
    add_eight_scopes(tui_store)
    app = make_app(tui_store, owner=owner)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "eight", ["webhooks"])
        assert on_screen(app, ".dialog") and on_screen(app, "Button")
        assert on_screen(app, "#name")
        await pilot.click("#create")
        await settle(pilot)
        assert isinstance(app.screen, RevealSecretDialog) and on_screen(app, "Button")
        assert not dialog.is_attached
        await pilot.press("c", "enter")
        await settle(pilot)
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmDialog) and on_screen(app, "Button")
        await pilot.press("escape")
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmDialog) and on_screen(app, "Button")
    owner_of_key = owner or app.default_owner
    assert tui_store.get_key(owner_of_key, "eight").scopes == ("webhooks",)


@pytest.mark.parametrize("owner", ["alice", None])
async def test_create_dialog_labels_its_inputs(tui_store: KeyStore, owner: str | None) -> None:
    """At 80x24 with eight scopes the name input (and an owner input) has a visible label."""
    add_eight_scopes(tui_store)
    app = make_app(tui_store, owner=owner)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "eight", ["webhooks"])
        fields = {"#name": ("Name", "eight")}
        if owner is None:
            fields["#owner"] = ("Owner", app.default_owner)
        for field, (label, value) in fields.items():
            box = dialog.query_one(field, Input)
            row = box.content_region.y  # the text's line (the owner's input has a border)
            [line] = screen_lines(app, Region(0, row, 80, 1))
            # (the bordered owner's edge, ▊, stands between label and value)
            assert re.search(rf"█\s+{label}:?\s+(▊\s+)?{re.escape(value)}\s", line), line
        assert on_screen(app, "Button") and on_screen(app, "#name")


def screen_lines(app: ApiKeysApp, region: Region) -> list[str]:
    """The text the terminal shows inside region, line by line."""
    strips = app.screen._compositor.render_strips()
    return [s.text[region.x : region.right] for s in strips[region.y : region.bottom]]


@pytest.mark.parametrize("width", [40, 70, 80])
async def test_reveal_shows_the_whole_key_at_any_width(tui_store: KeyStore, width: int) -> None:
    """From 40 columns up every character of the key is on screen, in equal chunks if needed."""
    app = make_app(tui_store)
    async with app.run_test(size=(width, 24)) as pilot:
        await settle(pilot)
        await open_create(pilot, "narrow", ["project"])
        await pilot.press("enter")
        await settle(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)
        await pilot.press("c")
        key = app.clipboard
        secret = reveal.query_one("#secret", Static)
        lines = screen_lines(app, secret.region)
        assert "".join(line.strip() for line in lines) == key
        assert len({len(line.strip()) for line in lines[:-1]}) <= 1  # equal chunks
        note = reveal.query_one("#split-note", Static)
        assert note.display == (len(lines) > 1)
        assert on_screen(app, "Button") and on_screen(app, "#secret")


async def test_a_mouse_selection_of_the_folded_key_copies_it_whole(tui_store: KeyStore) -> None:
    """At 70 columns, dragging over the two lines of the key and Ctrl+C copies it unbroken."""
    app = make_app(tui_store)
    async with app.run_test(size=(70, 24)) as pilot:
        await settle(pilot)
        await open_create(pilot, "drag", ["project"])
        await pilot.press("enter")
        await settle(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)
        secret = reveal.query_one("#secret", Static)
        assert secret.region.height == 2
        last = (secret.region.width - 1, secret.region.height - 1)
        await pilot.mouse_down(secret, offset=(0, 0))
        await pilot.hover(secret, offset=(last[0] + 1, last[1]))
        await pilot.mouse_up(secret, offset=(last[0] + 1, last[1]))
        await pilot.press("ctrl+c")
        key = app.clipboard
        assert "\n" not in key and keyformat.parse(key).public_id == (
            tui_store.get_key("alice", "drag").public_id
        )
        assert "Sent" in str(reveal.query_one("#copy-status", Static).render())


async def test_left_and_right_move_between_the_confirm_buttons(tui_store: KeyStore) -> None:
    """In a confirmation Left and Right move the focus between Cancel and the action button."""
    tui_store.create_key("alice", "k", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        assert isinstance(app.screen, ConfirmDialog)
        seen = [app.focused.id if app.focused else None]
        for key in ("left", "right", "right"):
            await pilot.press(key)
            seen.append(app.focused.id if app.focused else None)
        assert seen == ["cancel", "confirm", "cancel", "confirm"]
        await pilot.press("escape")
    assert [k.name for k in tui_store.list_keys("alice")] == ["k"]


async def test_tab_never_lands_on_cancel_in_the_create_dialog(tui_store: KeyStore) -> None:
    """Tab cycles name, scopes and (when enabled) Create, never Cancel; Enter never discards."""
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        dialog = await open_create(pilot, "tabbed", [])
        seen = set()
        for _ in range(6):
            await pilot.press("tab")
            seen.add(app.focused.id if app.focused else None)
        assert "cancel" not in seen and {"name", "scopes"} <= seen
        await pilot.press("enter")  # wherever the focus is, the typed name is not thrown away
        assert app.screen is dialog and dialog.query_one("#name", Input).value == "tabbed"


async def test_a_failed_write_is_one_toast_not_two(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a write and the reload after it fail for the same reason, one toast says so."""
    tui_store.create_key("alice", "k", ["project"])
    app = make_app(tui_store)
    app.poll_seconds = 60
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)

        def down(*args: object, **kwargs: object) -> None:
            raise StoreUnavailableError("database unavailable (test): it is down")

        monkeypatch.setattr(tui_store, "delete_key", down)
        monkeypatch.setattr(tui_store, "list_keys", down)
        monkeypatch.setattr(tui_store, "change_marker", down)
        await pilot.press("d", "y")
        await settle(pilot)
        messages = toasts.messages
        assert messages.count("database unavailable (test): it is down") == 1


async def test_the_create_dialogs_owner_looks_like_an_input_and_shift_tab_keeps_it(
    tui_store: KeyStore,
) -> None:
    """With every owner shown, the Owner field has a border; Shift+Tab from the name lands in
    it without selecting its text, so typing adds to the owner instead of replacing it."""
    app = make_app(tui_store, owner=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        owner = app.screen.query_one("#owner", Input)
        assert owner.styles.border_top[0] != "" and owner.region.height == 3
        await pilot.press("shift+tab")
        assert app.focused is owner
        await pilot.press("end", "2")
        assert owner.value == app.default_owner + "2"


async def test_n_before_the_scope_catalog_is_read_opens_the_dialog_once_it_is(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n pressed while the catalog is still being read does not say 'the scope catalog is
    empty' (it is not): the create dialog opens as soon as the catalog is read."""
    import threading

    release = threading.Event()
    real = tui_store.list_scopes

    def slow_scopes() -> Any:
        release.wait(10)
        return real()

    monkeypatch.setattr(tui_store, "list_scopes", slow_scopes)
    toasts = Toasts()
    app = make_app(tui_store)
    async with app.run_test(size=(100, 30), message_hook=toasts.hook) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, KeysScreen)
        assert not any("catalog is empty" in m for m in toasts.messages)
        release.set()
        await settle(pilot)
        assert isinstance(app.screen, CreateKeyDialog)


async def test_a_filter_term_that_names_nothing_says_why(tui_store: KeyStore) -> None:
    """`state:nope` matches no key because it names no state: the empty table says so, as the
    CLI's refusal does (it said only "No key matches"); a plain miss says no more."""
    tui_store.create_key("alice", "deploy", ["project"])
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"state:nope")
        await settle(pilot)
        said = str(app.screen.query_one("#empty", Static).render())
        assert "No key matches 'state:nope'" in said and "names no state: active" in said, said
        app.screen.query_one("#filter", Input).value = "zzz"
        await settle(pilot)
        said = str(app.screen.query_one("#empty", Static).render())
        assert said.strip() == "No key matches 'zzz'.", said
