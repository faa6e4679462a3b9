"""Usage recording and reading: the warm check's added cost, a flush, a key's report at scale."""

from __future__ import annotations

import json
import statistics
import time
import timeit
from functools import partial
from typing import Any

from sqlalchemy import text

from apikey_tui.clock import system_clock
from apikey_tui.db.models import DAY, usage_minute
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.store.credentials import credential_source
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.use_counts import UseCounts
from benchmarks.bench_verifier import per_call_us
from benchmarks.bulk import fill
from benchmarks.mode import reps
from benchmarks.servers import database

PAIRS = reps(60, 20)
FLUSH_KEYS = 100_000
READ_KEYS = 10_000
YEAR_DAYS = 365


def recording_overhead() -> dict[str, Any]:
    """Adjacent, order-alternating pairs: the same warm check with recording on and off."""
    with database("sqlite") as url:
        key = fill(url, 10)[0]
        header = f"ApiKey {key}"
        hasher = SecretHasher("cheapest")
        on = Verifier.from_url(url, hasher=hasher)
        off = Verifier.from_url(url, hasher=hasher, record_usage=False)
        for verifier in (on, off):
            verifier.verify(header, ("project",))  # warm
        required = ("project",)
        diffs, ratios = [], []
        for i in range(PAIRS):
            order = (on, off) if i % 2 == 0 else (off, on)
            times = {}
            for verifier in order:
                check = partial(verifier.verify, required_scopes=required)
                times[verifier is on] = per_call_us(check, batches=60, size=250, fresh=header)
            diffs.append(times[True] - times[False])
            ratios.append(times[True] / times[False])
        # The added work alone: the warm path's recording statement, in a tight loop.
        names = {"tallies": on._uses.tallies, "required": required}
        names["public_id"] = on.verify(header, required).public_id
        call = (
            min(
                timeit.repeat(
                    "next(tallies[required][public_id])", globals=names, number=100_000, repeat=20
                )
            )
            / 100_000
            * 1e6
        )
        on.close()
        off.close()
    return {
        "statement_us": call,
        "pairs": PAIRS,
        "added_us_median": statistics.median(diffs),
        "added_us_min": min(diffs),
        "added_us_max": max(diffs),
        "ratio_median": statistics.median(ratios),
        "warm_off_us": times[False],
    }


def in_server() -> dict[str, Any]:
    """The middleware app with recording on against the same app with it off, inside uvicorn
    (wrk, adjacent order-alternating pairs); and off against off, the pairs' own noise."""
    from benchmarks.bench_middleware import paired
    from benchmarks.servers import Server
    from benchmarks.servers import database as server_database

    with server_database("sqlite") as url:
        store = KeyStore.open(url)  # the real argon2 profile: the check is warm anyway
        key = store.create_key("bench", "load", ["project"]).plaintext
        store.close()
        lua = f'wrk.headers["Authorization"] = "ApiKey {key}"\n'
        on_env = {"BENCH_DATABASE_URL": url, "BENCH_RECORD_USAGE": "1"}
        off_env = {"BENCH_DATABASE_URL": url, "BENCH_RECORD_USAGE": "0"}
        with Server("starlette_checked", on_env) as on, Server("starlette_checked", off_env) as off:
            assert on.get("/", {"Authorization": f"ApiKey {key}"})[0] == 200
            recording = paired(on, off, lua)
        with Server("starlette_checked", off_env) as a, Server("starlette_checked", off_env) as b:
            control = paired(a, b, lua)
    return {"on_off": recording, "off_off": control}


def flush_seconds(kind: str) -> tuple[float, float]:
    """One flush of FLUSH_KEYS distinct key-minutes (one row each), the flush's Python included,
    and the floor: the database inserting as many such rows made by itself (one INSERT ...
    SELECT), in the same table, just after."""
    with database(kind) as url:
        KeyStore.open(url).close()
        from apikey_tui.db import make_engine

        source = credential_source(make_engine(url))
        counts = UseCounts(source.record_usage, 3600, system_clock, limit=FLUSH_KEYS)
        required = ("project",)
        for n in range(FLUSH_KEYS):
            counts.allowed(f"ak{n:016d}", required)
        start = time.perf_counter()
        counts.flush()
        seconds = time.perf_counter() - start
        assert counts.flushed == FLUSH_KEYS
        counts.close()
        source.close()
        engine = make_engine(url)
        with engine.begin() as conn:
            start = time.perf_counter()
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                    " WHERE i < 100000)"
                    " SELECT 'ak' || (1000000000000000 + i), 30000000, 1, 0, 'project', 1 FROM n"
                )
            )
        floor = time.perf_counter() - start
        engine.dispose()
    return seconds, floor


