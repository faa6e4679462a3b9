"""Servers and load for the in-server benchmarks: uvicorn subprocesses on 127.0.0.1 and wrk.

Every server is one uvicorn worker in its own process on a free loopback port; every wrk run
is bounded in time; `Server` stops its process on exit, even when the benchmark fails.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WRK_THREADS = 1
WRK_CONNECTIONS = 16


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def database(kind: str) -> Iterator[str]:
    """A fresh SQLite file, or a fresh schema on the machine's PostgreSQL (dropped after)."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="apikey-bench-") as folder:
            yield f"sqlite:///{folder}/keys.db"
        return
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    plain = POSTGRES.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


class Server:
    """`uvicorn --factory benchmarks.apps:<factory>` in its own process, one worker.

    `factory` may also name another module (`module:function`).
    """

    def __init__(self, factory: str, env: Mapping[str, str]) -> None:
        target = factory if ":" in factory else f"benchmarks.apps:{factory}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", target,
             "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--log-level", "warning", "--no-access-log"],
            env={**os.environ, **env}, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        output = self.output()  # before stop() closes the log
        self.stop()
        raise RuntimeError(f"{factory} did not start:\n{output}")

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """The server's resident memory (VmRSS) in MiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def get(
        self, path: str, headers: Mapping[str, str] | None = None, method: str = "GET"
    ) -> tuple[int, bytes, float]:
        """(status, body, seconds) of one request on a new connection, like a first curl."""
        body = b"{}" if method == "POST" else None
        sent = {"Content-Type": "application/json", **(headers or {})}
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, data, time.perf_counter() - start

    def stats(self) -> dict[str, Any]:
        """The instrumented example service's counters (benchmarks.apps.example)."""
        status, body, _ = self.get("/_bench/stats")
        assert status == 200, body
        data: dict[str, Any] = json.loads(body)
        return data

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        self._log.close()


@dataclass(frozen=True)
class Load:
    """One wrk run against one server."""

    rps: float
    requests: int
    non_2xx: int
    socket_errors: int
    cpu_ms_per_request: float  # the server's CPU over the run, divided by the requests served
    seconds: float
    stdout: str


def wrk(
    server: Server,
    path: str,
    seconds: float,
    *,
    lua: str | None = None,
    args: tuple[str, ...] = (),
    expect_2xx: bool = True,
) -> Load:
    """Run wrk for `seconds` (1 thread, 16 connections) and read the server's CPU around it."""
    binary = shutil.which("wrk")
    if binary is None:
        raise SystemExit("wrk is needed: apt-get install -y wrk")
    script = None
    command = [binary, f"-t{WRK_THREADS}", f"-c{WRK_CONNECTIONS}", f"-d{max(1, round(seconds))}s"]
    if lua is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
            handle.write(lua)
        script = handle.name
        command += ["-s", script]
    command.append(server.url + path)
    if args:
        command += ["--", *args]
    cpu = server.cpu_seconds()
    start = time.monotonic()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, check=True, timeout=seconds + 60
        )
    finally:
        if script is not None:
            os.unlink(script)
    elapsed = time.monotonic() - start
    used = server.cpu_seconds() - cpu
    out = result.stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    assert rps is not None and total is not None, out
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    load = Load(
        rps=float(rps.group(1)),
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in errors.groups()) if errors else 0,
        cpu_ms_per_request=used * 1000 / max(1, int(total.group(1))),
        seconds=elapsed,
        stdout=out,
    )
    if expect_2xx and (load.non_2xx or load.socket_errors):
        raise RuntimeError(f"unexpected errors under load:\n{out}\n{server.output()}")
    return load
