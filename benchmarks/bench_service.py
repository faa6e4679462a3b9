"""The example service under load (wrk on 127.0.0.1): verifier cost and a wrong-secret flood."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.test_example_service import Service

from apikey_tui import keyformat
from apikey_tui.store import KeyStore

SECONDS = 8
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


def throughput(url: str, key: str) -> dict[str, float]:
    """Requests/s with a valid key against the same endpoint with no check, alternated 3 times."""
    os.environ["EXAMPLE_BASELINE"] = "1"
    service = Service(url)
    try:
        checked, unchecked = [], []
        auth = f'wrk.headers["Authorization"] = "ApiKey {key}"'
        for _ in range(3):
            checked.append(_wrk(service.port, "/models/m/predict", LUA_POST.format(auth=auth)))
            unchecked.append(_wrk(service.port, "/open/models/m/predict", LUA_POST.format(auth="")))
    finally:
        service.stop()
    protected, open_ = statistics.median(checked), statistics.median(unchecked)
    return {
        "rps_with_key": protected,
        "rps_without_check": open_,
        "verifier_cost_pct": (1 - protected / open_) * 100,
    }


def flood(url: str, public_id: str, burst: str) -> dict[str, float]:
    """A flood of distinct wrong secrets for a real public id: requests/s and CPU per request."""
    os.environ["APIKEY_TUI_FAILURE_BURST"] = burst
    service = Service(url)
    wrong = [keyformat.generate(public_id)[1] for _ in range(20_000)]
    lua = "-- flood\n" + LUA_FLOOD.format(keys=", ".join(f'"{k}"' for k in wrong))
    try:
        cpu = _cpu_seconds(service.process.pid)
        start = time.monotonic()
        rps = _wrk(service.port, "/models/m/predict", lua)
        elapsed = time.monotonic() - start
        cpu = _cpu_seconds(service.process.pid) - cpu
    finally:
        service.stop()
        del os.environ["APIKEY_TUI_FAILURE_BURST"]
    return {"rps": rps, "server_cpu_ms_per_request": cpu * 1000 / (rps * elapsed)}


def main() -> None:
    """Print one JSON object with every measurement."""
    url = f"sqlite:///{tempfile.mkdtemp()}/keys.db"
    store = KeyStore.open(url)  # the real argon2 profile
    created = store.create_key("bench", "load", ["serving", "project"])
    store.close()
    results: dict[str, object] = {"throughput": throughput(url, created.plaintext)}
    results["flood_with_budget"] = flood(url, created.info.public_id, "5")
    results["flood_without_budget"] = flood(url, created.info.public_id, "1e12")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
