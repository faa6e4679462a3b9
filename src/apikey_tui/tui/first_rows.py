"""The app's first rows before its store: read through sqlite3, then the store opens in a thread."""

# Importing SQLAlchemy, SQLModel and the store costs about what importing and starting Textual
# does, so an app that opened its store first painted its first rows at twice the time of a bare
# Textual table. For the plainest start (a SQLite file that exists, named by a plain URL, at this
# release's schema; one owner's keys or every owner's) the CLI reads the first window with sqlite3
# (`store.first_window`, the store's own statements), the app paints it, and only then opens the
# store, in a thread; the key table then reads through the store as always. Anything else, or any
# doubt on the way, takes the normal way: the store first, then the screen.
#
# Whatever needs the store before it is open waits for it (`OpeningStore.wait`): slower for a
# moment, never different.

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from apikey_tui.clock import system_clock
from apikey_tui.config import plain_sqlite_path
from apikey_tui.store.first_window import first_window
from apikey_tui.store.types import KeyInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore


@dataclass(frozen=True)
class FirstRows:
    """A first window read before the store opened: whose keys, and the database's label."""

    label: str  # the URL, as the store's label would name it (a plain SQLite URL has no secret)
    owner: str | None  # None: every owner's keys
    rows: list[KeyInfo]


def read_first_rows(url: str, owner: str | None, limit: int) -> FirstRows | None:
    """The first `limit` rows (the table's first read: key_table.CHUNK) of owner's keys (None:
    everyone's) in the key table's order, or None when this way cannot vouch for them: not a
    plain SQLite URL, no such file, another schema version, anything sqlite3 refuses. Never
    creates a file."""
    path = plain_sqlite_path(url)
    if path is None or not os.path.isfile(path):
        return None
    rows = first_window(path, owner, limit, system_clock())
    return None if rows is None else FirstRows(url, owner, rows)


def settled(opening: OpeningStore | None) -> None:
    """Let a store's opening under way end before the event loop imports a module that imports
    SQLAlchemy (the detail, usage and owners screens): the opening thread imports those same
    modules, and two threads importing them at once can meet one half made. Started here if it
    was not yet, so that it cannot start beside that import."""
    if opening is not None:
        opening.start()
        opening.finish()


class OpeningStore:
    """The store the CLI opens once the first rows are on screen: in a thread, once; whoever
    needs it first waits for it. An error opening it is kept for the CLI to report."""

    def __init__(self, first_rows: FirstRows, open_store: Callable[[], KeyStore]) -> None:
        self.first_rows = first_rows
        self.error: BaseException | None = None
        self._open = open_store
        self._store: KeyStore | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._then: list[Callable[[], object]] = []

    def start(self, then: Callable[[], object] = lambda: None) -> None:
        """Start opening the store (once); then() runs when it is open or failed, in the
        opening thread (at once, here, if that is already so)."""
        with self._lock:
            if not self._done.is_set():
                self._then.append(then)
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="apikey-tui store", daemon=True
                    )
                    self._thread.start()
                return
        then()

    def _run(self) -> None:
        try:
            self._store = self._open()
        except BaseException as exc:  # the CLI reports it, as it would have before the screen
            self.error = exc
        with self._lock:
            self._done.set()
            waiting, self._then = self._then, []
        for then in waiting:
            then()

    @property
    def done(self) -> bool:
        """Whether the store is open, or failed to open."""
        return self._done.is_set()

    def wait(self) -> KeyStore:
        """The store, once open (started here if it was not); its error if it failed."""
        self.start()
        self._done.wait()
        if self.error is not None:
            raise self.error
        assert self._store is not None
        return self._store

    def finish(self) -> None:
        """Wait for an opening under way to end (the CLI closes the store it opened)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()
