"""What a flood can buy: checks off the request path with a deadline, and cheap refusals."""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta
from typing import TypeVar

from apikey_tui.errors import VerifierUnavailableError
from apikey_tui.hashing import fingerprint
from apikey_tui.verifier.freshness import Freshness
from apikey_tui.verifier.metrics import Timings
from apikey_tui.verifier.port import CredentialSource

log = logging.getLogger("apikey_tui.verifier")
T = TypeVar("T")


class CheckGate:
    """Runs database and argon2 work in a few threads; a request waits for it at most `timeout`.

    Work is keyed: requests that need the same work (the same presented key, the same index
    refresh) share one run. At most `max_pending` runs are queued or running; beyond that, and
    past the deadline, the answer is 503 at once. A database that stops answering therefore
    costs a request at most `timeout` seconds and the process at most `workers` stuck threads.
    The threads are daemons (unlike a ThreadPoolExecutor's): a stuck one never holds up exit.
    """

    def __init__(self, workers: int, timeout: float, max_pending: int) -> None:
        if workers < 1 or timeout <= 0 or max_pending < workers:
            raise ValueError("need workers >= 1, timeout > 0 and max_pending >= workers")
        self.workers, self.timeout, self.max_pending = workers, timeout, max_pending
        # Metrics: submit-to-start wait, run time, 503s for a full queue and for the deadline.
        self.waited, self.ran = Timings(), Timings()
        self.rejected = self.timeouts = 0
        self.reset()

    def reset(self) -> None:
        """Forget threads and runs (after a fork they belong to the parent); make no thread yet."""
        self._queue: queue.SimpleQueue[tuple[Future[object], Callable[[], object], float] | None]
        self._queue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pending: dict[Hashable, Future[object]] = {}
        self._lock = threading.Lock()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, work, submitted = item
            if future.set_running_or_notify_cancel():
                started = time.monotonic()
                self.waited.observe(started - submitted)
                try:
                    future.set_result(work())
                except BaseException as exc:  # the waiting request re-raises it
                    future.set_exception(exc)
                self.ran.observe(time.monotonic() - started)

    def submit(self, key: Hashable, work: Callable[[], T]) -> Future[T]:
        """Start work (or join the run already under way for key); 503 when the queue is full."""
        with self._lock:
            running = self._pending.get(key)
            if running is not None:
                return running  # type: ignore[return-value]
            if len(self._pending) >= self.max_pending:
                self.rejected += 1
                raise VerifierUnavailableError()
            if len(self._threads) < min(self.workers, len(self._pending) + 1):
                thread = threading.Thread(target=self._work, name="apikey-tui-check", daemon=True)
                thread.start()
                self._threads.append(thread)
            future: Future[T] = Future()
            self._queue.put((future, work, time.monotonic()))  # type: ignore[arg-type]
            self._pending[key] = future  # type: ignore[assignment]
        future.add_done_callback(lambda done: self._finished(key, done))  # type: ignore[arg-type]
        return future

    def _finished(self, key: Hashable, done: Future[object]) -> None:
        with self._lock:
            if self._pending.get(key) is done:
                del self._pending[key]

    def wait(self, future: Future[T], deadline: float) -> T:
        """The result of the work, or 503 when the deadline passes first."""
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            self.timeouts += 1
            log.warning(
                "API key check gave up after %.1f s: the database is not answering", self.timeout
            )
            raise VerifierUnavailableError() from None

    async def wait_async(self, future: Future[T], deadline: float) -> T:
        """Like wait, without blocking the event loop."""
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            self.timeouts += 1
            log.warning(
                "API key check gave up after %.1f s: the database is not answering", self.timeout
            )
            raise VerifierUnavailableError() from None

    def close(self) -> None:
        """Let running work finish in the background, then let the threads end."""
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)
            self._threads = []


class Verdict(enum.Enum):
    """What the key index says about a presented key, before any query or argon2."""

    STALE = "the index may be out of date: refresh it, then ask again"
    UNKNOWN = "no key has this public id"
    WRONG = "the secret's fingerprint does not match"
    MATCH = "the fingerprint matches: almost surely the right secret"
    LEGACY = "a key made before fingerprints: only argon2 can tell"


