"""What a flood can buy: checks off the request path with a deadline, and cheap refusals."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Generic, TypeAlias, TypeVar

from apikey_tui.errors import VerifierUnavailableError
from apikey_tui.verifier.metrics import Timings

log = logging.getLogger("apikey_tui.verifier")
T = TypeVar("T")


OUTAGE_LOG_INTERVAL = 30.0  # seconds between two lines about one outage
# Seconds a check thread waits for work before it ends (the next check starts one again): a
# gate whose checks stopped, closed while requests still ran or dropped unclosed, keeps none.
IDLE_SECONDS = 60.0


class OutageLog:
    """Warnings that every refused request would repeat (a database that cannot answer): at
    most one line per `interval`, the next line counting those held back meanwhile.

    One per Verifier, shared by its gate: every integration checks keys through one, so a
    database outage logs a line per interval in any of them, never one per request.
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = OUTAGE_LOG_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.interval, self.clock = logger, interval, clock
        self.held = 0  # lines held back since the last one written
        self._next = float("-inf")
        self._lock = threading.Lock()

    def warning(self, message: str, *args: object) -> None:
        """Log message (%-style, like logging) now, or count it if a line went out lately."""
        with self._lock:
            now = self.clock()
            if now < self._next:
                self.held += 1
                return
            held, self.held, self._next = self.held, 0, now + self.interval
        if held:
            message, args = message + " (%d more such lines held back)", (*args, held)
        self.logger.warning(message, *args)

    def reset(self) -> None:
        """After a fork: a new lock."""
        self._lock = threading.Lock()


