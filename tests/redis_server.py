"""A private redis-server on a free loopback port, without persistence, that tests may kill."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.throwaway_postgres import free_port

# This process's environment without libfaketime (CI's time-dependent rerun preloads it).
REAL_TIME_ENV = {
    k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("FAKETIME")
}


class RedisServer:
    """redis-server --save '' --appendonly no: a restart loses every count, as in production
    without persistence. kill() is kill -9; start() again reuses the same port."""

    def __init__(self, *options: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (.ci/run installs it)")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="apikey-redis-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.options = options  # more of redis-server's own flags ("--maxmemory", "1mb")

    @property
    def url(self) -> str:
        """The redis:// URL of the server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self.process = subprocess.Popen(
            [
                self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.dir), "--daemonize", "no",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Real time for the server (its TIME decides windows), also when CI runs the
            # suite under faketime: redis-server never came up with libfaketime preloaded.
            env=REAL_TIME_ENV,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.kill()  # never leave a half-started server (or its Popen) behind
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        """kill -9 the server and wait until it is gone (its port is then free)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def cleanup(self) -> None:
        """Kill the server and remove its folder."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
