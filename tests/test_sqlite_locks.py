"""SQLite's POSIX locks survive everything our code does in-process (issue 7, finding 1).

SQLite tells other processes "this database is in use" with a read lock on one byte of the
`-shm` file (the DMS lock, byte 128). On Linux, closing *any* descriptor of a file drops *all*
of the process's POSIX locks on it, SQLite's included. Without the DMS lock the next process
to open the database rebuilds the `-shm` under the live mapping and the service dies of SIGBUS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP

USERS = Path(__file__).resolve().parent / "sqlite_users.py"
CLI = Path(sys.executable).with_name("apikey-tui")

# "1: POSIX  ADVISORY  READ 8461 fe:00:2151227 128 128" (a blocked waiter has "->" after "1:").
_LOCK_LINE = re.compile(
    r"^\d+:\s+(?:->\s+)?(?P<kind>\S+)\s+\S+\s+(?P<mode>\S+)\s+(?P<pid>-?\d+)\s+"
    r"[0-9a-f]+:[0-9a-f]+:(?P<inode>\d+)\s+(?P<start>\d+)\s+(?P<end>\S+)$"
)
# SQLite's "dead man switch" byte in the -shm file (UNIX_SHM_DMS in os_unix.c).
_DMS = "128"


def _locks_on(path: str) -> list[str]:
    """The lines of /proc/locks about path's inode."""
    inode = str(os.stat(path).st_ino)
    lines = Path("/proc/locks").read_text().splitlines()
    return [line for line in lines if (m := _LOCK_LINE.match(line)) and m["inode"] == inode]


def _holds_dms_lock(shm: str, pid: int) -> bool:
    """True when pid holds SQLite's POSIX read lock on byte 128 of the -shm file."""
    for line in _locks_on(shm):
        m = _LOCK_LINE.match(line)
        assert m is not None
        if (m["kind"], m["mode"], m["pid"], m["start"], m["end"]) == (
            "POSIX",
            "READ",
            str(pid),
            _DMS,
            _DMS,
        ):
            return True
    return False


def _lock_report(shm: str) -> str:
    return f"pid {os.getpid()}; /proc/locks for {shm}: {_locks_on(shm) or 'nothing'}"


@dataclass
class Checking:
    """A verifier in this process that has checked a key once."""

    url: str
    shm: str
    header: str
    verifier: Verifier


@pytest.fixture
def checking(sqlite_url: str) -> Iterator[Checking]:
    """A SQLite key database with one key, and a verifier in this process that checked it."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    shm = sqlite_url.removeprefix("sqlite:///") + "-shm"
    # The reading of /proc/locks is sound: an open store's connection shows the lock.
    assert _holds_dms_lock(shm, os.getpid()), _lock_report(shm)
    store.close()
    verifier = Verifier.from_url(sqlite_url, hasher=CHEAP)
    header = f"ApiKey {key}"
    assert verifier.verify(header).key_name == "ci"
    try:
        yield Checking(sqlite_url, shm, header, verifier)
    finally:
        verifier.close()


def test_checks_keep_sqlites_shm_lock(checking: Checking) -> None:
    """After one check and after another, this process still holds the DMS lock on the -shm."""
    assert _holds_dms_lock(checking.shm, os.getpid()), (
        f"after 1 check: {_lock_report(checking.shm)}"
    )
    checking.verifier.verify(checking.header)
    assert _holds_dms_lock(checking.shm, os.getpid()), (
        f"after 2 checks: {_lock_report(checking.shm)}"
    )


def test_closing_a_second_verifier_keeps_the_first_ones_lock(checking: Checking) -> None:
    """Building and closing other verifiers (checked or not) in this process keeps the DMS lock."""
    unused = Verifier.from_url(checking.url, hasher=CHEAP)
    unused.close()
    second = Verifier.from_url(checking.url, hasher=CHEAP)
    assert second.verify(checking.header).key_name == "ci"
    second.close()
    assert _holds_dms_lock(checking.shm, os.getpid()), _lock_report(checking.shm)
    checking.verifier.verify(checking.header)
    assert _holds_dms_lock(checking.shm, os.getpid()), _lock_report(checking.shm)


def test_closing_a_key_store_keeps_the_verifiers_lock(checking: Checking) -> None:
    """Opening a KeyStore, listing keys and closing it in this process keeps the DMS lock."""
    store = KeyStore.open(checking.url, hasher=CHEAP, actor=ACTOR)
    assert [info.name for info in store.list_keys("alice")] == ["ci"]
    store.close()
    assert _holds_dms_lock(checking.shm, os.getpid()), _lock_report(checking.shm)
    checking.verifier.verify(checking.header)
    assert _holds_dms_lock(checking.shm, os.getpid()), _lock_report(checking.shm)


# --- the SIGBUS itself, across processes --------------------------------------------------------

LOOP_SECONDS = 8.0
MAX_CHECKS = 50_000_000
MAX_CHURN_ROUNDS = 100_000
MAX_CLI_RUNS = 300


def _user(mode: str, url: str, key: str, limit: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(USERS), mode, url, key, str(LOOP_SECONDS), str(limit), "cheapest"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(process: subprocess.Popen[str], timeout: float) -> tuple[int, str, str]:
    """Wait for process (killing it past timeout) and return its code, stdout and stderr."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return process.returncode, out, err[-2000:]


