"""The key table's window per sort at 10,000 keys: first rows, a deep keyset page, a position.

Store level (no terminal): what each sort of the table costs the database, on SQLite and
PostgreSQL, as ratios to the name order (the default). Then the app (headless pilot, 120x40,
SQLite): first rows on screen, and from asking for each sort to its rows on screen.
`python -m benchmarks.bench_table_sorts [sqlite|postgresql|app …]`.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

from apikey_tui.store import SORTS, KeyQuery, KeyStore
from benchmarks.bench_tui_scale import database

COUNT = 10_000
RUNS = 7


def _median_ms(call: Callable[[], object]) -> float:
    call()  # warm: the first read pays for the statement cache and the page cache
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(url: str) -> dict[str, tuple[float, float, float]]:
    """(first 100 rows, the page after row 5,000, the position of a key) in ms, per sort."""
    store = KeyStore.open(url)
    found: dict[str, tuple[float, float, float]] = {}
    try:
        for sort in SORTS:
            query = KeyQuery("bench", "", sort, False)
            middle = store.key_window(query, 5000, 1)[0]
            found[sort] = (
                _median_ms(partial(store.key_window, query, 0, 100)),
                _median_ms(partial(store.key_window, query, 0, 100, after=middle)),
                _median_ms(partial(store.key_position, query, middle.owner, middle.name)),
            )
    finally:
        store.close()
    return found


async def _app_times(url: str) -> dict[str, float]:
    """Seconds to the first rows on screen, then from each sort's request to its rows."""
    from apikey_tui.tui.app import ApiKeysApp
    from apikey_tui.tui.key_table import SORTABLE, KeyTable
    from apikey_tui.tui.keys_screen import KeysScreen

    store = KeyStore.open(url)
    app = ApiKeysApp(store, owner="bench", database_label="bench", poll_seconds=3600)
    found: dict[str, float] = {}
    start = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        while not (isinstance(app.screen, KeysScreen) and app.screen.query_one(KeyTable).rows):
            await asyncio.sleep(0.002)
        await pilot.pause()
        found["first rows"] = time.perf_counter() - start
        table = app.screen.query_one(KeyTable)
        for sort in SORTABLE:
            for reverse in (False, True):
                table.loaded, before = False, table._generation
                start = time.perf_counter()
                table.sort_by(sort, reverse=reverse)
                while table._shown == before or not table.rows:
                    await asyncio.sleep(0.002)
                await pilot.pause()
                found[f"{sort}{' reversed' if reverse else ''}"] = time.perf_counter() - start
    store.close()
    return found


def main() -> None:
    kinds = sys.argv[1:] or ["sqlite", "postgresql", "app"]
    if "app" in kinds:
        kinds.remove("app")
        with database("sqlite", COUNT) as url:
            runs = [asyncio.run(_app_times(url)) for _ in range(3)]
        print(f"app, SQLite, {COUNT:,} keys (headless 120x40, median of 3, ms):")
        for name in runs[0]:
            print(f"  {name:22} {statistics.median(r[name] for r in runs) * 1000:7.1f}")
    for kind in kinds:
        with database(kind, COUNT) as url:
            found = measure(url)
        base = found["name"][0]
        print(f"{kind}, {COUNT:,} keys (median of {RUNS}, ms; ratio of first rows to name):")
        for sort, (first, page, position) in found.items():
            print(
                f"  {sort:10} first {first:6.2f} ({first / base:4.1f}x)  "
                f"page@5000 {page:6.2f}  position {position:6.2f}"
            )


if __name__ == "__main__":
    main()
