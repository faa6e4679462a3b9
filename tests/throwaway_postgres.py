"""A private PostgreSQL server in a temporary folder, for tests that stop a database."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary folder: never the machine's shared server."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not found:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        self.bin = Path(found[-1])
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="apikey-pg-"))
        self.data = self.dir / "data"
        # initdb refuses to run as root; the server then runs as the 'postgres' user.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the server's default database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        """Start the server on its port and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.dir / "log"),
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once (immediate mode)."""
        self.thaw()  # a stopped process cannot act on pg_ctl's signal
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def _processes(self) -> list[int]:
        """This server's postmaster and its children (backends, background workers)."""
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return []
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                # "pid (comm) state ppid ...": comm may hold spaces, so split after the last ')'.
                ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]

    def freeze(self) -> None:
        """SIGSTOP the server and every backend: it keeps its sockets but never answers."""
        # The postmaster first, so it forks nothing new; then the children it has.
        for _ in range(2):
            for pid in self._processes():
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass

    def thaw(self) -> None:
        """SIGCONT whatever freeze() stopped; harmless on a server that is not frozen."""
        for pid in reversed(self._processes()):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def cleanup(self) -> None:
        """Stop the server if it runs and remove its folder."""
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)
