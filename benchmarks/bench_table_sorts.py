"""The key table's window per sort at 10,000 keys: first rows, a deep keyset page, a position.

Store level (no terminal): what each sort of the table costs the database, on SQLite and
PostgreSQL, as ratios to the name order (the default). `python -m benchmarks.bench_table_sorts`.
"""

from __future__ import annotations

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


def main() -> None:
    kinds = sys.argv[1:] or ["sqlite", "postgresql"]
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
