"""The app's usage parts: the key table's first rows with the 7-day column, the Usage view's read.

`python -m benchmarks.bench_usage_app first-rows` (10,000 keys, each used every day of the
week): the key table's first rows and its usage column, in the app (run under another tree's
PYTHONPATH for the before number). `python -m benchmarks.bench_usage_app view [KEYS [EVERY
[sqlite|postgresql]]]` (default 1,000,000 keys, every EVERY-th used every day of the month): the
Usage view's reads (what opens it: its three lists and the first page of proposals; then the
count of every proposal) and `keys rightsize`'s.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def view(keys: int, every: int = EVERY, kind: str = "sqlite") -> dict[str, Any]:
    """The Usage view's reads at `keys` keys, best of 3, in ms: what opens it (its three lists
    and the first page of proposals), then the count of every proposal, and `keys rightsize`'s
    read (every proposal and refusal)."""
    from apikey_tui.store.types import DEFAULT_WINDOW
    from apikey_tui.tui.screens.usage import LIMIT, UsageScreen
    from benchmarks.servers import database

    with database(kind) as url:
        fast_fill(url, keys)
        store = KeyStore.open(url)
        rows = _fill_usage(store, every, 30)
        if kind == "postgresql":  # as autovacuum leaves an insert-only table: index-only scans
            with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE apikey_tui_usage"))

        class Session:
            owner: str | None = None
            default_owner = "bench"
            database_label = "bench"
            poll_seconds = 60.0

        Session.store = store  # type: ignore[attr-defined]
        screen = UsageScreen(Session())  # type: ignore[arg-type]
        timings: dict[str, list[float]] = {"lists": [], "first": [], "count": [], "cli": []}
        proposals = 0
        for _ in range(3):
            for name, read in (
                ("lists", lambda: screen.read_store(store)),
                ("first", lambda: store.proposals(DEFAULT_WINDOW, limit=LIMIT + 1)),
                ("count", lambda: store.proposals(DEFAULT_WINDOW)),
                ("cli", lambda: store.rightsize(DEFAULT_WINDOW)),
            ):
                start = time.perf_counter()
                found = read()
                timings[name].append((time.perf_counter() - start) * 1000)
                if name == "count":
                    proposals = len(found)  # type: ignore[arg-type]
        store.close()
    best = {name: min(values) for name, values in timings.items()}
    return {
        "kind": kind,
        "keys": keys,
        "active_keys": keys // every,
        "usage_rows": rows,
        "proposals": proposals,
        "lists_ms": best["lists"],
        "first_proposals_ms": best["first"],
        "open_ms": min(a + b for a, b in zip(timings["lists"], timings["first"], strict=True)),
        "count_ms": best["count"],
        "rightsize_ms": best["cli"],
    }


def markdown(r: Any) -> list[str]:
    """The RESULTS.md section for these numbers (for benchmarks/run.py to render)."""
    if r is None:
        return []
    rows = r["first_rows"]
    lines = [
        "## The app's usage parts (`bench_usage_app.py`)",
        "",
        "*First rows* (SQLite): the app started in-process at 120x30 on 10,000 keys, each used"
        " every day of the week, to the first rows drawn and to their 7-day column (median of 7"
        " starts after a warm-up). *Usage view*: its reads, best of 3, at 1,000,000 keys with a"
        " day row a day for 30 days for some of them (a third of those hold a scope they never"
        " use: a proposal each). It opens when its three lists and its first page of proposals"
        " (ten, and whether there are more) are read; the count of the rest follows in its own"
        " worker. On PostgreSQL the usage table is vacuumed first, as autovacuum leaves an"
        " insert-only table (index-only scans). Before schema version 6 and the walk (the"
        " view waited for every proposal), SQLite: lists 114 ms and proposals 882 ms at 10,000"
        " busy keys, 1,203 ms and 8,642 ms at 100,000; PostgreSQL at 100,000 (measured once,"
        " the old code on the new index): lists 2.0 s, proposals 21 s.",
        "",
        "| measure | result | target |",
        "|---|---|---|",
    ]
    before = r.get("first_rows_before_ms")
    if before:  # measured by hand: this module run under the tree before the column
        lines.append(
            f"| first rows, 10,000 keys, before the column (three runs) |"
            f" {' / '.join(f'{v:.0f}' for v in before)} ms | (recorded) |"
        )
    lines += [
        f"| first rows, 10,000 keys, with the 7-day column | {rows['first_rows_ms']:.0f} ms"
        + (f" ({rows['first_rows_ms'] / statistics.median(before):.2f}x before)" if before else "")
        + " | about the same as before |",
        f"| the 7-day column drawn (one `daily_requests` query per 100 keys, after the rows)"
        f" | {rows['usage_column_ms']:.0f} ms | (recorded) |",
    ]

    def met(ms: float) -> str:
        return f"≤ 1 s {'met' if ms <= 1000 else '**missed**'} ({ms / 1000:.2f}x)"

    for view in r["views"]:
        label = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[view.get("kind", "sqlite")]
        lines += [
            f"| {label}: Usage view at {view['keys']:,} keys, {view['active_keys']:,} busy"
            f" ({view['usage_rows']:,} usage rows, {view['proposals']:,} proposals): opens"
            f" (its three lists, then the first page of proposals) | {view['open_ms']:.0f} ms"
            f" ({view['lists_ms']:.0f} + {view['first_proposals_ms']:.0f})"
            f" | {met(view['open_ms'])} |",
            f"| same: the count of every proposal (after the view opened, in its own worker)"
            f" | {view['count_ms']:.0f} ms | (recorded) |",
            f"| same: `keys rightsize`'s read (every proposal and refusal)"
            f" | {view['rightsize_ms']:.0f} ms | (recorded) |",
        ]
    return [*lines, ""]


def main() -> None:
    """Print the result as one JSON line (benchmarks/run.py reads the last line)."""
    if sys.argv[1:2] == ["view"]:  # view [KEYS [EVERY [sqlite|postgresql]]]
        keys = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
        every = int(sys.argv[3]) if len(sys.argv) > 3 else EVERY
        print(json.dumps(view(keys, every, sys.argv[4] if len(sys.argv) > 4 else "sqlite")))
    elif sys.argv[1:2] == ["first-rows"]:
        print(json.dumps(first_rows()))
    else:
        views = [view(1_000_000, 100), view(1_000_000, 10), view(1_000_000, 10, "postgresql")]
        print(json.dumps({"first_rows": first_rows(), "views": views}))


if __name__ == "__main__":
    main()
