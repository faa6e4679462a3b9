"""Notice, in a fraction of a microsecond, that any connection committed to a SQLite file."""

from __future__ import annotations

import mmap
import os
import sqlite3
import threading
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
    the process: one SQLite connection, two descriptors and one page of mapping each. The
    watch's own connection keeps that shared lock, so the -shm is never truncated or removed
    under the mapping.
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
        self._shm: mmap.mmap | None = None
        mode = self._cursor.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() == "wal":
            try:
                self._shm_fd = os.open(f"{path}-shm", os.O_RDONLY | os.O_CLOEXEC)
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


_watches: dict[tuple[int, int, int], CommitWatch] = {}
_watches_lock = threading.Lock()


def watch_for(path: str) -> CommitWatch:
    """The process's watch of the SQLite file at path, made on first use and never closed.

    Raises sqlite3.Error or OSError when the file is missing or is no database.
    """
    found = os.stat(path)
    # Keyed by process too: a forked child makes its own watch (and its own -shm lock); the
    # parent's stays in the table, unused and unclosed.
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
