"""Floods of forged keys against the example service (wrk on 127.0.0.1), SQLite and PostgreSQL.

1. Unknown ids: every request a new random public id with a valid checksum. Requests/s, the
   server's RSS (VmRSS) after each of several floods, and the SQL statements the verifier sent.
2. Wrong secrets for a real id, and the owner's first try: while wrk floods wrong secrets, the
   owner creates (or recreates) a key with the CLI and sends its first request at once.

Baseline for requests/s: the same server answering a valid cached key on the same endpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from apikey_tui import keyformat
from apikey_tui.store import KeyStore
from benchmarks.bulk import fill
from benchmarks.mode import reps
from benchmarks.servers import WRK_CONNECTIONS, WRK_THREADS, Load, Server, database, wrk

FORGE = (Path(__file__).resolve().parent / "forge.lua").read_text()
SECONDS = float(os.environ.get("BENCH_SECONDS", reps(8, 4)))
FLOODS = 3  # unknown-id floods back to back, RSS read after each
TRIALS = int(os.environ.get("BENCH_TRIALS", reps(20, 8)))
KEYS = 1000  # real keys in the database besides the owner's
PATH = "/projects"
CLI = Path(sys.executable).with_name("apikey-tui")


def _statuses(load: Load) -> dict[str, int]:
    """The answers forge.lua counted, after checking its sample keys parse (valid checksum)."""
    samples = re.findall(r"^SAMPLE (\S+)$", load.stdout, re.MULTILINE)
    assert samples, load.stdout
    for sample in samples:
        keyformat.parse(sample)  # raises if the Lua checksum were wrong
    found = re.search(r"STATUS 401=(\d+) 503=(\d+) other=(\d+)", load.stdout)
    assert found is not None, load.stdout
    return {"401": int(found.group(1)), "503": int(found.group(2)), "other": int(found.group(3))}


def _service(url: str, revocation_bound: str = "1.0") -> Server:
    return Server(
        "example",
        {"APIKEY_TUI_DATABASE_URL": url, "APIKEY_TUI_REVOCATION_BOUND": revocation_bound},
    )


def _valid_rps(server: Server, key: str) -> Load:
    lua = f'wrk.headers["Authorization"] = "ApiKey {key}"\n'
    return wrk(server, PATH, SECONDS, lua=lua)


def unknown_id_flood(url: str, revocation_bound: str = "1.0") -> dict[str, Any]:
    """FLOODS floods of forged unknown ids; RSS and SQL statements before and after each."""
    keys = fill(url, KEYS)
    with _service(url, revocation_bound) as server:
        assert server.get(PATH, {"Authorization": f"ApiKey {keys[0]}"})[0] == 200
        valid = _valid_rps(server, keys[0])
        before = server.stats()
        rss = [server.rss_mib()]
        runs = []
        for _ in range(FLOODS):
            runs.append(wrk(server, PATH, SECONDS, lua=FORGE, expect_2xx=False))
            rss.append(server.rss_mib())
        after = server.stats()
        # The owner's key still works after the floods.
        assert server.get(PATH, {"Authorization": f"ApiKey {keys[0]}"})[0] == 200
    statuses = [_statuses(run) for run in runs]
    forged = sum(run.requests for run in runs)
    # 401, or 503 where the verifier may not be sure (PostgreSQL: once a flood spent the log
    # re-reads and the lookup budget, docs/reference/verifier.md); never a 200 or a 500.
    assert all(s["other"] == 0 for s in statuses), statuses
    statements = after["statements"] - before["statements"]
    return {
        "revocation_bound_s": float(revocation_bound),
        "valid_key_rps": valid.rps,
        "valid_key_cpu_us": valid.cpu_ms_per_request * 1000,
        "flood_rps": [run.rps for run in runs],
        "flood_rps_median": statistics.median(run.rps for run in runs),
        "flood_cpu_us_median": statistics.median(run.cpu_ms_per_request for run in runs) * 1000,
        "forged_ids": forged,
        "answers_401": sum(s["401"] for s in statuses),
        "answers_503": sum(s["503"] for s in statuses),
        "rss_mib": rss,
        "rss_growth_mib": rss[-1] - rss[0],
        "sql_statements": statements,
        "sql_statements_per_1000_forged": statements / forged * 1000,
        "flood_seconds": sum(run.seconds for run in runs),
        "known_keys": after["known_keys"],
    }


def _cli(url: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "APIKEY_TUI_DATABASE_URL": url}
    result = subprocess.run(
        [str(CLI), "keys", *args, "--owner", "owner", "--json"],
        capture_output=True, text=True, check=True, timeout=60, env=env,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _start_flood(server: Server, public_id: str, seconds: float) -> subprocess.Popen[str]:
    """wrk flooding wrong secrets for public_id in the background."""
    binary = shutil.which("wrk")
    assert binary is not None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(FORGE)
    process = subprocess.Popen(
        [binary, f"-t{WRK_THREADS}", f"-c{WRK_CONNECTIONS}", f"-d{max(1, round(seconds))}s",
         "-s", handle.name, server.url + PATH, "--", public_id],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    time.sleep(0.2)  # wrk has read the script
    os.unlink(handle.name)
    return process


def _finish_flood(process: subprocess.Popen[str], seconds: float) -> str:
    out, _ = process.communicate(timeout=seconds + 60)
    assert process.returncode == 0, out
    return out


def _flood_numbers(out: str, cpu_seconds: float, wall: float) -> dict[str, float]:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    assert rps is not None and total is not None, out
    load = Load(float(rps.group(1)), int(total.group(1)), 0, 0, 0.0, wall, out)
    statuses = _statuses(load)
    return {
        "rps": load.rps,
        "requests": load.requests,
        "cpu_us_per_request": cpu_seconds * 1e6 / max(1, load.requests),
        "answers_401": statuses["401"],
        "answers_other": statuses["503"] + statuses["other"],
    }


def _first_try(server: Server, key: str) -> tuple[bool, float]:
    status, _, seconds = server.get(PATH, {"Authorization": f"ApiKey {key}"})
    return status == 200, seconds * 1000


def owner_first_try(url: str) -> dict[str, Any]:
    """The owner's first request with a new key while wrong secrets flood.

    "steady": one flood, all along, of wrong secrets for a real key's id (the victim's); each
    trial creates or recreates another key with the CLI and sends its first request at once.
    "aimed": each trial's flood aims at the new key's own id (an attacker who read it in a
    log) from just after it is created; the owner's first request comes 0.5 s into it.
    """
    fill(url, KEYS)
    victim = KeyStore.open(url)
    victim_id = victim.create_key("victim", "victim", ["project"]).info.public_id
    victim.close()
    results: dict[str, Any] = {}
    with _service(url) as server:
        # steady flood on the victim's id, stopped when the trials are done
        duration = TRIALS * 10 + 10
        cpu = server.cpu_seconds()
        start = time.monotonic()
        flood = _start_flood(server, victim_id, duration)
        tries: list[tuple[bool, float]] = []
        try:
            time.sleep(1)
            for n in range(TRIALS):
                if n % 2 == 0:
                    made = _cli(url, "create", f"steady-{n}", "--scope", "project")
                else:
                    made = _cli(url, "recreate", f"steady-{n - 1}")
                tries.append(_first_try(server, made["key"]))
        finally:
            flood.send_signal(signal.SIGINT)  # wrk stops and prints what it measured
            out = _finish_flood(flood, duration)
        steady = _flood_numbers(out, server.cpu_seconds() - cpu, time.monotonic() - start)
        results["steady"] = {
            "trials": len(tries),
            "first_try_ok": sum(ok for ok, _ in tries),
            "first_try_ms_median": statistics.median(ms for _, ms in tries),
            "first_try_ms_max": max(ms for _, ms in tries),
            "flood": steady,
        }
        # a flood aimed at each new key's own id
        tries, floods = [], []
        for n in range(TRIALS):
            if n % 2 == 0:
                made = _cli(url, "create", f"aimed-{n}", "--scope", "project")
            else:
                made = _cli(url, "recreate", f"aimed-{n - 1}")
            cpu = server.cpu_seconds()
            start = time.monotonic()
            flood = _start_flood(server, made["public_id"], 2)
            time.sleep(0.3)
            tries.append(_first_try(server, made["key"]))
            out = _finish_flood(flood, 2)
            floods.append(_flood_numbers(out, server.cpu_seconds() - cpu, time.monotonic() - start))
        results["aimed"] = {
            "trials": len(tries),
            "first_try_ok": sum(ok for ok, _ in tries),
            "first_try_ms_median": statistics.median(ms for _, ms in tries),
            "first_try_ms_max": max(ms for _, ms in tries),
            "flood_rps_median": statistics.median(f["rps"] for f in floods),
            "flood_cpu_us_median": statistics.median(f["cpu_us_per_request"] for f in floods),
            "flood_answers_other": sum(f["answers_other"] for f in floods),
        }
        # the flood alone, for its rate and cost, and a valid cached key on the same server
        cpu = server.cpu_seconds()
        start = time.monotonic()
        flood = _start_flood(server, victim_id, SECONDS)
        out = _finish_flood(flood, SECONDS)
        results["flood_alone"] = _flood_numbers(
            out, server.cpu_seconds() - cpu, time.monotonic() - start
        )
        made = _cli(url, "create", "baseline", "--scope", "project")
        assert _first_try(server, made["key"])[0]
        valid = _valid_rps(server, made["key"])
        results["valid_key_rps"] = valid.rps
        results["valid_key_cpu_us"] = valid.cpu_ms_per_request * 1000
    return results


def main() -> None:
    """Print one JSON object with every measurement."""
    results: dict[str, Any] = {}
    for kind in ("sqlite", "postgresql"):
        with database(kind) as url:
            results[f"unknown_ids_{kind}"] = unknown_id_flood(url)
        with database(kind) as url:
            results[f"first_try_{kind}"] = owner_first_try(url)
    with database("postgresql") as url:  # asks the database at every check
        results["unknown_ids_postgresql_bound0"] = unknown_id_flood(url, "0")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
