"""The example service under load (wrk on 127.0.0.1): verifier cost and wrong-secret floods."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from sqlalchemy import text

from apikey_tui.db import make_engine
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from benchmarks.servers import Server, database, wrk

SECONDS = 5
LUA_POST = """
wrk.method = "POST"
wrk.body = "{{}}"
wrk.headers["Content-Type"] = "application/json"
{auth}
"""
FORGE = (Path(__file__).resolve().parent / "forge.lua").read_text()


def _service(url: str, **env: str) -> Server:
    """The example service (benchmarks.apps.example) with its unchecked `/open` copy."""
    return Server("example", {"APIKEY_TUI_DATABASE_URL": url, "EXAMPLE_BASELINE": "1", **env})


def _load(service: Server, path: str, lua: str) -> tuple[float, float]:
    """(requests/s, server CPU milliseconds per request) of one wrk run."""
    load = wrk(service, path, SECONDS, lua=lua)
    return load.rps, load.cpu_ms_per_request


def throughput(url: str, key: str, pairs: int = 6) -> dict[str, float]:
    """Requests/s and server CPU per request with a valid key, against the same handler unchecked.

    The machine is shared and its speed drifts by 10-20 % within a minute, so the runs come in
    back-to-back pairs, in alternating order, and each cost is the median of per-pair costs.
    Server CPU per request drifts less than requests/s and is reported beside it.
    """
    service = _service(url)
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
    """Distinct wrong secrets (valid checksums, forge.lua) for a real public id, for SECONDS."""
    with _service(url, APIKEY_TUI_FAILURE_BURST=burst) as service:
        load = wrk(service, "/projects", SECONDS, lua=FORGE, args=(public_id,), expect_2xx=False)
        assert "STATUS" in load.stdout and " 503=0 other=0" in load.stdout, load.stdout
    return {"rps": load.rps, "server_cpu_ms_per_request": load.cpu_ms_per_request}


def without_fingerprint(url: str, public_id: str) -> None:
    """Make a key look like one created before schema version 2 (no stored fingerprint)."""
    engine = make_engine(url, create=False)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE apikey_tui_key SET fingerprint = NULL WHERE public_id = :id"),
            {"id": public_id},
        )
    engine.dispose()


def main() -> None:
    """Print one JSON object with every measurement."""
    with database("sqlite") as url:
        store = KeyStore.open(url)  # the real argon2 profile
        created = store.create_key("bench", "load", ["serving", "project"])
        store.close()
        results: dict[str, object] = {"throughput": throughput(url, created.plaintext)}
        app = results["in_process"] = in_process_us(url, created.plaintext)
        # The tight-loop figure: what the check adds in-process, as a share of one request's
        # whole time under wrk. Not what a server pays (see bench_middleware).
        per_request_us = 1e6 / results["throughput"]["rps_without_check"]  # type: ignore[index]
        results["verifier_share_pct"] = app["app_us_added"] / per_request_us * 100
        public_id = created.info.public_id
        results["flood_fingerprinted"] = flood(url, public_id, "5")
        without_fingerprint(url, public_id)
        results["flood_with_budget"] = flood(url, public_id, "5")
        results["flood_without_budget"] = flood(url, public_id, "1e12")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
