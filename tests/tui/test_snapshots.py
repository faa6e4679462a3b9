"""Snapshot tests: the app at 80x24 with fixed data, compared with SVGs kept in the repository.

Set UPDATE_SNAPSHOTS=1 to rewrite them after an intended change (and look at the SVGs).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from textual.pilot import Pilot
from textual.widgets import Input

from apikey_tui.store import CreatedKey, KeyInfo, KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.scope_picker import ScopePicker
from tests.conftest import FakeClock
from tests.tui.test_app import add_eight_scopes, settle

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZE = (80, 24)
NOW = datetime(2026, 11, 20, 12, 3, tzinfo=UTC)
# Not a key of any database: a made-up string of the key's shape, safe to keep in a picture.
EXAMPLE_KEY = "akexampleexample00." + "x" * 52 + "aaaaaaa"


@pytest.fixture(autouse=True)
def fixed_clock(clock: FakeClock) -> None:
    """The app's clock stands at a fixed moment, so pictures ('3 min ago', dates) hold."""
    clock.now = NOW


def fixed_data(store: KeyStore) -> None:
    """Three keys with fixed ids and times, so the pictures never change by themselves."""
    for name, scopes in (("ci-deploy", ["project"]), ("model-client", ["project", "serving"])):
        store.create_key("alice", name, scopes)
    store.create_key("alice", "reports", ["project"])
    with store.engine.begin() as conn:
        for number, name in enumerate(("ci-deploy", "model-client", "reports")):
            conn.execute(
                text(
                    "UPDATE apikey_tui_key SET public_id = :p, created_at = :c, last_used_at = :u"
                    " WHERE name = :n"
                ),
                {
                    "p": f"ak{number}example0000000"[:18],
                    "c": datetime(2026, 11, 1 + number, 9, 30, tzinfo=UTC),
                    "u": datetime(2026, 11, 20, 12, 0, tzinfo=UTC) if number == 1 else None,
                    "n": name,
                },
            )


async def snapshot(pilot: Pilot[Any], name: str) -> None:
    """Compare the app's screen, once it stops changing, with snapshots/NAME.svg (or write it
    when updating)."""
    app = pilot.app
    picture = app.export_screenshot()
    for _ in range(STEADY_TRIES):
        # A table's column widths follow its rows at a later idle: a picture taken between
        # showed a key's history at header width once (a clean-clone CI, nothing else loaded).
        await pilot.pause(0.05)
        again = app.export_screenshot()
        if again == picture:
            break
        picture = again
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1" or not path.exists():
        if os.environ.get("CI") and not path.exists():
            pytest.fail(f"snapshot {path.name} is missing; run with UPDATE_SNAPSHOTS=1 locally")
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(picture)
        return
    if picture != path.read_text():
        actual = path.with_suffix(".actual.svg")
        actual.write_text(picture)
        pytest.fail(f"{path.name} differs from the app's screen; see {actual}")


STEADY_TRIES = 10  # pictures taken 50 ms apart until two agree


def new_app(store: KeyStore, theme: str) -> ApiKeysApp:
    app = ApiKeysApp(store, owner="alice", database_label="sqlite:///keys.db", poll_seconds=60)
    app.theme = theme
    return app


async def run(store: KeyStore, name: str, steps: Any = None, theme: str = "textual-dark") -> None:
    app = new_app(store, theme)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        if steps is not None:
            await steps(pilot)
            await settle(pilot)
        await snapshot(pilot, name)


async def test_empty_state(tui_store: KeyStore) -> None:
    """The picture shows the header, the filter and 'No API keys for alice yet. Press n …'."""
    await run(tui_store, "empty_state")


async def test_table_with_keys(tui_store: KeyStore) -> None:
    """The picture shows three keys sorted by name, one with a last-used time, and the footer."""
    fixed_data(tui_store)
    await run(tui_store, "table_with_keys")


async def test_table_in_light_theme(tui_store: KeyStore) -> None:
    """The picture shows the same table readable in the light theme (theme colours only)."""
    fixed_data(tui_store)
    await run(tui_store, "table_light_theme", theme="textual-light")


async def test_create_dialog_with_an_error(tui_store: KeyStore) -> None:
    """The picture shows the create dialog with a taken name's inline error and Create disabled."""
    fixed_data(tui_store)

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        await pilot.pause()
        pilot.app.screen.query_one("#name", Input).value = "ci-deploy"
        pilot.app.screen.query_one("#scopes", ScopePicker).select("project")

    await run(tui_store, "create_dialog_error", steps)


async def test_reveal(tui_store: KeyStore) -> None:
    """The picture shows the key's line blanked (no picture holds a key), warning and prompt."""
    info = KeyInfo("alice", "ci-deploy", "akexampleexample00", ("project",), NOW)

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.app.push_screen(RevealSecretDialog(CreatedKey(info, EXAMPLE_KEY)))

    await run(tui_store, "reveal", steps)


async def test_reveal_at_70_columns(tui_store: KeyStore) -> None:
    """The picture shows the key at 70x24 as two equal blanked lines, with the note."""
    info = KeyInfo("alice", "ci-deploy", "akexampleexample00", ("project",), NOW)
    app = new_app(tui_store, "textual-dark")
    async with app.run_test(size=(70, 24)) as pilot:
        await settle(pilot)
        await pilot.app.push_screen(RevealSecretDialog(CreatedKey(info, EXAMPLE_KEY)))
        await settle(pilot)
        await snapshot(pilot, "reveal_70_columns")


async def test_delete_confirmation(tui_store: KeyStore) -> None:
    """The picture shows the delete confirmation naming 'ci-deploy' of alice and its public id."""
    fixed_data(tui_store)

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("d")

    await run(tui_store, "delete_confirmation", steps)


async def test_create_dialog_with_eight_scopes(tui_store: KeyStore) -> None:
    """The picture shows the create dialog at 80x24 with eight scopes and both buttons visible."""
    fixed_data(tui_store)
    add_eight_scopes(tui_store)

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("n")
        await pilot.pause()
        pilot.app.screen.query_one("#name", Input).value = "model-upload"
        pilot.app.screen.query_one("#scopes", ScopePicker).select("datasets")

    await run(tui_store, "create_dialog_eight_scopes", steps)


async def test_help(tui_store: KeyStore) -> None:
    """The picture shows help at 80x24: how to close and scroll it, then the key table's keys."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("question_mark")

    await run(tui_store, "help", steps)


async def test_all_owners_with_long_names_at_80_columns(tui_store: KeyStore) -> None:
    """The picture shows --all at 80x24: owner and name cut with '…', every column present."""
    fixed_data(tui_store)
    long_name = "nightly-reporting-job-of-the-data-platform-team-" + "x" * 12
    tui_store.create_key("data-platform-automation", long_name, ["project", "serving"])
    tui_store.create_key("data-platform-automation", long_name[:-1] + "y", ["project"])
    with tui_store.engine.begin() as conn:
        for public_id, name in (
            ("akdataexample00001", long_name),
            ("akdataexample00002", long_name[:-1] + "y"),
        ):
            conn.execute(
                text("UPDATE apikey_tui_key SET public_id = :p, created_at = :c WHERE name = :n"),
                {"p": public_id, "c": datetime(2026, 11, 18, 8, 0, tzinfo=UTC), "n": name},
            )
    app = ApiKeysApp(tui_store, owner=None, database_label="sqlite:///keys.db", poll_seconds=60)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await snapshot(pilot, "all_owners_long_names")