class KnownKeys:
    """Public id -> fingerprint of every key, so unknown ids and wrong secrets cost no query.

    Read in full on first use and every FULL_RELOAD seconds (which also forgets deleted keys,
    so memory follows the number of keys, never the traffic); in between, when the freshness
    generation moved, only keys created since the newest one seen (minus CLOCK_SLACK, for hosts
    whose clocks disagree and transactions that commit late) are read. A key the index does not
    hold yet is never refused while the index is stale: the caller refreshes it first.
    """

    FULL_RELOAD = 600.0
    CLOCK_SLACK = timedelta(hours=1)

    def __init__(self, source: CredentialSource, freshness: Freshness) -> None:
        self._source, self._freshness = source, freshness
        self._fingerprints: dict[str, str | None] = {}
        self._generation: int | None = None
        self._newest: datetime | None = None
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()
        # Refreshes are numbered as they begin. A request that finds the index stale takes a
        # ticket (the number begun so far) and is answered only by a refresh numbered above it:
        # one that began earlier may have read before the request's key was committed, and
        # joining it refused a brand-new key with 401 at its first check.
        self._begun = 0
        self._read_by = 0  # the number of the refresh whose reading the index holds

    def ticket(self) -> int:
        """The refreshes begun so far; `covers(ticket)` once a later one has finished."""
        return self._begun

    def covers(self, ticket: int) -> bool:
        """Whether the index holds a reading begun after the ticket was taken."""
        return self._read_by > ticket

    def verdict(self, public_id: str, secret: str, *, refreshed: bool = False) -> Verdict:
        """Judge a presented key by the index; STALE means refresh() and ask again."""
        if public_id not in self._fingerprints:
            if refreshed or self._generation == self._freshness.generation():
                return Verdict.UNKNOWN
            return Verdict.STALE
        stored = self._fingerprints.get(public_id)
        if stored is None:
            return Verdict.LEGACY
        if hmac.compare_digest(stored, fingerprint(public_id, secret)):
            return Verdict.MATCH
        return Verdict.WRONG

    def refresh(self) -> None:
        """Bring the index up to date with the database (one query)."""
        with self._lock:
            self._begun += 1
            number = self._begun
            generation = self._freshness.generation()  # before reading: later commits show next
            if generation == self._generation:
                self._read_by = number
                return
            now = time.monotonic()
            full = self._newest is None or now - self._loaded_at >= self.FULL_RELOAD
            since = None if full or self._newest is None else self._newest - self.CLOCK_SLACK
            rows = self._source.key_fingerprints(since)
            # Requests read the index without a lock: a full reload fills a new dict and swaps
            # it in whole, so no request ever sees a half-filled index and refuses a real key.
            index = {} if full else self._fingerprints
            for public_id, stored, created_at in rows:
                index[public_id] = stored
                if self._newest is None or created_at > self._newest:
                    self._newest = created_at
            if full:
                self._fingerprints, self._loaded_at = index, now
            self._generation, self._read_by = generation, number

    def forget(self, public_id: str) -> None:
        """Drop a key the database no longer has."""
        self._fingerprints.pop(public_id, None)

    def reset(self) -> None:
        """After a fork: a new lock, and a full reload at the next refresh."""
        self._lock = threading.Lock()
        self._generation, self._newest = None, None
        self._begun = self._read_by = 0

    def __len__(self) -> int:
        return len(self._fingerprints)


class FailureBudget:
    """Keys made before fingerprints: a token bucket per public id bounds argon2 on wrong secrets.

    Only ids the index knows get a bucket, so its size follows the number of such keys.
    """

    def __init__(self, burst: float, per_second: float) -> None:
        self.burst, self.per_second = burst, per_second
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, public_id: str, now: float) -> float:
        tokens, since = self._buckets.get(public_id, (self.burst, now))
        return min(self.burst, tokens + (now - since) * self.per_second)

    def allows(self, public_id: str) -> bool:
        """Whether one more argon2 run for this id is within budget."""
        with self._lock:
            return self._level(public_id, time.monotonic()) >= 1.0

    def spend(self, public_id: str) -> None:
        """Record one failed argon2 run for this id."""
        with self._lock:
            now = time.monotonic()
            self._buckets[public_id] = (self._level(public_id, now) - 1.0, now)

    def reset(self) -> None:
        """After a fork: a new lock."""
        self._lock = threading.Lock()
