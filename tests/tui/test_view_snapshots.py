"""Snapshots of the key detail, scope catalog and audit trail at 80x24, fixed data and clock.

Set UPDATE_SNAPSHOTS=1 to rewrite them after an intended change (and look at the SVGs).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text
from textual.pilot import Pilot

from apikey_tui.store import KeyStore
from tests.conftest import FakeClock
from tests.tui.test_snapshots import fixed_data, run

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture
def views_data(tui_store: KeyStore, clock: FakeClock) -> KeyStore:
    """The table's fixed keys, a rescope and a third scope, every event at a fixed time."""
    clock.now = NOW
    fixed_data(tui_store)
    tui_store.set_key_scopes("alice", "model-client", ["project", "serving"])
    tui_store.add_scope("billing", "Invoices, payment methods and the monthly usage report " * 2)
    with tui_store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE apikey_tui_event SET public_id = (SELECT k.public_id FROM apikey_tui_key k"
                " WHERE k.owner = apikey_tui_event.owner AND k.name = apikey_tui_event.key_name)"
            )
        )
        for number in range(1, 6):
            conn.execute(
                text("UPDATE apikey_tui_event SET at = :at WHERE id = :id"),
                {"at": datetime(2026, 11, number, 9, 30, tzinfo=UTC), "id": number},
            )
    return tui_store


async def test_key_detail(views_data: KeyStore) -> None:
    """The picture shows model-client in full: times, maker, two scopes, two events."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("down", "enter")

    await run(views_data, "key_detail", steps)


async def test_scope_catalog(views_data: KeyStore) -> None:
    """The picture shows three scopes with key counts, a long description cut with '…'."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("c")

    await run(views_data, "scope_catalog", steps)


async def test_audit_trail(views_data: KeyStore) -> None:
    """The picture shows five events newest first, the filters and the selected event in full."""

    async def steps(pilot: Pilot[Any]) -> None:
        await pilot.press("a")

    await run(views_data, "audit_trail", steps)
