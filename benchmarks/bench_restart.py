"""A service restarting under traffic: 503s while the index loads, argon2 warm-up, index RSS."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from apikey_tui.errors import AuthError
from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier
from benchmarks.bulk import fill
from benchmarks.mode import reps
from benchmarks.scale_data import fast_fill
from benchmarks.servers import database

SIZES = [int(n) for n in os.environ.get("BENCH_RESTART_KEYS", "100000,1000000").split(",")]
VALID = 5000  # distinct valid keys presented by the closed loop
THREADS = 4
ACTIVE = 10_000  # active keys of the warm-up measure
# The valid keys' profile (a release before key-secret-v2 is measured with "cheapest", as cheap).
PROFILE = os.environ.get("BENCH_RESTART_PROFILE", "key-secret-v2")
PARTS = os.environ.get("BENCH_RESTART_PARTS", "restarts,rss,warm_up").split(",")


def rss_kib() -> int:
    """The process's resident set now (VmRSS), what the machine pays for it."""
    with open("/proc/self/status") as status:
        found = re.search(r"VmRSS:\s+(\d+)", status.read())
    assert found is not None
    return int(found[1])


def under_traffic(url: str, keys: list[str]) -> dict[str, Any]:
    """A fresh verifier meets `keys` (distinct, valid) from THREADS closed loops at once."""
    verifier = Verifier.from_url(url, hasher=SecretHasher(PROFILE))  # no hash upgrades
    answers: dict[str, int] = {}
    during_load = 0
    lock = threading.Lock()

    def one(key: str) -> None:
        nonlocal during_load
        loading = not verifier._index.trusted
        try:
            verifier.verify(f"ApiKey {key}")
            status = "200"
        except AuthError as error:
            status = str(error.status)
        with lock:
            answers[status] = answers.get(status, 0) + 1
            during_load += loading

    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(one, keys))
    seconds = time.perf_counter() - started
    verifier.wait_index(600)
    verifier.close()
    return {
        "keys": len(keys),
        "answers": answers,
        "unavailable": answers.get("503", 0),
        "while_loading": during_load,
        "keys_per_second": len(keys) / seconds,
    }


def index_rss(url: str, key: str, count: int, runs: int = reps(3, 1)) -> dict[str, float]:
    """RSS a fresh process gains by loading the key index of `count` keys (median of `runs`
    fresh processes: glibc's heap makes single runs differ by a few MiB)."""
    code = (
        "import gc, json, sys\n"
        "from apikey_tui.verifier import Verifier\n"
        "from benchmarks.bench_restart import rss_kib\n"
        "v = Verifier.from_url(sys.argv[1])\n"
        "v._source.key_count(); v._source.log_position()  # connected, modules imported\n"
        "gc.collect(); before = rss_kib()\n"
        "v.verify('ApiKey ' + sys.argv[2]); assert v.wait_index(600)\n"
        "gc.collect(); after = rss_kib()\n"
        "print(json.dumps({'rss_kib': after - before, 'packed': v.index_bytes(),"
        " 'held': v.known_keys()}))\n"
    )
    found = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code, url, key], capture_output=True, text=True, check=True
        ).stdout
        found.append(json.loads(out.strip().splitlines()[-1]))
    r = sorted(found, key=lambda one: one["rss_kib"])[runs // 2]
    return {
        "rss_mib": r["rss_kib"] / 1024,
        "rss_bytes_per_key": r["rss_kib"] * 1024 / r["held"],
        "packed_bytes_per_key": r["packed"] / r["held"],
    }


def restarts(kind: str, count: int) -> dict[str, Any]:
    """At `count` keys: 503s under closed-loop traffic of distinct valid keys, index RSS."""
    with database(kind) as url:
        fast_fill(url, count - VALID)
        keys = fill(url, VALID, profile=PROFILE, owner="live")
        found = under_traffic(url, keys)
        if "rss" in PARTS:
            found["index"] = index_rss(url, keys[0], count)
        return found


def warm_up(profile: str, kind: str = "sqlite", count: int = ACTIVE) -> dict[str, float]:
    """A restart (index loaded) meeting `count` active keys, each hashed with `profile`: the
    time and process CPU until every key is warm again."""
    with database(kind) as url:
        keys = fill(url, count, profile=profile)
        verifier = Verifier.from_url(url, hasher=SecretHasher(profile))
        verifier.verify(f"ApiKey {keys[0]}")
        assert verifier.wait_index(600)
        started, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lambda key: verifier.verify(f"ApiKey {key}"), keys[1:]))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        argon2 = verifier.stats.argon2
        verifier.close()
    return {
        "keys": count,
        "seconds": seconds,
        "cpu_s": cpu,
        "cpu_ms_per_key": cpu * 1000 / (count - 1),
        "argon2": argon2,
    }


def main() -> None:
    """Print one JSON object with every measurement."""
    gc.freeze()
    results: dict[str, Any] = {}
    for kind in ("sqlite", "postgresql"):
        for count in SIZES if "restarts" in PARTS else ():
            results[f"{kind}_{count}"] = restarts(kind, count)
    for profile in ("key-secret-v1", "key-secret-v2") if "warm_up" in PARTS else ():
        results[f"warm_up_{profile}"] = warm_up(profile)
    print(json.dumps(results))


if __name__ == "__main__":
    main()


def markdown(r: Any) -> list[str]:
    """The restart section of RESULTS.md."""
    if r is None:
        return []
    lines = [
        "## A service restarting under traffic (`bench_restart.py`)",
        "",
        f"A fresh verifier meets {VALID:,} distinct valid keys from {THREADS} closed-loop threads"
        " while its key index loads (the database holds the rest as other keys). Before this"
        " release every key the loading index could not vouch for spent the flood budget"
        " (1,000, then 1,000 a second): 15 to 61 % answered 503.",
        "",
        "| database, keys | answers | checked while the index loaded | keys/s |"
        " index RSS (packed) | targets |",
        "|---|---|---|---|---|---|",
    ]
    for key, value in r.items():
        if key.startswith("warm_up"):
            continue
        kind, count = key.rsplit("_", 1)
        ix = value.get("index") or {"rss_bytes_per_key": float("nan"), "packed_bytes_per_key": 0}
        target = f"no 503: {'met' if value['unavailable'] == 0 else '**missed**'}"
        if int(count) >= 1_000_000:  # the target's scale; below it fixed costs dominate
            small = ix["rss_bytes_per_key"] <= 40
            target += f"; ≤ 40 B a key: {'met' if small else '**missed**'}"
        lines.append(
            f"| {kind}, {int(count):,} | {value['answers']} | {value['while_loading']:,} |"
            f" {value['keys_per_second']:.0f} | {ix['rss_bytes_per_key']:.1f} B a key"
            f" ({ix['packed_bytes_per_key']:.1f}) | {target} |"
        )
    lines += [
        "",
        f"**Warm-up after a restart** with {ACTIVE:,} active keys (SQLite, index loaded, each"
        f" key presented once from {THREADS} threads; process CPU until all are cached):",
        "",
        "| argon2 profile | wall time | CPU | CPU a key | argon2 runs |",
        "|---|---|---|---|---|",
    ]
    for profile in ("key-secret-v1", "key-secret-v2"):
        w = r.get(f"warm_up_{profile}")
        if w:
            lines.append(
                f"| `{profile}` | {w['seconds']:.1f} s | {w['cpu_s']:.1f} s |"
                f" {w['cpu_ms_per_key']:.2f} ms | {w['argon2']:,} |"
            )
    lines.append("")
    return lines
