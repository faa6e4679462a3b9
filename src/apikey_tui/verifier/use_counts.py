"""Usage counts per key, per minute: noted on the request path, counted and appended off it.

The request path appends one small tuple to a deque (atomic, no lock, no I/O). A background
thread drains the deque every second and at every minute boundary into counts per (key, minute,
kind, scope set), and appends those to the usage table at least every flush interval as one
transaction. Draining pops items one by one and never swaps the deque, so no request racing a
drain is lost. Memory is bounded twice: at most `backlog` undrained requests and `limit`
distinct counts; past either, a request is dropped (and counted as dropped), never waited for.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Sequence
from itertools import repeat, starmap
from typing import Any

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

DEFAULT_LIMIT = 50_000  # distinct (key, minute, kind, scope set) counts held unwritten
DEFAULT_BACKLOG = 200_000  # requests noted and not yet drained (~70 bytes each)
DRAIN_INTERVAL = 1.0  # seconds between drains of the request path's deque
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
        backlog: int = DEFAULT_BACKLOG,
    ) -> None:
        self._write, self._interval, self._clock = write, interval, clock
        self._limit, self._backlog = limit, backlog
        self.recorded = self.flushed = self.dropped = 0  # requests, for the metrics
        self.flush_seconds = Timings()
        self._failing = False
        self._closed = threading.Event()
        self.reset()

    def reset(self) -> None:
        """Forget the thread, the locks and the counts (after a fork they are the parent's)."""
        self._flush_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._noted: deque[tuple[Any, ...]] = deque()
        self._minute = usage_minute(self._clock())
        self._counts: dict[tuple[str, int, int, str], int] = {}
        self._written_at = time.monotonic()
        closed, self._closed = self._closed, threading.Event()
        if closed.is_set():
            self._closed.set()
        self._thread: threading.Thread | None = None

    # --- the request path ---------------------------------------------------------------------

    def allowed(self, public_id: str, required: Collection[str]) -> None:
        """One allowed request of this key that required these scopes (a tuple or frozenset).

        The warm path's whole cost: a length test and an append (both atomic in CPython). The
        writer thread is started by `start`, which the cold check calls first.
        """
        noted = self._noted
        if len(noted) < self._backlog:
            noted.append((public_id, required))
        else:
            self.dropped += 1  # a plain int: may, rarely, lose one under contention

    def forbidden(self, public_id: str, missing: Collection[str]) -> None:
        """One request refused with 403: the key lacked these scopes."""
        self._refusal(public_id, USAGE_FORBIDDEN, " ".join(sorted(set(missing))))

    def wrong_secret(self, public_id: str) -> None:
        """One request presented this (known) public id with a wrong secret."""
        self._refusal(public_id, USAGE_WRONG_SECRET, "")

    def _refusal(self, public_id: str, kind: int, scope: str) -> None:
        if len(self._noted) < self._backlog:
            self._noted.append((public_id, kind, scope))
        else:
            self.dropped += 1
        if self._thread is None:
            self.start()

    # --- off the request path -----------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread if it is not running (idempotent; cheap when it is)."""
        if self._thread is not None or self._closed.is_set():
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="apikey-tui-usage", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed.wait(self._wait()):
            self._drain()
            if time.monotonic() - self._written_at >= self._interval:
                self.flush()

    def _wait(self) -> float:
        """Until the next drain: a second, or the next minute boundary if that comes first."""
        seconds = self._clock().timestamp()
        return max(0.05, min(DRAIN_INTERVAL, 60.0 - seconds % 60.0 + 0.01))

    @property
    def running(self) -> bool:
        """Whether the background writer thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _drain(self) -> None:
        """Count what the request path noted, in the minute that was current since last drain."""
        with self._flush_lock:
            minute, self._minute = self._minute, usage_minute(self._clock())
            noted, counts, limit = self._noted, self._counts, self._limit
            drained = len(noted)  # only these: later ones belong to the next minute
            # Popped and counted in C (deque.popleft through starmap, Counter's counting loop):
            # this thread holds the GIL the request path needs, so its cost per request is
            # the service's too. Each distinct (key, scopes) is then made a row once.
            grouped = Counter(starmap(noted.popleft, repeat((), drained)))
            dropped = 0
            for item, times in grouped.items():
                if len(item) == 2:  # allowed: (public id, required scopes)
                    entry = (item[0], minute, USAGE_ALLOWED, " ".join(sorted(set(item[1]))))
                else:  # refused: (public id, kind, scope text)
                    entry = (item[0], minute, item[1], item[2])
                n = counts.get(entry)
                if n is not None:
                    counts[entry] = n + times
                elif len(counts) < limit:
                    counts[entry] = times
                else:
                    dropped += times
            self.recorded += drained - dropped
            self.dropped += dropped

    def flush(self) -> None:
        """Count and append everything noted so far to the usage table now (one transaction)."""
        self._drain()
        with self._flush_lock:  # a flush by close() and by the thread never interleave
            rows, self._counts = self._counts, {}
            self._written_at = time.monotonic()
            if not rows:
                return
            started = time.monotonic()
            try:
                self._write([(p, m, MINUTE, k, s, n) for (p, m, k, s), n in rows.items()])
            except Exception as exc:  # never let the writer die; the next round retries
                if not self._failing:
                    log.warning("cannot record API key usage: %s", exc)
                self._failing = True
                self._counts = rows  # nothing was counted meanwhile: the drain needs our lock
                return
            self.flush_seconds.observe(time.monotonic() - started)
            self.flushed += sum(rows.values())
            if self._failing:
                log.warning("recording API key usage works again")
            self._failing = False

    def pending(self) -> int:
        """Requests noted or counted and not yet written (held in memory)."""
        return len(self._noted) + sum(self._counts.values())

    def close(self) -> None:
        """Stop the thread and write what is counted (what still cannot be written is dropped)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        with self._flush_lock:
            lost = sum(self._counts.values())
            self._counts = {}
        if lost:
            self.dropped += lost
            log.warning("%d API key uses could not be recorded before closing", lost)
