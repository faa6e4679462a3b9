"""The app's usage parts: the key table's first rows with the 7-day column, the Usage view's read.

`python -m benchmarks.bench_usage_app first-rows` (10,000 keys, each used every day of the
week): the key table's first rows and its usage column, in the app (run under another tree's
PYTHONPATH for the before number). `python -m benchmarks.bench_usage_app view [KEYS]` (default
1,000,000 keys, every EVERY-th used every day of the month): the Usage view's two reads, its
three lists and its proposals.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from apikey_tui.db.models import DAY, usage_minute
from apikey_tui.store import KeyStore
from benchmarks.scale_data import fast_fill


def _fill_usage(store: KeyStore, every: int, days: int) -> int:
    """One day row a day for every `every`-th key over `days` days (the compacted shape)."""
    today = usage_minute(store.clock())
    today -= today % DAY
    with store.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                " WITH RECURSIVE d(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < :last)"
                " SELECT k.public_id, :today - d.n * 1440, 1440, 0, 'project', 1 + k.id % 50"
                " FROM apikey_tui_key k CROSS JOIN d WHERE k.id % :every = 0"
            ),
            {"today": today, "last": days - 1, "every": every},
        )
        return int(conn.execute(text("SELECT count(*) FROM apikey_tui_usage")).scalar_one())


async def _first_rows(url: str) -> tuple[float, float]:
    from apikey_tui.tui.app import ApiKeysApp
    from apikey_tui.tui.key_table import KeyTable

    store = KeyStore.open(url)
    app = ApiKeysApp(store, owner="bench", database_label="bench", poll_seconds=60)
    start = time.perf_counter()
    rows = usage = 0.0
    async with app.run_test(size=(120, 30)) as pilot:
        while True:
            await pilot.pause(0.002)
            table = app.screen.query(KeyTable)
            if table and table.first().rows:
                rows = rows or time.perf_counter() - start
                if not hasattr(table.first(), "usage_text") or table.first().usage_text(0):
                    usage = time.perf_counter() - start
                    break
    store.close()
    return rows * 1000, usage * 1000


def first_rows() -> dict[str, float]:
    """Median of 7 app starts: ms to the first rows, and to their usage column."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'keys.db'}"
        fast_fill(url, 10_000)
        store = KeyStore.open(url)
        _fill_usage(store, 1, 7)
        store.close()
        runs = [asyncio.run(_first_rows(url)) for _ in range(8)][1:]
    return {
        "first_rows_ms": statistics.median(r[0] for r in runs),
        "usage_column_ms": statistics.median(r[1] for r in runs),
    }


EVERY = 10  # every tenth key used every day: 100,000 active keys at a million


def view(keys: int, every: int = EVERY) -> dict[str, float]:
    """The Usage view's read (its four lists) at `keys` keys: best of 3, in ms."""
    from apikey_tui.store.usage import DEFAULT_WINDOW
    from apikey_tui.tui.screens.usage import UsageScreen

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'keys.db'}"
        fast_fill(url, keys)
        store = KeyStore.open(url)
        rows = _fill_usage(store, every, 30)

        class Session:
            owner: str | None = None
            default_owner = "bench"
            database_label = "bench"
            poll_seconds = 60.0

        Session.store = store  # type: ignore[attr-defined]
        screen = UsageScreen(Session())  # type: ignore[arg-type]
        lists, proposals = [], []
        for _ in range(3):
            start = time.perf_counter()
            screen.read_store(store)
            lists.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            store.rightsize(DEFAULT_WINDOW)
            proposals.append((time.perf_counter() - start) * 1000)
        store.close()
    return {
        "keys": keys,
        "active_keys": keys // every,
        "usage_rows": rows,
        "lists_ms": min(lists),
        "proposals_ms": min(proposals),
    }


def main() -> None:
    """Print the result as one JSON line."""
    if sys.argv[1:2] == ["view"]:
        keys = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
        result = view(keys, int(sys.argv[3]) if len(sys.argv) > 3 else EVERY)
    else:
        result = first_rows()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