class _ExitClock:
    """Notes, from a thread that waits on it, the monotonic time at which a process ends."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.ended: float | None = None
        self._thread = threading.Thread(target=self._wait, args=(process,), daemon=True)
        self._thread.start()

    def _wait(self, process: subprocess.Popen[str]) -> None:
        process.wait()
        self.ended = time.monotonic()

    def seconds_after(self, start: float) -> float:
        """How long after start the process ended (nan if it has not)."""
        self._thread.join(timeout=5)
        return float("nan") if self.ended is None else self.ended - start


@pytest.mark.slow
def test_a_checking_verifier_outlives_other_processes_opening_the_database(
    sqlite_url: str,
) -> None:
    """A verifier checking a key in a loop for 8 s is never killed (SIGBUS) by other users."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()  # this process holds nothing open: only the children use the database
    started = time.monotonic()
    loop = _user("verify-loop", sqlite_url, key, MAX_CHECKS)
    churner = _user("churn", sqlite_url, key, MAX_CHURN_ROUNDS)
    loop_clock = _ExitClock(loop)
    cli_codes: list[int | str] = []
    try:
        # The admin's CLI beside them: `keys list` in fresh processes, until the loop ends.
        while (
            loop.poll() is None
            and time.monotonic() - started < LOOP_SECONDS
            and len(cli_codes) < MAX_CLI_RUNS
        ):
            try:
                listing = subprocess.run(
                    [str(CLI), "--database-url", sqlite_url, "keys", "list", "--owner", "alice"],
                    capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                cli_codes.append(listing.returncode)
            except subprocess.TimeoutExpired:
                cli_codes.append("timeout")
        if loop.poll() not in (None, 0):
            churner.kill()  # the loop is dead already: fail now, not at the churner's deadline
        loop_code, loop_out, loop_err = _finish(loop, LOOP_SECONDS + 60)
        churn_code, churn_out, churn_err = _finish(churner, LOOP_SECONDS + 60)
    finally:
        for process in (loop, churner):
            if process.poll() is None:
                process.kill()
                process.wait()
    print(  # shown with -s, and on failure
        f"loop ended {loop_code} after {loop_clock.seconds_after(started):.1f} s "
        f"({loop_out.strip() or 'no count'}); churner {churn_code} ({churn_out.strip()}); "
        f"`keys list` runs {len(cli_codes)}"
    )
    assert loop_code == 0, (
        f"the checking loop exited with {loop_code} (-7 is SIGBUS) after "
        f"{loop_clock.seconds_after(started):.1f} s, "
        f"beside {len(cli_codes)} `keys list` runs; stderr: {loop_err}"
    )
    checks = json.loads(loop_out)["rounds"]
    assert checks >= 1000, f"only {checks} checks in {LOOP_SECONDS} s"
    assert churn_code == 0, f"the churning process exited with {churn_code}; stderr: {churn_err}"
    assert json.loads(churn_out)["rounds"] >= 1
    assert cli_codes and set(cli_codes) == {0}, f"`keys list` exit codes: {cli_codes}"


def test_a_child_forked_while_a_thread_writes_can_write_too(tmp_path: Path) -> None:
    """A child forked while another thread of its parent writes to the SQLite file (a usage
    flush, a limit's take) can write to it too: SQLite's record that the process holds the
    write lock was copied by fork without the lock, and every write of the child then waited
    out its busy timeout ("database is locked"), limits included, for the child's whole life."""
    import sqlite3

    from sqlalchemy import text

    path = tmp_path / "keys.db"
    store = KeyStore.open(f"sqlite:///{path}", hasher=CHEAP, actor=ACTOR)
    store.create_key("alice", "demo", ["project"])
    writing = threading.Event()

    def write() -> None:
        with store.session(write=True) as session:
            session.connection().execute(text("UPDATE apikey_tui_key SET name = name"))
            writing.set()
            time.sleep(0.3)  # the write lock held a while, as a large flush holds it
            session.commit()

    writer = threading.Thread(target=write)
    writer.start()
    assert writing.wait(30)
    pid = os.fork()
    if pid == 0:  # exits 0 only if its own connection can write
        code = 1
        try:
            own = sqlite3.connect(path, timeout=2, isolation_level=None)
            own.execute("BEGIN IMMEDIATE")
            own.execute("UPDATE apikey_tui_key SET name = name")
            own.execute("COMMIT")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    writer.join(30)
    store.close()
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_child_forked_from_a_checking_process_holds_the_shm_lock_itself(
    checking: Checking,
) -> None:
    """A child forked from a process that had the database open (a preloading master that
    checked keys, a multiprocessing child) holds SQLite's DMS lock on the -shm itself once it
    checks, and the database file's SHARED lock: SQLite's per-process record that they are held
    reached it without the locks, so it relied on its parent's, and once the parent was gone
    (daemonized, exited first) the next process to close the database removed the -wal and
    -shm the child still read (a key deleted later stayed valid there while any other process
    held the database open) or rebuilt the -shm under its maps."""
    database = checking.shm.removesuffix("-shm")
    shared = ("POSIX", "READ", str(0x40000002), str(0x40000002 + 509))

    def holds_shared(pid: int) -> bool:
        found = (_LOCK_LINE.match(line) for line in _locks_on(database))
        return any(m and (m["kind"], m["mode"], m["start"], m["end"]) == shared and
                   m["pid"] == str(pid) for m in found)  # fmt: skip

    pid = os.fork()
    if pid == 0:  # exits 0 only if, after a check, this child holds both locks itself
        code = 1
        try:
            checking.verifier.verify(checking.header)
            mine = os.getpid()
            code = 0 if _holds_dms_lock(checking.shm, mine) and holds_shared(mine) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
