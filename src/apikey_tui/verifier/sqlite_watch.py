"""Notice, in a fraction of a microsecond, that any connection committed to a SQLite file."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from functools import partial
from operator import getitem

from apikey_tui import forksafety
from apikey_tui.db.engine import existing_file_uri

# The first copy of the WAL-index header (https://sqlite.org/walformat.html): every commit
# changes it (iChange, mxFrame, salts, checksums), and it lives in the -shm file that SQLite
# memory-maps for all its connections. Reading 48 shared bytes is what SQLite itself does to
# answer PRAGMA data_version, minus ~3-5 microseconds of statement machinery.
_HEADER = 48
# SQLite's "dead man switch" byte of the -shm (UNIX_SHM_DMS in os_unix.c): each process using the
# database holds a read lock on it; one opening the database that finds none rebuilds the -shm.
_DMS = 128
# The database file's SHARED range (SHARED_FIRST, SHARED_SIZE in os_unix.c): each process with the
# database open holds a read lock on it; the last one to close (the only one that can lock it
# all) checkpoints and removes the -wal and the -shm.
_SHARED_FIRST, _SHARED_SIZE = 0x40000000 + 2, 510


class CommitWatch:
    """`token()` returns a value that differs after any commit by any connection.

    In WAL mode it compares the mapped WAL-index header; otherwise (or if mapping fails) it
    asks `PRAGMA data_version`.

    A watch is never closed, and nothing it opens is ever closed: on Linux, closing any
    descriptor of a file releases every POSIX lock this process holds on that file, including
    SQLite's shared lock on the -shm that tells other processes the database is in use. Lose
    that lock and the next process to open the database rebuilds the -shm under the mapped
    pages of this one, which dies with SIGBUS ("How To Corrupt An SQLite Database File" 2.2).
    So watches are made once per database file per process (`watch_for`) and live as long as
    the process: one SQLite connection, three descriptors and one page of mapping each. The
    watch's own connection keeps that shared lock, so the -shm is never truncated or removed
    under the mapping; in a forked child, whose connections take no lock, the watch takes them.
    """

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            existing_file_uri(path), uri=True, check_same_thread=False
        )
        self._cursor = self._connection.cursor()
        # A read opens the WAL index, so the -shm file exists (and we hold its lock) from here on.
        self._cursor.execute("PRAGMA data_version").fetchone()
        self._shm_fd: int | None = None
        self._db_fd: int | None = None
        self._shm: mmap.mmap | None = None
        mode = self._cursor.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() == "wal":
            try:
                self._shm_fd = os.open(f"{path}-shm", os.O_RDONLY | os.O_CLOEXEC)
                # A descriptor of the database file for its lock alone, never closed either.
                self._db_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                _hold_read_lock(self._db_fd, _SHARED_FIRST, _SHARED_SIZE)
                _hold_read_lock(self._shm_fd, _DMS, 1)
                if os.fstat(self._shm_fd).st_size >= _HEADER:
                    self._shm = mmap.mmap(self._shm_fd, _HEADER, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                self._shm = None  # the descriptor, if any, stays open: see the class docstring
        # A value that changes whenever a transaction was committed to the database. Mapped, it
        # is the header's bytes, read by a C call with no Python frame: every warm check asks.
        self.token: Callable[[], object] = self._data_version
        if self._shm is not None:
            self.token = partial(getitem, self._shm, slice(0, _HEADER))

    @property
    def mapped(self) -> bool:
        """Whether token() reads the mapped WAL-index header (else it asks the pragma)."""
        return self._shm is not None

    def _data_version(self) -> object:
        """token() of a file not in WAL mode (or whose -shm could not be mapped)."""
        with self._lock:
            return self._cursor.execute("PRAGMA data_version").fetchone()[0]


def _hold_read_lock(fd: int, start: int, length: int) -> None:
    """Take this process's read lock on a range SQLite read-locks for each process using the
    database (the -shm's DMS byte, the file's SHARED range), for as long as it lives: fd is
    never closed. SQLite takes them at its first connection, but a child forked from a process
    that had the database open inherits SQLite's record that they are held, not the locks: its
    connections (this watch's too) take none, and once the parent is gone (daemonized, exited
    first) the next process to close the database believes itself the last: it removes the
    -wal and -shm the child still reads (a key revoked later stayed valid there while any
    other process held the database open) or rebuilds the -shm under its maps. Held already
    (the usual case), a lock merges with SQLite's, unchanged."""
    for _ in range(100):  # another process may hold it exclusively for a moment
        try:
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, length, start)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):  # POSIX allows either
                raise
            time.sleep(0.01)


_watches: dict[tuple[int, int, int], CommitWatch] = {}
_watches_lock = threading.Lock()


def watch_for(path: str) -> CommitWatch:
    """The process's watch of the SQLite file at path, made on first use and never closed.

    Raises sqlite3.Error or OSError when the file is missing or is no database.
    """
    found = os.stat(path)
    # Keyed by process too: a forked child makes its own watch (and takes its own -shm lock,
    # `_hold_read_lock`); the parent's stays in the table, unused and unclosed.
    key = (os.getpid(), found.st_dev, found.st_ino)
    watch = _watches.get(key)
    if watch is None:
        with _watches_lock:
            watch = _watches.get(key)
            if watch is None:
                watch = _watches[key] = CommitWatch(path)
    return watch


def _reset_lock() -> None:
    global _watches_lock
    _watches_lock = threading.Lock()  # a thread that held it did not survive the fork


forksafety.reset_in_child(_reset_lock)
