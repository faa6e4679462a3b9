"""How the verifier's caches learn of changes: a generation that moves when they may be stale."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import secrets
import select
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from sqlalchemy import Engine

from apikey_tui import forksafety
from apikey_tui.db import LISTENER_APPLICATION, database_errors, postgres_connection
from apikey_tui.errors import StoreUnavailableError, VerifierUnavailableError
from apikey_tui.store.credentials import CHANGE_CHANNEL, LOG_POSITION, NOTICE_SCHEMA
from apikey_tui.verifier.sqlite_watch import CommitWatch, watch_for

log = logging.getLogger("apikey_tui.verifier")


class Freshness(Protocol):
    """`generation()` moves whenever what was read from the database may have changed."""

    def generation(self) -> int:
        """The current generation; a cache entry read under an older one must be re-read."""


class CommitFreshness:
    """SQLite: the generation moves with every commit to the file, by any process.

    At most every PLACE_CHECK seconds it also checks that the path still names the file it
    watches: a file removed or replaced under a running service (its connections still read
    the old one) is refused with 503 until the service restarts, never served.
    """

    PLACE_CHECK = 0.5  # seconds; one stat(2), off the path of nearly every request

    def __init__(self, path: str) -> None:
        self._path = path
        self._watch: CommitWatch | None = None
        self._place: tuple[int, int] | None = None  # (st_dev, st_ino) of the watched file
        self._place_due = float("-inf")  # when the place is checked again
        self._token: Callable[[], object] = object  # the watch's, once made (object(): unseen)
        self._failing = False
        self._last: object = None
        self._generation = 0
        forksafety.reset_in_child(self._forget_watch)

    def _forget_watch(self) -> None:
        self._watch = None  # the parent's; the child makes (and locks) its own
        self._token = object

    def _check_place(self, now: float) -> None:
        """Raise OSError when the path no longer names the file first watched."""
        found = os.stat(self._path)
        place = (found.st_dev, found.st_ino)
        if self._place is None:
            self._place = place
        elif place != self._place:
            raise OSError(errno.ESTALE, "the database file was replaced: restart the service")
        self._place_due = now + self.PLACE_CHECK

    def generation(self) -> int:
        # Nearly every call: the place checked lately, nothing committed since (a clock read and
        # a C read of the mapped header; this is most of a warm check's freshness test).
        # The token read through a local: called as an attribute (`self._token()`), a callable
        # kept on the instance is a method lookup CPython 3.11 cannot specialize, twice the cost.
        token = self._token
        try:
            if time.monotonic() < self._place_due and token() == self._last:
                return self._generation
        except (sqlite3.Error, OSError):
            pass  # the full test below says what is wrong
        return self._test()

    def _test(self) -> int:
        """generation() in full: the place when due, the watch made if need be, the token."""
        try:
            now = time.monotonic()
            if now >= self._place_due:
                self._check_place(now)
            watch = self._watch
            if watch is None:
                watch = self._watch = watch_for(self._path)
                self._token = watch.token
            token = watch.token()
        except FileNotFoundError:
            self._fail("the database file was removed: restart the service once it is back")
        except (sqlite3.Error, OSError) as exc:
            self._fail(str(exc))
        if self._failing:
            log.warning("API keys can be checked again: %s", self._path)
            self._failing = False
        if token != self._last:
            self._last = token
            self._generation += 1
        return self._generation

    def _fail(self, why: str) -> NoReturn:
        if not self._failing:  # one line per outage, not one per request
            log.warning("API keys cannot be checked: %s: %s", self._path, why)
        self._failing = True
        self._place_due = float("-inf")  # look again at the next request
        raise VerifierUnavailableError() from None


class BoundFreshness:
    """PostgreSQL (until it pushes changes): the generation moves every `bound` seconds.

    An entry read in one period is trusted until the period ends, so never longer than the
    bound; a bound of 0 makes every call a new generation (ask the database every time).
    """

    def __init__(self, bound: float) -> None:
        self._bound = bound
        self._counter = itertools.count()

    def generation(self) -> int:
        if self._bound <= 0:
            return next(self._counter)
        return int(time.monotonic() / self._bound)


_UNREAD = object()  # a heartbeat's "no position read yet on this connection"


class PushFreshness:
    """PostgreSQL: the generation moves when the database NOTIFYs a change (LISTEN/NOTIFY).

    A listener thread holds its own connection (never a pooled one), LISTENs, then moves the
    generation once (notices sent while it was away are lost, so whatever may be stale is
    dropped), and proves every `bound / 4` seconds that it is alive with a round trip; a
    change committed before that round trip has been counted when it returns. That round trip
    reads the change log's position: a change whose notice never counted (lost, or naming
    another schema, as every admin's once did for some roles) moves the generation at the next
    heartbeat, within a quarter bound, instead of never. While it has
    not proved itself within `bound` (down, reconnecting, or LISTEN not working), the
    generation falls back to the time bound, so a cache entry is never trusted longer than
    `bound` either way. The warm path reads two attributes and the clock: no query.
    """

    PROBE_WAIT = 2.0  # seconds to wait for our own NOTIFY after LISTEN
    POLL = 0.002  # the request path peeks at the listener's socket at most this often
    RETRY = (0.5, 10.0)  # first and longest wait between reconnects
    # The longest the listener waits for notices at once: close() ends it (and its connection)
    # within this, not at its next heartbeat (a quarter bound: 30 s at a 120 s bound).
    STOP_SLICE = 0.25

    def __init__(self, engine: Engine, bound: float) -> None:
        # The engine's own bounds, with the URL's settings winning, under the listener's name;
        # its errors come out of the engine's one mapper (`database_errors`).
        self._engine = engine
        url, self._options = postgres_connection(engine.url, LISTENER_APPLICATION)
        self._conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._bound = bound
        self._fallback = BoundFreshness(bound)
        self._pushes = 0
        self._pokes, self._next_poll = 0, 0.0
        self._fd = -1  # the listener's socket, for _poll
        self._alive_at = float("-inf")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connection: Any = None
        self._start_lock = threading.Lock()
        forksafety.reset_in_child(self._after_fork)

    @property
    def listening(self) -> bool:
        """Whether changes reach this process by push right now (else by the time bound)."""
        return time.monotonic() - self._alive_at <= self._bound

    def proof_age(self) -> float:
        """Seconds since the listener's last proof of liveness (inf before the first)."""
        return time.monotonic() - self._alive_at

    def generation(self) -> int:
        now = time.monotonic()
        if now - self._alive_at <= self._bound:
            if now >= self._next_poll:
                self._poll(now)
            return self._pushes + self._pokes
        if self._thread is None:
            self._start()
        return -1 - self._fallback.generation()  # never equal to a push count

    def _poll(self, now: float) -> None:
        """Move the generation when something waits unread on the listener's socket.

        The listener thread needs the interpreter to read a notice; a request thread that
        keeps it busy delays that by switch intervals (88 ms at the 99th percentile under a
        saturating loop). A zero-timeout poll of the socket, at most every POLL seconds, lets
        the request path itself see that something arrived; while it stays unread (the listener
        starved) the generation moves at most once per POLL. The reply to a heartbeat shows up
        too: at most one extra log read per heartbeat.
        """
        self._next_poll = now + self.POLL
        fd = self._fd
        if fd < 0:
            return
        try:
            # poll, not select: a busy server holds more than 1,024 descriptors, and select
            # refuses any numbered past that (the peek would then never see a notice).
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            readable = bool(poller.poll(0))
        except (OSError, ValueError):  # closed meanwhile: the listener reconnects
            return
        if readable:
            self._pokes += 1

    def peek(self) -> int:
        """The generation after polling the listener's socket now, whenever it was last polled.

        For an id the key index lacks: its key's notice may be waiting unread.
        """
        self._next_poll = 0.0
        return self.generation()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._listen, name="apikey-tui-listen", daemon=True
                )
                self._thread.start()

    def _listen(self) -> None:
        import psycopg  # only PostgreSQL services pay for it

        wait, failing = self.RETRY[0], False
        position = str(LOG_POSITION.compile(dialect=self._engine.dialect))
        while not self._stop.is_set():
            try:
                with database_errors(self._engine):  # one line, masked URL: the one mapper
                    self._connection = psycopg.connect(
                        self._conninfo, autocommit=True, **self._options
                    )
                    connection = self._connection
                    connection.execute(f"LISTEN {CHANGE_CHANNEL}")
                    row = connection.execute(f"SELECT {NOTICE_SCHEMA}").fetchone()
                    # Every writer names its schema: a store refuses a schema not its own
                    # release's, and releases before this one cannot write to this schema.
                    ours = row[0] if row else ""
                    self._fd = connection.fileno()
                    if not self._probe(connection):
                        log.warning(
                            "LISTEN does not work on this connection (a transaction-pooling "
                            "PgBouncer or a standby?): revocation falls back to the %s s bound",
                            self._bound,
                        )
                        self._stop.wait(60)
                        continue
                    self._pushes += 1  # notices sent while we were away are lost: read the log

                    def proved() -> None:
                        # Back only once a heartbeat has read the log: a connection that LISTENs
                        # but cannot read it (a role without SELECT on it, a search_path missing
                        # it) said "stopped" and "back" at every reconnect, twice a second.
                        nonlocal wait, failing
                        if failing:
                            log.warning("API key changes reach this process by push again")
                        wait, failing = self.RETRY[0], False

                    self._heartbeat(connection, ours, position, proved)
            except StoreUnavailableError as exc:
                if not failing:
                    log.warning(
                        "API key change notices stopped (%s): the %s s bound applies until "
                        "they resume",
                        exc,
                        self._bound,
                    )
                failing = True
            finally:
                connection, self._connection = self._connection, None
                if connection is not None and not connection.closed:
                    connection.close()
            self._alive_at, self._fd = float("-inf"), -1
            self._stop.wait(wait)
            wait = min(wait * 2, self.RETRY[1])

    def _probe(self, connection: Any) -> bool:
        """Send a notice from another connection and see it arrive on this idle one.

        That is how real changes arrive; a transaction-pooling PgBouncer attaches the listener
        to a server connection only while it runs a statement, so the notice never comes.
        """
        import psycopg

        token = secrets.token_hex(8)
        with psycopg.connect(self._conninfo, autocommit=True, **self._options) as sender:
            sender.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, f"probe:{token}"))
        for notice in connection.notifies(timeout=self.PROBE_WAIT):
            if notice.payload == f"probe:{token}":
                return True
        return False

    def _heartbeat(
        self, connection: Any, ours: str, position: str, proved: Callable[[], None]
    ) -> None:
        """Prove the connection alive every quarter bound; count the notices of our schema,
        and a move of the change log's position (`position`, its SQL) as one more. `proved`
        is called once, when the first heartbeat has answered."""
        period = self._bound / 4
        # Not None: an emptied log's position is NULL, and its first change then looked like
        # the first answer, never counted.
        seen: object = _UNREAD
        while not self._stop.is_set():
            sent = time.monotonic()
            row = connection.execute(position).fetchone()
            if seen is _UNREAD:
                proved()
            for notice in connection.notifies(timeout=0):  # those that came with the answer
                self._pushes += notice.payload == ours
            # The first answer is the log read at connect (`_listen` moved the generation);
            # after it, a move counts once more even when its notice counted: one log read.
            newest = row[0] if row else None
            self._pushes += seen is not _UNREAD and newest != seen
            seen = newest
            self._alive_at = sent
            until = sent + period
            while not self._stop.is_set() and (left := until - time.monotonic()) > 0:
                for notice in connection.notifies(timeout=min(left, self.STOP_SLICE)):
                    self._pushes += notice.payload == ours

    def _after_fork(self) -> None:
        """In a child: the parent's thread is gone and its connection is parked, not closed."""
        if self._connection is not None:
            forksafety.park([self._connection])
        self._connection, self._thread = None, None
        self._alive_at, self._fd = float("-inf"), -1
        self._start_lock = threading.Lock()
        stop, self._stop = self._stop, threading.Event()  # its lock may have been mid-use
        if stop.is_set():
            self._stop.set()

    def close(self) -> None:
        """Stop listening: the thread ends, closing its connection, within a STOP_SLICE (or a
        connect or probe under way, PROBE_WAIT at most), waited for here."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.PROBE_WAIT + self.STOP_SLICE)


def freshness_for(engine: Engine, bound: float) -> Freshness:
    """Commit watch for a SQLite file; push (within the bound) for PostgreSQL; else the bound."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if path and path != ":memory:":
        return CommitFreshness(path)
    if engine.dialect.name == "postgresql" and bound > 0:
        return PushFreshness(engine, bound)
    return BoundFreshness(bound)