def report_ms(kind: str) -> dict[str, float]:
    """A key's report (30-day scopes, 403s, wrong secrets, day series, 7-day hourly series) and
    its JSON, with a year of compacted data for READ_KEYS keys; also the Usage view's lists."""
    with database(kind) as url:
        fill(url, READ_KEYS)
        store = KeyStore.open(url)
        today = usage_minute(store.clock())
        today -= today % DAY
        with store.engine.begin() as conn:
            # A year per key: days before the last 30, hours for days 2 to 30 (a tenth of the
            # keys), minutes (every fifth; a hundredth of the keys) for the last 48 h; two scope
            # sets each.
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " WITH RECURSIVE d(n) AS (SELECT 30 UNION ALL SELECT n + 1 FROM d"
                    " WHERE n < 364)"  # a year of days
                    " SELECT k.public_id, :today - d.n * 1440, 1440, 0, s.scope, 100"
                    " FROM apikey_tui_key k CROSS JOIN d"
                    " CROSS JOIN (SELECT 'project' AS scope UNION ALL SELECT 'project serving') s"
                ),
                {"today": today},
            )
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " WITH RECURSIVE h(n) AS (SELECT 48 UNION ALL SELECT n + 1 FROM h"
                    " WHERE n < 719)"
                    " SELECT k.public_id, :now - :now % 60 - h.n * 60, 60, 0, s.scope, 4"
                    " FROM apikey_tui_key k CROSS JOIN h"
                    " CROSS JOIN (SELECT 'project' AS scope UNION ALL SELECT 'project serving') s"
                    " WHERE k.id % 10 = 0"  # a tenth of the keys busy every hour
                ),
                {"now": usage_minute(store.clock())},
            )
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " WITH RECURSIVE m(n) AS (SELECT 0 UNION ALL SELECT n + 5 FROM m"
                    " WHERE n < 2875)"
                    " SELECT k.public_id, :now - m.n, 1, 0, s.scope, 1"
                    " FROM apikey_tui_key k CROSS JOIN m"
                    " CROSS JOIN (SELECT 'project' AS scope UNION ALL SELECT 'project serving') s"
                    " WHERE k.id % 100 = 0"
                ),
                {"now": usage_minute(store.clock())},
            )
            rows = conn.execute(text("SELECT count(*) FROM apikey_tui_usage")).scalar_one()
            name = conn.execute(
                text("SELECT name FROM apikey_tui_key WHERE id % 100 = 0 LIMIT 1")
            ).scalar_one()
            if conn.dialect.name == "postgresql":
                conn.execute(text("ANALYZE apikey_tui_usage"))

        def one() -> None:
            json.dumps(store.key_usage("bench", name).to_json())

        one()
        reads = []
        for _ in range(15):
            start = time.perf_counter()
            one()
            reads.append((time.perf_counter() - start) * 1000)
        views = []
        for _ in range(3):
            start = time.perf_counter()
            store.usage_overview()
            views.append((time.perf_counter() - start) * 1000)
        store.close()
    return {"rows": rows, "report_ms": statistics.median(reads), "overview_ms": min(views)}


def main() -> None:
    """Print the results as one JSON line (benchmarks/run.py reads the last line)."""
    result: dict[str, Any] = {
        "recording": recording_overhead(),
        "in_server": in_server(),
    }
    for kind in ("sqlite", "postgresql"):
        result[f"flush_{kind}_s"], result[f"flush_{kind}_floor_s"] = flush_seconds(kind)
        result[f"read_{kind}"] = report_ms(kind)
    print(json.dumps(result))


