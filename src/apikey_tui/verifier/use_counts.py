"""Usage counts per key, per minute: counted in memory on the request path, appended in batches.

The request path adds one to a dict entry under a lock (no allocation but the key tuple, no
I/O); a background thread swaps the dicts at least every flush interval and at every minute
boundary, and appends them to the usage table as one transaction of multi-row INSERTs. Memory
is bounded: past `limit` distinct entries a count is dropped (and counted as dropped), never
waited for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence

from apikey_tui.clock import Clock
from apikey_tui.db.models import (
    MINUTE,
    USAGE_ALLOWED,
    USAGE_FORBIDDEN,
    USAGE_WRONG_SECRET,
    usage_minute,
)
from apikey_tui.verifier.metrics import Timings

log = logging.getLogger("apikey_tui.verifier")

DEFAULT_LIMIT = 50_000  # distinct (key, scopes) entries held between two flushes, and unflushed
UsageRow = tuple[str, int, int, int, str, int]  # public_id, minute, span, kind, scope, requests


class UseCounts:
    """Counts allowed, forbidden and wrong-secret requests per public id; writes them in batches.

    `write` appends rows in one transaction (`CredentialReads.record_usage`). A failed write is
    logged once per failure streak and retried with the next batch (merged, within `limit`); the
    thread never dies of it.
    """

    def __init__(
        self,
        write: Callable[[Sequence[UsageRow]], None],
        interval: float,
        clock: Clock,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        self._write, self._interval, self._clock, self._limit = write, interval, clock, limit
        self.recorded = self.flushed = self.dropped = 0  # requests, for the metrics
        self.flush_seconds = Timings()
        self._failing = False
        self._closed = threading.Event()
        self.reset()

    def reset(self) -> None:
        """Forget the thread, the locks and the counts (after a fork they are the parent's)."""
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._allowed: dict[tuple[str, Collection[str]], int] = {}
        self._refused: dict[tuple[str, int, str], int] = {}  # (public id, kind, scope text)
        self._size = 0
        self._minute = usage_minute(self._clock())
        self._unwritten: dict[tuple[str, int, int, str], int] = {}
        closed, self._closed = self._closed, threading.Event()
        if closed.is_set():
            self._closed.set()
        self._thread: threading.Thread | None = None

    # --- the request path ---------------------------------------------------------------------

    def allowed(self, public_id: str, required: Collection[str]) -> None:
        """One allowed request of this key that required these scopes (a tuple or frozenset)."""
        key = (public_id, required)
        with self._lock:
            counts = self._allowed
            n = counts.get(key)
            if n is not None:
                counts[key] = n + 1
                return
            if self._size >= self._limit:
                self.dropped += 1
                return
            self._size += 1
            counts[key] = 1
            if self._thread is None:
                self._start()

    def forbidden(self, public_id: str, missing: Collection[str]) -> None:
        """One request refused with 403: the key lacked these scopes."""
        self._refusal(public_id, USAGE_FORBIDDEN, " ".join(sorted(set(missing))))

    def wrong_secret(self, public_id: str) -> None:
        """One request presented this (known) public id with a wrong secret."""
        self._refusal(public_id, USAGE_WRONG_SECRET, "")

    def _refusal(self, public_id: str, kind: int, scope: str) -> None:
        key = (public_id, kind, scope)
        with self._lock:
            n = self._refused.get(key)
            if n is not None:
                self._refused[key] = n + 1
                return
            if self._size >= self._limit:
                self.dropped += 1
                return
            self._size += 1
            self._refused[key] = 1
            if self._thread is None:
                self._start()

    # --- off the request path -----------------------------------------------------------------

    def _start(self) -> None:
        if self._closed.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="apikey-tui-usage", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed.wait(self._wait()):
            self.flush()

    def _wait(self) -> float:
        """Until the next flush: the interval, or the next minute boundary if that comes first."""
        seconds = self._clock().timestamp()
        return max(0.05, min(self._interval, 60.0 - seconds % 60.0 + 0.01))

    @property
    def running(self) -> bool:
        """Whether the background writer thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def flush(self) -> None:
        """Append the counts so far to the usage table now (one transaction)."""
        with self._flush_lock:  # a flush by close() and by the thread never interleave
            now = usage_minute(self._clock())
            with self._lock:
                allowed, refused, minute = self._allowed, self._refused, self._minute
                self._allowed, self._refused, self._size, self._minute = {}, {}, 0, now
            rows = self._unwritten
            self._unwritten = {}
            counted = 0
            for (public_id, required), n in allowed.items():
                counted += n
                # One row per set of scopes: a request counts once, under all it needed.
                entry = (public_id, minute, USAGE_ALLOWED, " ".join(sorted(set(required))))
                rows[entry] = rows.get(entry, 0) + n
            for (public_id, kind, scope), n in refused.items():
                counted += n
                entry = (public_id, minute, kind, scope)
                rows[entry] = rows.get(entry, 0) + n
            self.recorded += counted
            if not rows:
                return
            started = time.monotonic()
            try:
                self._write([(p, m, MINUTE, k, s, n) for (p, m, k, s), n in rows.items()])
            except Exception as exc:  # never let the writer die; the next round retries
                if not self._failing:
                    log.warning("cannot record API key usage: %s", exc)
                self._failing = True
                self._keep(rows)
                return
            self.flush_seconds.observe(time.monotonic() - started)
            self.flushed += _requests(rows)
            if self._failing:
                log.warning("recording API key usage works again")
            self._failing = False

    def _keep(self, rows: dict[tuple[str, int, int, str], int]) -> None:
        """Keep unwritten rows for the next round, at most `limit` of them (the rest dropped)."""
        if len(rows) > self._limit:
            kept = dict(list(rows.items())[: self._limit])
            self.dropped += _requests(rows) - _requests(kept)
            rows = kept
        self._unwritten = rows

    def pending(self) -> int:
        """Requests counted and not yet written (held in memory)."""
        with self._lock:
            held = sum(self._allowed.values()) + sum(self._refused.values())
        return held + _requests(self._unwritten)

    def close(self) -> None:
        """Stop the thread and write what is counted (what still cannot be written is dropped)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        lost = _requests(self._unwritten)
        if lost:
            self.dropped += lost
            self._unwritten = {}
            log.warning("%d API key uses could not be recorded before closing", lost)


def _requests(rows: dict[tuple[str, int, int, str], int]) -> int:
    """How many requests rows stand for (each request is in exactly one row)."""
    return sum(rows.values())
