"""Terminal app: first rows in a real terminal beside a minimal Textual app, first paint in-process
with 10k and 100k keys, and time per filter keystroke.

First rows as the admin pays them: from spawning the process in a private tmux server (120x40)
until the pane shows the first key's row, for the app (`python -m apikey_tui`, SQLite, 10k
keys), a minimal Textual DataTable app (`benchmarks.minimal_table`) and the same minimal app
importing SQLModel and SQLAlchemy first (the floor of an app built on them). The three run in
adjacent triples, the order reversed every other triple; ratios are taken within a triple.
Bytecode is compiled first, as pip does when it installs the package.
"""

from __future__ import annotations

import asyncio
import compileall
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from textual.widgets import Input

from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.key_table import KeyTable
from apikey_tui.tui.keys_screen import KeysScreen
from benchmarks.bulk import fill
from benchmarks.mode import reps

SIZE = (120, 40)
TRIPLES = reps(15, 5)
ROOT = Path(__file__).resolve().parent.parent


def pane_shows(command: str, text: str) -> float:
    """Seconds from spawning command in a fresh tmux server (120x40) until its pane shows text."""
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is needed"
    base = [tmux, "-L", f"bench-{uuid.uuid4().hex[:8]}"]
    start = time.perf_counter()
    subprocess.run([*base, "new-session", "-d", "-x", "120", "-y", "40", command], check=True)
    try:
        while time.perf_counter() - start < 60:
            pane = subprocess.run(
                [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
            ).stdout
            if text in pane:
                return time.perf_counter() - start
            time.sleep(0.005)
        raise AssertionError(f"{text!r} never appeared")
    finally:
        subprocess.run([*base, "kill-server"], check=False, capture_output=True)


def first_rows_beside_minimal(url: str) -> dict[str, Any]:
    """The app's first rows in tmux beside the minimal DataTable app and the floor, in triples."""
    # What an installed package has: pip compiles bytecode at install (without it, every start
    # compiles our modules again: about 0.1 s here, a cost no user pays).
    for folder in (ROOT / "src" / "apikey_tui", ROOT / "benchmarks"):
        compileall.compile_dir(folder, quiet=1)
    python = sys.executable
    cd = f"cd {ROOT} && exec env TERM=xterm-256color"
    commands = {
        "app": f"{cd} APIKEY_TUI_DATABASE_URL='{url}' {python} -m apikey_tui --owner bench",
        "minimal": f"{cd} {python} -m benchmarks.minimal_table",
        "floor": f"{cd} {python} -m benchmarks.minimal_table --with-sqlmodel",
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for n in range(TRIPLES):
        order = list(commands) if n % 2 == 0 else list(reversed(commands))
        for name in order:
            times[name].append(pane_shows(commands[name], "key-000000"))
    result: dict[str, Any] = {f"{name}_s": statistics.median(t) for name, t in times.items()}
    for name in ("app", "floor"):
        ratios = [a / m for a, m in zip(times[name], times["minimal"], strict=True)]
        result[f"{name}_ratio_median"] = statistics.median(ratios)
        result[f"{name}_ratio_min"], result[f"{name}_ratio_max"] = min(ratios), max(ratios)
    result["triples"] = TRIPLES
    result["all_s"] = {name: [round(t, 3) for t in ts] for name, ts in times.items()}
    return result


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
    results: dict[str, Any] = {}
    for count in (10_000, 100_000):
        url = f"sqlite:///{tempfile.mkdtemp()}/keys.db"
        fill(url, count)
        if count == 10_000:
            results["tmux_first_rows_10000"] = first_rows_beside_minimal(url)
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
