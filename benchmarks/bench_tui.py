"""Terminal app: time to first paint with 10k and 100k keys, and time per filter keystroke."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time

from textual.widgets import Input

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from benchmarks.bulk import fill

SIZE = (120, 40)


async def first_paint(url: str) -> float:
    """Seconds from starting the app until the table shows its rows on screen."""
    store = KeyStore.open(url)
    app = ApiKeysApp(store, owner="bench", database_label="bench", poll_seconds=3600)
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        while True:
            screen = app.screen
            if isinstance(screen, KeysScreen) and screen.query_one(KeyTable).rows:
                break
            await asyncio.sleep(0.005)
        await pilot.pause()  # one refresh: the rows are painted
        elapsed = time.perf_counter() - start
    store.close()
    return elapsed


async def filter_keystrokes(url: str, typed: str = "key-0123") -> list[float]:
    """Seconds per keystroke: the filter handler plus the repaint, one character at a time."""
    store = KeyStore.open(url)
    app = ApiKeysApp(store, owner="bench", database_label="bench", poll_seconds=3600)
    timings = []
    async with app.run_test(size=SIZE) as pilot:
        while not (isinstance(app.screen, KeysScreen) and app.screen.query_one(KeyTable).rows):
            await asyncio.sleep(0.01)
        box = app.screen.query_one("#filter", Input)
        for n in range(1, len(typed) + 1):
            start = time.perf_counter()
            box.value = typed[:n]  # what a keystroke does, without Pilot's own ~60 ms per press
            await pilot.pause()
            timings.append(time.perf_counter() - start)
        for n in range(len(typed) - 1, -1, -1):  # and deleting back to the full table
            start = time.perf_counter()
            box.value = typed[:n]
            await pilot.pause()
            timings.append(time.perf_counter() - start)
    store.close()
    return timings


def main() -> None:
    """Print one JSON object with the measurements."""
    results: dict[str, float] = {}
    for count in (10_000, 100_000):
        url = f"sqlite:///{tempfile.mkdtemp()}/keys.db"
        fill(url, count)
        results[f"first_paint_{count}_s"] = statistics.median(
            asyncio.run(first_paint(url)) for _ in range(3)
        )
        if count == 100_000:
            strokes = asyncio.run(filter_keystrokes(url))
            results["filter_keystroke_100000_median_ms"] = statistics.median(strokes) * 1000
            results["filter_keystroke_100000_max_ms"] = max(strokes) * 1000
    print(json.dumps(results))


if __name__ == "__main__":
    main()
