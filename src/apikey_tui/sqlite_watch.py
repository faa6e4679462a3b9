"""Notice, in microseconds, that another connection committed to a SQLite database file."""

from __future__ import annotations

import mmap
import os
import sqlite3
import threading
from pathlib import Path

# The first copy of the WAL-index header (https://sqlite.org/walformat.html): every commit
# changes it (iChange, mxFrame, salts, checksums), and it lives in the -shm file that SQLite
# memory-maps for all its connections. Reading 48 shared bytes is what SQLite itself does to
# answer PRAGMA data_version, minus ~3 microseconds of statement machinery.
_HEADER = 48


def existing_file_uri(path: str) -> str:
    """A SQLite URI that opens path read-write but never creates it."""
    return f"{Path(path).resolve().as_uri()}?mode=rw"


class CommitWatch:
    """`token()` returns a value that differs after any commit by any connection.

    In WAL mode it compares the mapped WAL-index header; otherwise (or if mapping fails) it
    asks `PRAGMA data_version`. Its own connection stays open, which keeps the -shm file
    from being removed or truncated underneath the mapping.
    """

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            existing_file_uri(path), uri=True, check_same_thread=False
        )
        self._cursor = self._connection.cursor()
        # A read opens the WAL index, so the -shm file exists from here on.
        self._cursor.execute("PRAGMA data_version").fetchone()
        self._shm: mmap.mmap | None = None
        mode = self._cursor.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() == "wal":
            try:
                with open(f"{path}-shm", "rb") as shm_file:
                    if os.fstat(shm_file.fileno()).st_size >= _HEADER:
                        self._shm = mmap.mmap(shm_file.fileno(), _HEADER, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                self._shm = None

    def token(self) -> object:
        """A value that changes whenever a transaction was committed to the database."""
        shm = self._shm
        if shm is not None:
            return shm[:_HEADER]
        with self._lock:
            return self._cursor.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        """Unmap and disconnect."""
        if self._shm is not None:
            self._shm.close()
            self._shm = None
        self._connection.close()
