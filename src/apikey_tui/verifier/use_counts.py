"""Usage counts per key, per minute: counted on the request path in C, written off it.

An allowed request bumps a tally: an `itertools.count` per (key, required scopes), found in two
dict lookups and advanced by `next()`, one C call that no other thread can split, so nothing is
allocated and nothing is left for another thread to count. Refusals (and allowed requests whose
tally could not be made) append a small tuple to a deque instead (also atomic). A background
thread drains the deque every second, reads the tallies at every minute boundary and every
flush, and appends the counts per (key, minute, kind, scope set) to the usage table at least
every flush interval as one transaction, marked with the batch's own id: a batch whose write
failed is retried unchanged under the same id, so one whose commit succeeded but whose answer
was lost is not written twice. Nothing is swapped under a request's feet: the deque is popped
item by item, and a reading takes every tally out of the request path in one C call (a request
found its tally and advanced it before that call or finds none after it) and then reads them,
so no request racing a drain is lost. A reading frees every tally: a key holds one only while it
is in use (its next request makes it again), not for as long as it is cached. Memory is
bounded: at most `limit` tallies made between two readings, `backlog` undrained requests and
`limit` distinct counts (a batch waiting for its retry included); past these, a request is
dropped (and counted as dropped), never waited for.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Collection, Sequence
from itertools import count, repeat, starmap
from typing import Any

from apikey_tui.clock import Clock
from apikey_tui.db.models import (
    MINUTE,
    USAGE_ALLOWED,
    USAGE_FORBIDDEN,
    USAGE_FROM,
    USAGE_LIMITED,
    USAGE_NETWORK,
    USAGE_SHADOW,
    USAGE_WRONG_SECRET,
    usage_minute,
)
from apikey_tui.names import printable
from apikey_tui.networks import address_of, aggregate
from apikey_tui.verifier.metrics import Timings

log = logging.getLogger("apikey_tui.verifier")

DEFAULT_LIMIT = 50_000  # distinct (key, minute, kind, scope set) counts held unwritten
DEFAULT_BACKLOG = 200_000  # requests noted and not yet drained (~70 bytes each)
DRAIN_INTERVAL = 1.0  # seconds between drains of the request path's deque
UsageRow = tuple[str, int, int, int, str, int]  # public_id, minute, span, kind, scope, requests
# Required scopes kept as given (RouteScopes: tuple); other collections become a tuple.
HASHABLE = (tuple, frozenset)
# Client networks (kind USAGE_FROM) kept per key per batch: past these, one row "*" says the
# key came from more, so a proposal knows it cannot cover them all. The same bound holds for a
# key's (would-be) refusals for the network, each a network and a route the client chooses: past
# it their row is "*", so a flood to distinct paths writes 65 rows per batch, not one a request.
NETWORKS_PER_KEY = 64
MORE_NETWORKS = "*"
ROUTE_MAX = 200  # characters of a route kept with a refusal for the network


class UseCounts:
    """Counts allowed, forbidden and wrong-secret requests per public id; writes them in batches.

    `write` appends rows in one transaction marked with the batch id it is given, once per id
    (`CredentialReads.record_usage`). A failed write is logged once per failure streak and
    retried unchanged, under the same id, before anything counted since (which waits, within
    `limit`); the thread never dies of it.
    """

    def __init__(
        self,
        write: Callable[[Sequence[UsageRow], str], None],
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
        # The request path's tallies: required scopes (as passed) -> public id -> counter. The
        # verifier's warm path advances `tallies[required][public_id]` itself and calls
        # `allowed` only when that lookup fails; the object is kept (cleared, not replaced).
        # Scopes first: a few spellings, each with one dict of the keys used since the last
        # reading (a counter and a dict entry each, ~120 bytes, freed by the reading).
        self.tallies: dict[Any, dict[str, count[int]]] = {}
        # The last client address noted per key (`came_from`); forgotten at each minute's turn,
        # so a key used from one place all day is noted in every minute it was used.
        self.sources: dict[str, str] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the thread, the locks and the counts (after a fork they are the parent's)."""
        self._flush_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._tally_lock = threading.Lock()
        self._noted: deque[tuple[Any, ...]] = deque()
        self.tallies.clear()
        self.sources.clear()
        # Network rows (USAGE_FROM, USAGE_NETWORK, USAGE_SHADOW) per (key, kind) in _counts.
        self._networks: Counter[tuple[str, int]] = Counter()
        self._made = 0  # tallies made since the last reading (at most `limit`)
        self._texts: dict[Any, str] = {}  # a spelling's scope text, one string for its tallies
        self._minute = usage_minute(self._clock())
        self._counts: dict[tuple[str, int, int, str], int] = {}
        # A batch whose write failed, kept as it was for its retry under the same id (its commit
        # may have succeeded); counts made meanwhile wait in _counts, in the room it leaves.
        self._unwritten: tuple[str, dict[tuple[str, int, int, str], int]] | None = None
        self._room = self._limit
        self._written_at = time.monotonic()
        closed, self._closed = self._closed, threading.Event()
        if closed.is_set():
            self._closed.set()
        self._thread: threading.Thread | None = None

    # --- the request path ---------------------------------------------------------------------

    def allowed(self, public_id: str, required: Collection[str]) -> None:
        """One allowed request of this key that required these scopes.

        The warm path skips this call: it advances the tally in `tallies` directly. Here the
        tally is made on first use; past `limit` tallies the request is noted in the deque.
        """
        spelling = required if required.__class__ in HASHABLE else tuple(required)
        if self._tally(public_id, spelling):
            return
        if len(self._noted) < self._backlog:
            self._noted.append((public_id, spelling))
        else:
            self.dropped += 1  # a plain int: may, rarely, lose one under contention

    def _tally(self, public_id: str, spelling: Any) -> bool:
        """Advance this key's tally for these scopes, made and listed if new; False when none
        is free. All under the lock the readings retire tallies under: a tally made or found
        here is advanced before any reading can find it idle and forget it."""
        with self._tally_lock:
            counters = self.tallies.get(spelling)
            counter = None if counters is None else counters.get(public_id)
            if counter is None:
                if self._made >= self._limit:
                    return False  # nothing kept for it: spellings stay within the limit
                if counters is None:
                    counters = self.tallies[spelling] = {}
                    self._texts[spelling] = " ".join(sorted(set(spelling)))
                counter = counters[public_id] = count()
                self._made += 1
            next(counter)
            return True

    def forbidden(self, public_id: str, missing: Collection[str]) -> None:
        """One request refused with 403: the key lacked these scopes."""
        self._refusal(public_id, USAGE_FORBIDDEN, " ".join(sorted(set(missing))))

    def wrong_secret(self, public_id: str) -> None:
        """One request presented this (known) public id with a wrong secret."""
        self._refusal(public_id, USAGE_WRONG_SECRET, "")

    def limited(self, public_id: str, policy: str) -> None:
        """One request refused with 429: the limit named by policy ('key:600/m') was spent."""
        self._refusal(public_id, USAGE_LIMITED, policy)

    def came_from(self, public_id: str, client: str) -> None:
        """An admitted request of this key came from this address (aggregated when drained)."""
        self.sources[public_id] = client
        self._refusal(public_id, USAGE_FROM, client)

    def network(
        self, public_id: str, client: str | None, route: str | None, *, refused: bool
    ) -> None:
        """One request from an address the key's network rules refuse: refused (403), or
        admitted by rules in shadow mode (a would-be refusal)."""
        kind = USAGE_NETWORK if refused else USAGE_SHADOW
        if len(self._noted) < self._backlog:
            self._noted.append((public_id, kind, client or "", route or ""))
        else:
            self.dropped += 1
        if self._thread is None:
            self.start()

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

    def _count(self, entry: tuple[str, int, int, str], times: int) -> int:
        """Add to one count within the limit; how many of these requests were dropped."""
        n = self._counts.get(entry)
        if n is not None:
            self._counts[entry] = n + times
        elif len(self._counts) < self._room:
            self._counts[entry] = times
        else:
            return times
        return 0

    def _drain(self, read_tallies: bool = False) -> None:
        """Count what the request path noted, in the minute that was current since last drain;
        the tallies too when asked (a flush) or when that minute has ended."""
        with self._flush_lock:
            minute, self._minute = self._minute, usage_minute(self._clock())
            dropped = counted = 0
            if minute != self._minute:
                self.sources.clear()
            if read_tallies or minute != self._minute:
                counted, dropped = self._read_tallies(minute)
            noted = self._noted
            drained = len(noted)  # only these: later ones belong to the next minute
            # Popped and counted in C (deque.popleft through starmap, Counter's counting loop):
            # this thread holds the GIL the request path needs, so its cost per request is
            # the service's too. Each distinct item is then made a row once.
            grouped = Counter(starmap(noted.popleft, repeat((), drained)))
            for item, times in grouped.items():
                if len(item) == 2:  # allowed past the tallies' limit: (public id, scopes)
                    entry = (item[0], minute, USAGE_ALLOWED, " ".join(sorted(set(item[1]))))
                elif len(item) == 4:  # the network: (public id, kind, client, route)
                    scope = _network_scope(item[2], item[3])
                    entry = self._bounded((item[0], minute, item[1], scope))
                elif item[1] == USAGE_FROM:  # (public id, kind, client)
                    address = address_of(item[2])
                    if address is None:
                        continue
                    entry = self._bounded((item[0], minute, USAGE_FROM, aggregate(address)))
                else:  # refused: (public id, kind, scope text)
                    entry = (item[0], minute, item[1], item[2])
                dropped += self._count(entry, times)
            self.recorded += counted + drained - dropped
            self.dropped += dropped

    def _bounded(self, entry: tuple[str, int, int, str]) -> tuple[str, int, int, str]:
        """A network row's count, or its key's "*" row past NETWORKS_PER_KEY of its kind."""
        if entry not in self._counts:
            public_id, minute, kind, _ = entry
            if self._networks[public_id, kind] >= NETWORKS_PER_KEY:
                return (public_id, minute, kind, MORE_NETWORKS)
            self._networks[public_id, kind] += 1
        return entry

    def _read_tallies(self, minute: int) -> tuple[int, int]:
        """Take every tally out of the request path and count it: (counted, dropped).

        Taken under the lock that makes them, in one C call (`dict.clear`): a request that found
        its counter advanced it before (no thread switch between its lookup and its `next()`)
        and one after makes a new tally. So each taken counter is final; its reading, a
        `next()`, gives how many requests advanced it.
        """
        with self._tally_lock:
            taken, texts = list(self.tallies.items()), self._texts
            self.tallies.clear()
            self._texts, self._made = {}, 0
        counted = dropped = 0
        counts, limit = self._counts, self._room
        for spelling, counters in taken:
            scope = texts[spelling]
            for public_id, counter in counters.items():
                times = next(counter)
                counted += times
                entry = (public_id, minute, USAGE_ALLOWED, scope)
                held = counts.get(entry)
                if held is not None:
                    counts[entry] = held + times
                elif len(counts) < limit:
                    counts[entry] = times
                else:
                    dropped += times
        return counted, dropped

    def flush(self) -> None:
        """Count and append everything noted so far to the usage table now: a batch that
        failed before first, unchanged and under its id, then the rest (a transaction each)."""
        self._drain(read_tallies=True)
        with self._flush_lock:  # a flush by close() and by the thread never interleave
            self._written_at = time.monotonic()
            while True:
                if self._unwritten is None:
                    rows, self._counts = self._counts, {}
                    self._networks = Counter()
                    if not rows:
                        return
                    self._unwritten = (uuid.uuid4().hex, rows)
                    self._room = self._limit - len(rows)
                if not self._write_unwritten():
                    return

    def _write_unwritten(self) -> bool:
        """Write the batch waiting (under our lock); whether it was written."""
        assert self._unwritten is not None
        batch, rows = self._unwritten
        started = time.monotonic()
        try:
            self._write([(p, m, MINUTE, k, s, n) for (p, m, k, s), n in rows.items()], batch)
        except Exception as exc:  # never let the writer die; the next round retries
            if not self._failing:
                log.warning("cannot record API key usage: %s", exc)
            self._failing = True
            return False
        self._unwritten, self._room = None, self._limit
        self.flush_seconds.observe(time.monotonic() - started)
        self.flushed += sum(rows.values())
        if self._failing:
            log.warning("recording API key usage works again")
        self._failing = False
        return True

    def close(self) -> None:
        """Stop the thread and write what is counted (what still cannot be written is dropped)."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        with self._flush_lock:
            lost = sum(self._counts.values())
            if self._unwritten is not None:
                lost += sum(self._unwritten[1].values())
            self._counts, self._unwritten, self._room = {}, None, self._limit
        if lost:
            self.dropped += lost
            log.warning("%d API key uses could not be recorded before closing", lost)


def _network_scope(client: str, route: str) -> str:
    """A network refusal's scope text: the client's network (never the address) and route."""
    address = address_of(client) if client else None
    where = "unknown" if address is None else aggregate(address)
    return f"{where} {printable(route)[:ROUTE_MAX]}".rstrip()
