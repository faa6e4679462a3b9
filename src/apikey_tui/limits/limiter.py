"""Limiter: admit a request under every limit that applies, spending leased tokens."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from itertools import repeat
from operator import length_hint
from time import monotonic
from typing import Final

from apikey_tui.clock import Clock, system_clock
from apikey_tui.errors import InvalidInputError, StoreUnavailableError
from apikey_tui.forksafety import reset_in_child
from apikey_tui.limits.decisions import ADMITTED, Decision, Refused, Unavailable
from apikey_tui.limits.model import AppliedLimit, window_of
from apikey_tui.limits.modes import FailMode, Outage
from apikey_tui.limits.port import Grant, LimitStore

LEASE_DEFAULT = 16
# A lease is at most a sixteenth of the limit (and at least one token): a small limit is not
# hogged by one process's unspent lease (docs/reference/limits.md, "Under-admission").
LEASE_SHARE = 16


def lease_size(count: int, lease: int) -> int:
    """Tokens one take asks for under a limit of `count`: min(lease, max(1, count // 16))."""
    return min(lease, max(1, count // LEASE_SHARE))


# A token is a 1 drawn by `next()` from `itertools.repeat(1, n)`: one C call that no other thread
# can split, so a lease in hand is spent without the lock (as the usage tallies are counted).
_NONE: Final[Iterator[int]] = repeat(1, 0)  # no tokens: `next(_NONE, 0)` is always 0


class Lease:
    """Tokens of one limit key's window that the store granted to this process, not yet spent.

    held: (deadline, tokens), read and replaced whole, so a thread that spends without the lock
    sees tokens only with their own deadline: the monotonic time until which they may be spent
    (never later than the store's window end, see Limiter._merge). Tokens are taken one by one
    with `next(tokens, 0)`; a token is only ever put back, or more added, by draining the
    iterator and replacing the pair under the lock (`Limiter._refill`), so each token is spent
    once. exhausted: the store granted 0 in that window, so every request is refused until the
    deadline without asking it again. A verifier holds the Lease objects of a key on its cached
    caller (`Limiter.leases`): they live as long as the limiter, a fork only empties them.
    count: the limit's N the store granted them under (0: none yet), so a changed limit is
    seen when a caller's record is built again (`Limiter.leases`).
    """

    __slots__ = ("count", "exhausted", "held", "window_end")

    def __init__(self) -> None:
        self.held: tuple[float, Iterator[int]] = (float("-inf"), _NONE)
        self.exhausted = False
        self.window_end = float("-inf")  # the store's end of the window the tokens are of
        self.count = 0

    def left(self, now: float) -> int:
        """Tokens in hand at `now` (others may spend them meanwhile unless none are left)."""
        deadline, tokens = self.held
        return length_hint(tokens) if now < deadline else 0


class Limiter:
    """Admits or refuses a request under limits shared by every process using one store.

    Thread-safe and fork-safe. With a lease in hand for every limit, `spend` (a verifier's
    warm check: the Lease objects held on its cached caller) takes a token of each without the
    lock, and `admit` under it (a lock, a dict lookup and a token per limit): no store call, no
    allocation. Without tokens, `admit` asks the store for a lease of `lease_size` tokens in
    one atomic take; a window the store says is spent refuses every request locally until it
    turns.

    clock: the wall clock, read only in fail-open (the windows of the local allowance).
    monotonic: the clock of the `now` that callers pass, read to move it on by the time a
    check spends waiting for a take (`_admit_cold`).
    """

    def __init__(
        self,
        store: LimitStore,
        *,
        lease: int = LEASE_DEFAULT,
        outage: Outage | None = None,
        clock: Clock = system_clock,
        monotonic: Callable[[], float] = monotonic,
    ) -> None:
        if lease < 1:
            raise InvalidInputError("a lease must be at least one token")
        self._store = store
        self._lease = lease
        self._outage = outage or Outage()
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._leases: dict[str, Lease] = {}
        self._boot = ""  # the store's boot id last seen: '' until the first take
        self._down_until = float("-inf")  # monotonic: the store failed; not asked before this
        self._local: dict[str, tuple[int, int]] = {}  # fail-open: key -> (window, admitted)
        # Limit keys with a take under way, and the event set when it ends: a burst of requests
        # that find a lease spent waits for that one take instead of each sending its own.
        self._taking: dict[str, threading.Event] = {}
        self.store_calls = 0  # takes sent (the round trips), for metrics and the tests
        self.store_failures = 0
        reset_in_child(self._after_fork)

    def leases(self, limits: Sequence[AppliedLimit]) -> tuple[Lease, ...]:
        """The Lease of each limit, in order, made empty if new: a caller holds them to `spend`.

        Called when a caller's record is built, so also when its limits changed: a lease
        granted under a higher N loses its tokens in hand (the store counted them under the
        old N; spent, they would pass the new one by up to a lease per process for the rest
        of the window), and a window known spent is asked again (a raised N may have room).
        """
        with self._lock:
            return tuple(self._lease_under(applied) for applied in limits)

    def _lease_under(self, applied: AppliedLimit) -> Lease:
        """Under the lock: the key's Lease, brought to the limit's N (see `leases`)."""
        lease = self._lease_of(applied.key)
        count = applied.limit.count
        if lease.count and lease.count != count:
            if count < lease.count:
                sum(lease.held[1])  # drained: spenders holding the iterator find it empty
                lease.held = (lease.held[0], _NONE)
            lease.exhausted = False
            lease.count = count
        return lease

    def _lease_of(self, key: str) -> Lease:
        lease = self._leases.get(key)
        if lease is None:
            lease = self._leases[key] = Lease()
        return lease

    def spend(self, leases: Sequence[Lease], clock: Callable[[], float] = monotonic) -> bool:
        """One token of every lease, without the lock: True, or False with nothing spent (the
        caller then asks `admit`, which leases or refuses).

        Thread-safe through `next()` alone: a token goes to one request. The clock is read
        after the token is taken and judged against that token's own deadline (read with it),
        so however long a thread was held up, no token is spent after its window's end: one
        taken too late is void, as it would be unspent. Tokens taken for a request that another
        lease then refuses are put back, under the lock.
        """
        if len(leases) == 1:  # the usual case, without the loop (a warm check's cost)
            deadline, tokens = leases[0].held
            return next(tokens, 0) == 1 and clock() < deadline
        taken: list[tuple[Lease, tuple[float, Iterator[int]]]] = []
        for lease in leases:
            held = lease.held
            if not next(held[1], 0):
                break
            taken.append((lease, held))
        else:
            now = clock()
            if all(now < held[0] for _lease, held in taken):
                return True
        if taken:
            with self._lock:
                self._put_back(taken)
        return False

    def admit(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """ADMITTED (one token of every limit spent), Refused or Unavailable.

        now: time.monotonic(), read at or before this call. A refused request consumes nothing.
        """
        with self._lock:
            if self._take_all(limits, now):
                return ADMITTED
        return self._admit_cold(limits, now)

    def admit_local(self, limits: Sequence[AppliedLimit], now: float) -> Decision | None:
        """admit without a store call: ADMITTED with tokens in hand, Refused for a window known
        to be spent, the outage's answer while the store is left alone; None when only the
        store can say (an event loop then asks `admit` in a thread)."""
        with self._lock:
            while True:
                missing = self._missing(limits, now)
                if isinstance(missing, Refused):
                    return missing
                if missing is not None:
                    break
                if self._take_all(limits, now):
                    return ADMITTED
            if now < self._down_until:
                return self._during_outage(limits, now)
        return None

    def _take_all(self, limits: Sequence[AppliedLimit], now: float) -> bool:
        """Under the lock: one token of every limit, or none (False: one had none in hand)."""
        if len(limits) == 1:  # the usual case, without the list
            lease = self._leases.get(limits[0].key)
            if lease is None:
                return False
            deadline, tokens = lease.held
            return now < deadline and next(tokens, 0) == 1
        taken: list[tuple[Lease, tuple[float, Iterator[int]]]] = []
        for applied in limits:
            lease = self._leases.get(applied.key)
            if lease is None:
                break
            held = lease.held
            if now >= held[0] or not next(held[1], 0):
                break
            taken.append((lease, held))
        else:
            return True
        self._put_back(taken)
        return False

    def _put_back(self, taken: Sequence[tuple[Lease, tuple[float, Iterator[int]]]]) -> None:
        """Under the lock: return tokens a refused request took, each to the tokens it came
        from; a lease renewed since keeps its new tokens only (the old one is lost: never
        spent in a window it was not granted for)."""
        for lease, held in taken:
            if lease.held is held:
                self._refill(lease, held[0], 1)

    @staticmethod
    def _refill(lease: Lease, deadline: float, more: int) -> None:
        """Under the lock: the lease's tokens in hand plus `more`, until `deadline`.

        The tokens left are counted by draining them (`sum`, each 1 taken once, whoever else
        is spending), so none is counted twice; spenders holding the drained iterator find it
        empty and come to the lock."""
        left = sum(lease.held[1])
        lease.held = (deadline, repeat(1, left + more) if left + more else _NONE)

    def _admit_cold(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """Lease what is missing (one take per limit, outside the lock), then spend or refuse.

        Single-flight per limit key: while one thread's take is under way, the others that
        need that key wait for it and look again, rather than each leasing tokens of their own
        (a burst at a window's start would otherwise send a take per request, and strand the
        surplus leases in this process).

        `now` is moved on by the time spent here, waiting for a take (another thread's or this
        one's): a grant answered after its deadline is void, as a token a spender took too late
        is, and a stale `now` would spend it in the store's next window."""
        asked, entered = now, self._monotonic()
        while True:
            with self._lock:
                missing = self._missing(limits, now)
                if isinstance(missing, Refused):
                    return missing
                if missing is None:
                    if self._take_all(limits, now):
                        return ADMITTED
                    continue  # a spender took the last token meanwhile: look again
                if now < self._down_until:
                    return self._during_outage(limits, now)
                flight = self._taking.get(missing.key)
                if flight is None:
                    flight = self._taking[missing.key] = threading.Event()
                    known_boot = self._boot
                    self.store_calls += 1
                else:
                    known_boot = None  # another thread's take: wait for it below
            if known_boot is None:
                # Bounded by the taker's own store timeouts; a taker that failed marks the
                # store down, which the next look answers without a take.
                flight.wait()
                now = asked + (self._monotonic() - entered)
                continue
            limit = missing.limit
            try:
                grant = self._store.take(
                    missing.key, limit.count, limit.seconds, lease_size(limit.count, self._lease),
                    known_boot,
                )  # fmt: skip
            except StoreUnavailableError:
                # Left alone from the failure on, not from the take's start: a failure that
                # took longer than the interval (SQLite's busy timeout, a connect timeout)
                # would leave no interval at all, and every request would wait as long.
                failed = asked + (self._monotonic() - entered)
                with self._lock:
                    self.store_failures += 1
                    self._down_until = max(self._down_until, failed + self._outage.retry_seconds)
                    return self._during_outage(limits, failed)
            else:
                with self._lock:
                    self._merge(missing.key, grant, now, limit.count)
            finally:
                with self._lock:
                    if self._taking.get(missing.key) is flight:
                        del self._taking[missing.key]
                flight.set()
            now = asked + (self._monotonic() - entered)

    def unanswered(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """The declared mode's answer for a take that did not return in time (a store that
        accepts connections but never answers: a frozen PostgreSQL acknowledges TCP, so no
        socket bound fires): the store counts as down for its retry interval, as after an
        error. The take itself finishes when it may; its grant is kept (never spent twice).
        """
        with self._lock:
            self.store_failures += 1
            self._down_until = max(self._down_until, now + self._outage.retry_seconds)
            return self._during_outage(limits, now)

    def _missing(self, limits: Sequence[AppliedLimit], now: float) -> AppliedLimit | Refused | None:
        """Under the lock: the first limit with no tokens in hand (None if all have some), or a
        Refused when one's window is known to be spent (checked before any store call)."""
        missing: AppliedLimit | None = None
        for applied in limits:
            lease = self._lease_of(applied.key)
            deadline = lease.held[0]
            if now >= deadline:
                lease.exhausted = False
                if lease.held[1] is not _NONE:
                    lease.held = (deadline, _NONE)
            if lease.left(now) > 0:
                continue
            if lease.exhausted:
                return Refused(deadline - now, applied)
            if missing is None:
                missing = applied
        return missing

    def _merge(self, key: str, grant: Grant, sent: float, count: int) -> None:
        """Under the lock: add a grant, taken under a limit of `count`, to the key's lease.

        The tokens may be spent until sent + (window_end - store_now) on the monotonic clock: the
        store read its now after `sent`, so that moment is never after the store's window end.
        A grant of another window than the lease's replaces it, an older one too: takes of a key
        are one at a time, so an older window means the store's clock went back (a failover to
        a host whose clock is behind), and the store's clock decides. Dropping it sent the
        request back for another take, each burning tokens, until that clock caught up.
        """
        self._boot = grant.boot
        lease = self._lease_of(key)
        deadline = sent + (grant.window_end - grant.store_now)
        if grant.window_end != lease.window_end or sent >= lease.held[0]:
            # A new window: the old tokens are void (not carried over), spent only by a
            # request whose moment came before their own deadline.
            lease.window_end, lease.exhausted, lease.count = grant.window_end, False, count
            lease.held = (deadline, repeat(1, grant.granted) if grant.granted else _NONE)
        else:
            # Tokens put back may have been granted under a higher N: the higher is kept, so
            # that a lowered limit still voids them (`leases`).
            lease.count = max(lease.count, count)
            self._refill(lease, max(lease.held[0], deadline), grant.granted)
        if grant.granted == 0:
            lease.exhausted = True

    def _during_outage(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """Under the lock, the store down: the declared mode decides. Tokens in hand are spent
        either way (the store granted them); fail-open admits the rest from a local allowance
        of N // processes per window of the wall clock."""
        retry = max(0.0, self._down_until - now)
        if self._outage.mode is FailMode.CLOSED:
            return Unavailable(retry)
        moment = self._clock().timestamp()
        share = self._outage.processes
        taken: list[tuple[Lease, tuple[float, Iterator[int]]]] = []
        local: list[AppliedLimit] = []
        for applied in limits:
            lease = self._lease_of(applied.key)
            held = lease.held
            if now < held[0] and next(held[1], 0):
                taken.append((lease, held))
                continue
            limit = applied.limit
            window, used = self._local.get(applied.key, (-1, 0))
            if window != window_of(moment, limit.seconds):
                used = 0
            if used >= limit.count // share:
                self._put_back(taken)
                end = (window_of(moment, limit.seconds) + 1) * limit.seconds
                return Refused(end - moment, applied)
            local.append(applied)
        for applied in local:
            window = window_of(moment, applied.limit.seconds)
            known, used = self._local.get(applied.key, (-1, 0))
            self._local[applied.key] = (window, used + 1 if known == window else 1)
        return ADMITTED

    def _after_fork(self) -> None:
        """In a forked child: the parent's leases and connections stay the parent's. The Lease
        objects stay (verifiers hold them), emptied: a lease is never spent twice."""
        self._lock = threading.Lock()
        for lease in self._leases.values():
            lease.held, lease.exhausted, lease.window_end, lease.count = (
                (float("-inf"), _NONE),
                False,
                float("-inf"),
                0,
            )
        self._local = {}
        self._taking = {}  # the parent's takes are not this process's to wait for
        self._down_until = float("-inf")
        self._store.forget_connections()