class Done(Generic[T]):
    """The outcome of an inline run nobody joined: what `CheckGate.wait` reads of a Future."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: T, error: BaseException | None) -> None:
        self._value, self._error = value, error

    def result(self, timeout: float | None = None) -> T:
        """The run's value, or its exception raised (timeout: a Future's, unused: it is done)."""
        if self._error is not None:
            raise self._error
        return self._value


# What CheckGate.submit returns: a Future (a gate thread's run, or one joined), or a Done.
Run: TypeAlias = "Future[T] | Done[T]"


class _Inline:
    """An inline run under way in `_pending`: joiners wait on `joined`, made by the first."""

    __slots__ = ("joined",)

    def __init__(self) -> None:
        self.joined: Future[object] | None = None


class CheckGate:
    """Runs database and argon2 work in a few threads; a request waits for it at most `timeout`.

    Work is keyed: requests that need the same work (the same presented key, the same index
    refresh) share one run. At most `max_pending` runs are queued or running; beyond that, and
    past the deadline, the answer is 503 at once. A database that stops answering therefore
    costs a request at most `timeout` seconds and the process at most `workers` stuck threads.
    The threads are daemons (unlike a ThreadPoolExecutor's): a stuck one never holds up exit.
    A thread idle for `idle` seconds ends.
    """

    def __init__(
        self,
        workers: int,
        timeout: float,
        max_pending: int,
        outage: OutageLog | None = None,
        *,
        idle: float = IDLE_SECONDS,
    ) -> None:
        if workers < 1 or timeout <= 0 or max_pending < workers:
            raise ValueError("need workers >= 1, timeout > 0 and max_pending >= workers")
        self.workers, self.timeout, self.max_pending = workers, timeout, max_pending
        self.idle = idle
        self.outage = outage or OutageLog(log)
        # Metrics: submit-to-start wait, run time, 503s for a full queue and for the deadline.
        self.waited, self.ran = Timings(), Timings()
        self.rejected = self.timeouts = 0
        self.reset()

    def reset(self) -> None:
        """Forget threads and runs (after a fork they belong to the parent); make no thread yet."""
        self._queue: queue.SimpleQueue[tuple[Future[object], Callable[[], object], float] | None]
        self._queue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pending: dict[Hashable, Future[object] | _Inline] = {}
        self._inline = 0  # runs under way in callers' threads
        self._lock = threading.Lock()

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                item = self._queue.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:  # work is queued under it: none can slip in unseen
                    if self._queue.empty():
                        if me in self._threads:
                            self._threads.remove(me)
                        return
                continue
            if item is None:
                with self._lock:
                    # close() lists no thread it stops: one listed was started since, and
                    # took a stop meant for an older thread (one stuck past the timeout).
                    if me not in self._threads:
                        return
                continue
            future, work, submitted = item
            del item  # an idle thread holds nothing of the work it ran (nor its verifier)
            if future.set_running_or_notify_cancel():
                started = time.monotonic()
                self.waited.observe(started - submitted)
                try:
                    future.set_result(work())
                except BaseException as exc:  # the waiting request re-raises it
                    future.set_exception(exc)
                self.ran.observe(time.monotonic() - started)
            del future, work

    def submit(self, key: Hashable, work: Callable[[], T], *, inline: bool = False) -> Run[T]:
        """Start work (or join the run already under way for key); 503 when the queue is full.

        With `inline` (a caller that may block: a sync request on SQLite, whose reads never
        wait long), the work runs in the calling thread while fewer than `workers` others do:
        the handoff to a gate thread and back costs more than a SQLite read (~200 us). Such a
        run makes a Future only for a joiner; alone, its outcome comes back as a `Done`.
        """
        with self._lock:
            running = self._pending.get(key)
            if running is not None:
                if isinstance(running, _Inline):  # the first joiner makes the Future
                    if running.joined is None:
                        running.joined = Future()
                        running.joined.set_running_or_notify_cancel()  # never cancelled
                    return running.joined  # type: ignore[return-value]
                return running  # type: ignore[return-value]
            if len(self._pending) >= self.max_pending:
                self.rejected += 1
                raise VerifierUnavailableError()
            here = inline and self._inline < self.workers
            if here:
                self._inline += 1
                marker = self._pending[key] = _Inline()
            else:
                future: Future[T] = Future()
                self._pending[key] = future  # type: ignore[assignment]
                if len(self._threads) < min(self.workers, len(self._pending)):
                    thread = threading.Thread(
                        target=self._work, name="apikey-tui-check", daemon=True
                    )
                    thread.start()
                    self._threads.append(thread)
                self._queue.put((future, work, time.monotonic()))  # type: ignore[arg-type]
        if not here:
            future.add_done_callback(lambda done: self._finished(key, done))  # type: ignore[arg-type]
            return future
        # In the caller's thread. Without a joiner (nearly always) no Future, no Condition, no
        # callback: a SQLite re-read runs two of these, and those were a tenth of its Python.
        started = time.monotonic()
        value: T | None = None
        error: BaseException | None = None
        try:
            value = work()
        except BaseException as exc:  # the caller (and any joiner) re-raises it
            error = exc
        finally:
            with self._lock:
                self._inline -= 1
                if self._pending.get(key) is marker:
                    del self._pending[key]
                joined = marker.joined
        self.waited.zeros += 1  # no queue: a wait of 0 s, so runs and waits stay one per run
        self.ran.observe(time.monotonic() - started)
        if joined is not None:
            if error is None:
                joined.set_result(value)
            else:
                joined.set_exception(error)
        return Done(value, error)  # type: ignore[arg-type]

    def _finished(self, key: Hashable, done: Future[object]) -> None:
        with self._lock:
            if self._pending.get(key) is done:
                del self._pending[key]

    def wait(self, future: Run[T], deadline: float) -> T:
        """The result of the work, or 503 when the deadline passes first."""
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            self.timeouts += 1
            self.outage.warning(
                "API key check gave up after %.1f s: the database is not answering", self.timeout
            )
            raise VerifierUnavailableError() from None

    async def wait_async(self, future: Run[T], deadline: float) -> T:
        """Like wait, without blocking the event loop."""
        if isinstance(future, Done):
            return future.result()
        try:
            return await asyncio.wait_for(
                asyncio.shield(asyncio.wrap_future(future)), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            self.timeouts += 1
            self.outage.warning(
                "API key check gave up after %.1f s: the database is not answering", self.timeout
            )
            raise VerifierUnavailableError() from None

    def close(self) -> None:
        """Let running work finish, then let the threads end: waits for them up to the check
        timeout (a frozen database holds close() no longer than it holds a request), so the
        connections a running check holds are back before the caller disposes of them."""
        with self._lock:
            threads, self._threads = self._threads, []
            for _ in threads:
                self._queue.put(None)
        deadline = time.monotonic() + self.timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))


class TokenBucket:
    """One budget for the whole process: `take()` spends a token if one is left."""

    _tokens: float
    _since: float
    denied: int

    def __init__(self, burst: float, per_second: float) -> None:
        self.burst, self.per_second = burst, per_second
        self.reset()

    def take(self) -> bool:
        """Spend one token; False (and nothing spent) when the budget is used up."""
        with self._lock:
            now = time.monotonic()
            tokens = min(self.burst, self._tokens + (now - self._since) * self.per_second)
            self._since = now
            if tokens < 1.0:
                self._tokens = tokens
                self.denied += 1
                return False
            self._tokens = tokens - 1.0
            return True

    def refund(self) -> None:
        """Give back a token taken for work that turned out not to be the flood's (a lookup
        that proved a key): real traffic never spends what forged ids are allowed."""
        with self._lock:
            self._tokens = min(self.burst, self._tokens + 1.0)

    def reset(self) -> None:
        """Full, with a new lock (also after a fork)."""
        self._lock = threading.Lock()
        self._tokens, self._since = self.burst, time.monotonic()
        self.denied = 0  # takes refused, for metrics and tests


class FailureBudget:
    """Keys made before fingerprints: a token bucket per public id bounds argon2 on wrong secrets.

    Only ids the index knows get a bucket, so its size follows the number of such keys.
    serve-leaks keeps one too, for `/revoke` (`leaks.verdicts.judge`).
    """

    def __init__(
        self, burst: float, per_second: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst, self.per_second = burst, per_second
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, public_id: str, now: float) -> float:
        tokens, since = self._buckets.get(public_id, (self.burst, now))
        return min(self.burst, tokens + (now - since) * self.per_second)

    def allows(self, public_id: str) -> bool:
        """Whether one more argon2 run for this id is within budget."""
        with self._lock:
            return self._level(public_id, self.clock()) >= 1.0

    def spend(self, public_id: str) -> None:
        """Record one failed argon2 run for this id."""
        with self._lock:
            now = self.clock()
            self._buckets[public_id] = (self._level(public_id, now) - 1.0, now)

    def reset(self) -> None:
        """After a fork: a new lock."""
        self._lock = threading.Lock()
