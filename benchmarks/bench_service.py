"""The example service under load (wrk on 127.0.0.1): verifier cost and a wrong-secret flood."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from tests.test_example_service import Service

from apikey_tui import keyformat
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier

SECONDS = 5
CONNECTIONS = 16
LUA_POST = """
wrk.method = "POST"
wrk.body = "{{}}"
wrk.headers["Content-Type"] = "application/json"
{auth}
"""
LUA_FLOOD = """
keys = {{ {keys} }}
i = 0
request = function()
  i = i + 1
  local key = keys[(i % #keys) + 1]
  local headers = {{["Authorization"] = "ApiKey " .. key, ["Content-Type"] = "application/json"}}
  return wrk.format("POST", "/models/m/predict", headers, "{{}}")
end
"""


def _wrk(port: int, path: str, lua: str) -> float:
    """Requests per second that wrk measured over SECONDS with one thread."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is needed: apt-get install wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    result = subprocess.run(
        [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{SECONDS}s", "-s", script.name,
         f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, check=True, timeout=SECONDS + 60,
    )  # fmt: skip
    os.unlink(script.name)
    match = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    assert match is not None, result.stdout
    if "Non-2xx" in result.stdout and "flood" not in lua:
        raise RuntimeError(f"unexpected errors under load:\n{result.stdout}")
    return float(match.group(1))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load(service: Service, path: str, lua: str) -> tuple[float, float]:
    """(requests/s, server CPU milliseconds per request) of one wrk run."""
    cpu = _cpu_seconds(service.process.pid)
    start = time.monotonic()
    rps = _wrk(service.port, path, lua)
    elapsed = time.monotonic() - start
    return rps, (_cpu_seconds(service.process.pid) - cpu) * 1000 / (rps * elapsed)


def throughput(url: str, key: str, pairs: int = 6) -> dict[str, float]:
    """Requests/s and server CPU per request with a valid key, against the same handler unchecked.

    The machine is shared and its speed drifts by 10-20 % within a minute, so the runs come in
    back-to-back pairs, in alternating order, and each cost is the median of per-pair costs.
    Server CPU per request drifts less than requests/s and is reported beside it.
    """
    os.environ["EXAMPLE_BASELINE"] = "1"
    service = Service(url)
    auth = f'wrk.headers["Authorization"] = "ApiKey {key}"'
    paths = {
        "checked": ("/models/m/predict", LUA_POST.format(auth=auth)),
        "unchecked": ("/open/models/m/predict", LUA_POST.format(auth="")),
    }
    runs: dict[str, list[tuple[float, float]]] = {"checked": [], "unchecked": []}
    try:
        for n in range(pairs):
            for name in ("checked", "unchecked") if n % 2 == 0 else ("unchecked", "checked"):
                runs[name].append(_load(service, *paths[name]))
    finally:
        service.stop()
    pairs_ = list(zip(runs["checked"], runs["unchecked"], strict=True))
    return {
        "rps_with_key": statistics.median(r for r, _ in runs["checked"]),
        "rps_without_check": statistics.median(r for r, _ in runs["unchecked"]),
        "verifier_cost_pct": statistics.median((1 - c[0] / u[0]) * 100 for c, u in pairs_),
        "pair_cost_min_pct": min((1 - c[0] / u[0]) * 100 for c, u in pairs_),
        "pair_cost_max_pct": max((1 - c[0] / u[0]) * 100 for c, u in pairs_),
        "cpu_ms_with_key": statistics.median(c for _, c in runs["checked"]),
        "cpu_ms_without_check": statistics.median(c for _, c in runs["unchecked"]),
        "verifier_cpu_cost_pct": statistics.median((c[1] / u[1] - 1) * 100 for c, u in pairs_),
    }


def in_process_us(url: str, key: str, requests: int = 1000, rounds: int = 31) -> dict[str, float]:
    """Microseconds per request through the example app's ASGI stack, no server or network.

    Without the kernel, uvicorn and wrk in the way this is steady enough to show the few
    microseconds the middleware and the verifier add.
    """
    os.environ["EXAMPLE_BASELINE"] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    from service import build_app

    app = build_app(Verifier.from_url(url), with_baseline=True)
    headers = [(b"content-type", b"application/json")]
    auth = [(b"authorization", f"ApiKey {key}".encode())]

    async def one(path: str, extra: list[tuple[bytes, bytes]]) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": headers + extra, "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80), "state": {},
        }  # fmt: skip

        async def receive() -> MutableMapping[str, Any]:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200, message

        await app(scope, receive, send)

    async def timed(path: str, extra: list[tuple[bytes, bytes]]) -> float:
        start = time.perf_counter()
        for _ in range(requests):
            await one(path, extra)
        return (time.perf_counter() - start) / requests * 1e6

    async def measure() -> dict[str, float]:
        await one("/models/m/predict", auth)  # warm the cache and the routes
        checked, unchecked, added = [], [], []
        for n in range(rounds):  # adjacent pairs in alternating order: drift cancels out
            if n % 2:
                without = await timed("/open/models/m/predict", [])
                with_key = await timed("/models/m/predict", auth)
            else:
                with_key = await timed("/models/m/predict", auth)
                without = await timed("/open/models/m/predict", [])
            checked.append(with_key)
            unchecked.append(without)
            added.append(with_key - without)
        return {
            "app_us_with_key": statistics.median(checked),
            "app_us_without_check": statistics.median(unchecked),
            "app_us_added": statistics.median(added),
        }

    return asyncio.run(measure())


def flood(url: str, public_id: str, burst: str) -> dict[str, float]:
    """A flood of distinct wrong secrets for a real public id: requests/s and CPU per request."""
    os.environ["APIKEY_TUI_FAILURE_BURST"] = burst
    service = Service(url)
    wrong = [keyformat.generate(public_id)[1] for _ in range(20_000)]
    lua = "-- flood\n" + LUA_FLOOD.format(keys=", ".join(f'"{k}"' for k in wrong))
    try:
        rps, cpu_ms = _load(service, "/models/m/predict", lua)
    finally:
        service.stop()
        del os.environ["APIKEY_TUI_FAILURE_BURST"]
    return {"rps": rps, "server_cpu_ms_per_request": cpu_ms}


def main() -> None:
    """Print one JSON object with every measurement."""
    url = f"sqlite:///{tempfile.mkdtemp()}/keys.db"
    store = KeyStore.open(url)  # the real argon2 profile
    created = store.create_key("bench", "load", ["serving", "project"])
    store.close()
    results: dict[str, object] = {"throughput": throughput(url, created.plaintext)}
    app = results["in_process"] = in_process_us(url, created.plaintext)
    # What the check adds to one request, as a share of one request's whole time under wrk.
    per_request_us = 1e6 / results["throughput"]["rps_without_check"]  # type: ignore[index]
    results["verifier_share_pct"] = app["app_us_added"] / per_request_us * 100
    results["flood_with_budget"] = flood(url, created.info.public_id, "5")
    results["flood_without_budget"] = flood(url, created.info.public_id, "1e12")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
