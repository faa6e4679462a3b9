"""The terminal app at 10k, 100k and 1M keys, measured as the admin pays, on both backends.

First rows: from starting `python -m apikey_tui` in a real terminal (a private tmux server,
120x40) until the pane shows the first key's row; memory: the app process's RSS once the count
has arrived, and its peak. Filter keystroke: in-process (Textual's pilot, 120x40) from setting
the filter to the end of the repaint of the database's answer, one character at a time.

`python -m benchmarks.bench_tui_scale [sizes...]` prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from benchmarks.scale_data import fast_fill

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SIZES = (10_000, 100_000, 1_000_000)
RUNS = 3


@contextmanager
def database(kind: str, count: int) -> Iterator[str]:
    """A fresh SQLite file or PostgreSQL schema holding count keys of owner 'bench'."""
    if kind == "sqlite":
        folder = tempfile.mkdtemp()
        url = f"sqlite:///{folder}/keys.db"
        fast_fill(url, count)
        try:
            yield url
        finally:
            shutil.rmtree(folder)
        return
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    libpq = POSTGRES.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        # pg_trgm (the filter's index) lives in public, once per database: made inside this
        # schema instead, dropping the schema would take every other schema's indexes with it.
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{POSTGRES}?options=-csearch_path%3D{schema}"
    try:
        fast_fill(url, count)
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {schema}.apikey_tui_key")
            conn.execute(f"VACUUM ANALYZE {schema}.apikey_tui_key_scope")
        yield url
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def _rss_mib(pid: int) -> tuple[float, float]:
    """(RSS, peak RSS) of a process in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def first_rows_in_tmux(url: str, count: int) -> dict[str, float]:
    """Seconds from spawning the app until tmux's pane shows key-000000, and its memory."""
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is needed"
    base = [tmux, "-L", f"bench-{uuid.uuid4().hex[:8]}"]
    command = (
        f"exec env APIKEY_TUI_DATABASE_URL='{url}' TERM=xterm-256color "
        f"{sys.executable} -m apikey_tui --owner bench"
    )
    start = time.perf_counter()
    subprocess.run([*base, "new-session", "-d", "-x", "120", "-y", "40", command], check=True)
    try:
        seen = None
        while time.perf_counter() - start < 120:
            pane = subprocess.run(
                [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
            ).stdout
            if "key-000000" in pane:
                seen = time.perf_counter() - start
                break
            time.sleep(0.01)
        assert seen is not None, "the first rows never appeared"
        pid = int(
            subprocess.run(
                [*base, "display-message", "-p", "#{pane_pid}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        counted = f"{count:,} keys"
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline:
            pane = subprocess.run(
                [*base, "capture-pane", "-p"], capture_output=True, text=True, check=False
            ).stdout
            if counted in pane:
                break
            time.sleep(0.05)
        counted_s = time.perf_counter() - start
        time.sleep(0.5)
        rss, peak = _rss_mib(pid)
        with open(f"/proc/{pid}/stat") as stat:
            parts = stat.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        app_cpu = (int(parts[11]) + int(parts[12])) / ticks
    finally:
        subprocess.run([*base, "kill-server"], check=False, capture_output=True)
    return {
        "first_rows_s": seen,
        "counted_s": counted_s,
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "cpu_s_until_counted": app_cpu,
    }


async def filter_keystrokes(url: str, typed: str) -> list[float]:
    """Seconds per keystroke until the database's answer is painted (in-process, 120x40)."""
    from textual.widgets import Input

    from apikey_tui.store import KeyStore
    from apikey_tui.tui.app import ApiKeysApp
    from apikey_tui.tui.key_table import KeyTable
    from apikey_tui.tui.keys_screen import KeysScreen

    store = KeyStore.open(url)
    app = ApiKeysApp(store, owner="bench", database_label="bench", poll_seconds=3600)
    timings = []
    async with app.run_test(size=(120, 40)) as pilot:
        while not (isinstance(app.screen, KeysScreen) and app.screen.query_one(KeyTable).loaded):
            await asyncio.sleep(0.01)
        table = app.screen.query_one(KeyTable)
        box = app.screen.query_one("#filter", Input)
        steps = [typed[:n] for n in range(1, len(typed) + 1)]
        steps += [typed[:n] for n in range(len(typed) - 1, -1, -1)]
        for text in steps:
            start = time.perf_counter()
            box.value = text  # what a keystroke does, without Pilot's own ~60 ms per press
            while not (table.key_query.text == text and table._shown == table._generation):
                await asyncio.sleep(0.002)
            await pilot.pause()  # the repaint
            timings.append(time.perf_counter() - start)
    store.close()
    return timings


def whole_process_s(arguments: list[str], runs: int = 15) -> float:
    """Median wall time of a whole process."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(arguments, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cli_start(url: str) -> dict[str, float]:
    """`keys list` beside `python -c pass` and importing sqlmodel (--help: bench_cli_start.py)."""
    python = sys.executable
    env_url = ["--database-url", url]
    return {
        "python_pass_s": whole_process_s([python, "-c", "pass"]),
        "import_sqlmodel_s": whole_process_s([python, "-c", "import sqlmodel"]),
        # the two libraries the app is built on, and nothing of ours: no app can show rows sooner
        "import_textual_sqlmodel_s": whole_process_s(
            [python, "-c", "import textual.app, sqlmodel"], runs=9
        ),
        # what the app imports before it can draw anything: the floor under "first rows"
        "import_app_s": whole_process_s([python, "-c", "import apikey_tui.tui.app"], runs=5),
        "keys_list_s": whole_process_s(
            [python, "-m", "apikey_tui", "keys", "list", "--owner", "bench", *env_url]
        ),
    }


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or list(SIZES)
    results: dict[str, Any] = {}
    for kind in ("sqlite", "postgresql"):
        for count in sizes:
            with database(kind, count) as url:
                runs = [first_rows_in_tmux(url, count) for _ in range(RUNS)]
                entry: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
                entry["first_rows_s_all"] = [r["first_rows_s"] for r in runs]
                if count == max(sizes):
                    for label, typed in (("common", "key-0123"), ("rare", "999999")):
                        strokes = asyncio.run(filter_keystrokes(url, typed))
                        entry[f"filter_{label}_median_ms"] = statistics.median(strokes) * 1000
                        entry[f"filter_{label}_max_ms"] = max(strokes) * 1000
                        entry[f"filter_{label}_all_ms"] = [round(s * 1000) for s in strokes]
                if kind == "sqlite" and count == 10_000:
                    # keys list prints every key: measured on the smallest table
                    results["cli"] = cli_start(url)
                results[f"{kind}_{count}"] = entry
                print(kind, count, json.dumps(entry), file=sys.stderr, flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