def markdown(r: Any) -> list[str]:
    """The RESULTS.md section for these numbers (for benchmarks/run.py to render)."""
    if r is None:
        return []
    rec = r["recording"]

    def met(value: float, target: float) -> str:
        verdict = "met" if value <= target else "**missed**"
        return f"{verdict} ({value / target:.2f}x)"

    lines = [
        "## Usage recording and reading (`bench_usage.py`)",
        "",
        f"The same warm check (`verify`, one scope required) on two verifiers of one SQLite"
        f" database, recording on and off, in {rec['pairs']} adjacent pairs alternating which"
        " runs first; each side is the median of 60 batches of 250 checks (the check with"
        f" recording off took {rec['warm_off_us']:.2f} µs in this loop; single pairs spread by"
        " microseconds on this shared machine, so only the median means much). An allowed"
        " request advances a C counter per key and scope set (`next(tallies[required]"
        "[public_id])`: two dict lookups, nothing allocated, nothing left for the writer"
        " thread to count per request). Before (2026-11-25) it appended a tuple to a deque"
        " that the writer thread then counted while holding the GIL the requests need: 0.356"
        " µs added, 0.19 µs of it the append. Callgrind, once each (its counts move by"
        " several hundred instructions between runs here, as background threads wake on wall"
        " time): 3,067 more instructions per check with recording on before (8.2 % of"
        " 37,429), 776 (2.1 %) with the tallies. PostgreSQL's"
        " flush is one COPY (it was one INSERT of a JSON array: 1.07 s); five runs on a quiet"
        " moment: 0.43 to 0.52 s, the floor 0.39 to 0.42 s.",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| added cost of recording, median of pairs | {rec['added_us_median']:.3f} µs"
        f" ({rec['added_us_min']:.3f} to {rec['added_us_max']:.3f}); ratio on/off"
        f" {rec['ratio_median']:.3f} (check with recording off: {rec['warm_off_us']:.2f} µs) |"
        f" ≤ 0.3 µs {met(rec['added_us_median'], 0.3)} |",
        "| the warm path's recording statement alone (`next(tallies[required][public_id])`),"
        f" tight loop | {rec['statement_us']:.3f} µs | ≤ 0.3 µs {met(rec['statement_us'], 0.3)} |",
        *_in_server_rows(r.get("in_server")),
    ]
    for kind, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        read = r[f"read_{kind}"]
        lines += [
            f"| {label}: flush of {FLUSH_KEYS:,} distinct key-minutes"
            f" ({FLUSH_KEYS:,} rows) | {r[f'flush_{kind}_s']:.2f} s"
            f" ({r[f'flush_{kind}_s'] / r[f'flush_{kind}_floor_s']:.1f}x the database's own"
            f" INSERT ... SELECT of as many rows: {r[f'flush_{kind}_floor_s']:.2f} s) |"
            f" ≤ 1 s {met(r[f'flush_{kind}_s'], 1.0)} |",
            f"| {label}: a key's usage report and JSON (30-day scopes, day and 7-day hourly"
            f" series), a year of compacted data for {READ_KEYS:,} keys ({read['rows']:,} rows)"
            f" | {read['report_ms']:.1f} ms | ≤ 50 ms {met(read['report_ms'], 50)} |",
            f"| {label}: the Usage view's lists (busiest, 403s, wrong secrets; 7 days), same"
            f" data | {read['overview_ms']:.0f} ms | (recorded; at 1M keys:"
            " `bench_usage_app.py`) |",
        ]
    return [*lines, ""]


def _in_server_rows(s: Any) -> list[str]:
    """Inside uvicorn: recording on/off, beside off/off (the noise of the same measure)."""
    if s is None:
        return []
    on, same = s["on_off"], s["off_off"]
    noise = max(abs(same["rps_ratio_min"] - 1), abs(same["rps_ratio_max"] - 1))
    change = abs(on["rps_ratio_median"] - 1)
    verdict = "met" if change <= noise else "**missed**"
    return [
        f"| inside uvicorn (the ASGI middleware app, wrk, {on['pairs']} adjacent pairs of"
        f" {on['seconds_per_run']:.0f} s): requests/s, recording on / off | median"
        f" {on['rps_ratio_median']:.3f} ({on['rps_ratio_min']:.3f} to {on['rps_ratio_max']:.3f});"
        f" {on['rps_subject']:.0f} / {on['rps_baseline']:.0f} req/s | unchanged within noise"
        f" {verdict} (off / off, the same servers' noise: {same['rps_ratio_min']:.3f} to"
        f" {same['rps_ratio_max']:.3f}) |",
    ]


if __name__ == "__main__":
    main()
