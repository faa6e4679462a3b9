"""Limiter: admit a request under every limit that applies, spending leased tokens."""

from __future__ import annotations

import threading
from collections.abc import Sequence

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


class _Lease:
    """Tokens of one limit key's window that the store granted to this process, not yet spent.

    deadline: the monotonic time until which they may be spent (never later than the store's
    window end, see Limiter._merge); exhausted: the store granted 0 in that window, so every
    request is refused until the deadline without asking it again.
    """

    __slots__ = ("deadline", "exhausted", "tokens", "window_end")

    def __init__(self) -> None:
        self.tokens = 0
        self.deadline = float("-inf")
        self.exhausted = False
        self.window_end = float("-inf")  # the store's end of the window the tokens are of


class Limiter:
    """Admits or refuses a request under limits shared by every process using one store.

    Thread-safe and fork-safe. `admit` with a lease in hand for every limit is a lock, a dict
    lookup and a decrement per limit: no store call, no allocation. Without tokens it asks the
    store for a lease of `lease_size` tokens in one atomic take; a window the store says is spent
    refuses every request locally until it turns.

    clock: the wall clock, read only in fail-open (the windows of the local allowance).
    """

    def __init__(
        self,
        store: LimitStore,
        *,
        lease: int = LEASE_DEFAULT,
        outage: Outage | None = None,
        clock: Clock = system_clock,
    ) -> None:
        if lease < 1:
            raise InvalidInputError("a lease must be at least one token")
        self._store = store
        self._lease = lease
        self._outage = outage or Outage()
        self._clock = clock
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {}
        self._boot = ""  # the store's boot id last seen: '' until the first take
        self._down_until = float("-inf")  # monotonic: the store failed; not asked before this
        self._local: dict[str, tuple[int, int]] = {}  # fail-open: key -> (window, admitted)
        self.store_calls = 0  # takes sent (the round trips), for metrics and the tests
        self.store_failures = 0
        reset_in_child(self._after_fork)

    def admit(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """ADMITTED (one token of every limit spent), Refused or Unavailable.

        now: time.monotonic(), read at or before this call. A refused request consumes nothing.
        """
        leases = self._leases
        with self._lock:
            if len(limits) == 1:  # the usual case, without the loops (a warm check's cost)
                lease = leases.get(limits[0].key)
                if lease is not None and lease.tokens > 0 and now < lease.deadline:
                    lease.tokens -= 1
                    return ADMITTED
            else:
                for applied in limits:
                    lease = leases.get(applied.key)
                    if lease is None or lease.tokens <= 0 or now >= lease.deadline:
                        break
                else:
                    for applied in limits:
                        leases[applied.key].tokens -= 1
                    return ADMITTED
        return self._admit_cold(limits, now)

    def admit_local(self, limits: Sequence[AppliedLimit], now: float) -> Decision | None:
        """admit without a store call: ADMITTED with tokens in hand, Refused for a window known
        to be spent, the outage's answer while the store is left alone; None when only the
        store can say (an event loop then asks `admit` in a thread)."""
        decision = self._spend(limits, now)
        if decision is not None:
            return decision
        with self._lock:
            missing = self._missing(limits, now)
            if isinstance(missing, Refused):
                return missing
            if missing is None:
                for applied in limits:
                    self._leases[applied.key].tokens -= 1
                return ADMITTED
            if now < self._down_until:
                return self._during_outage(limits, now)
        return None

    def _spend(self, limits: Sequence[AppliedLimit], now: float) -> Decision | None:
        """ADMITTED if every limit has a token in hand (one of each spent), else None."""
        leases = self._leases
        with self._lock:
            for applied in limits:
                lease = leases.get(applied.key)
                if lease is None or lease.tokens <= 0 or now >= lease.deadline:
                    return None
            for applied in limits:
                leases[applied.key].tokens -= 1
        return ADMITTED

    def _admit_cold(self, limits: Sequence[AppliedLimit], now: float) -> Decision:
        """Lease what is missing (one take per limit, outside the lock), then spend or refuse."""
        while True:
            with self._lock:
                missing = self._missing(limits, now)
                if isinstance(missing, Refused):
                    return missing
                if missing is None:
                    for applied in limits:
                        self._leases[applied.key].tokens -= 1
                    return ADMITTED
                if now < self._down_until:
                    return self._during_outage(limits, now)
                known_boot = self._boot
                self.store_calls += 1
            limit = missing.limit
            try:
                grant = self._store.take(
                    missing.key, limit.count, limit.seconds, lease_size(limit.count, self._lease),
                    known_boot,
                )  # fmt: skip
            except StoreUnavailableError:
                with self._lock:
                    self.store_failures += 1
                    self._down_until = now + self._outage.retry_seconds
                    return self._during_outage(limits, now)
            with self._lock:
                self._merge(missing.key, grant, now)

    def _missing(self, limits: Sequence[AppliedLimit], now: float) -> AppliedLimit | Refused | None:
        """Under the lock: the first limit with no tokens in hand (None if all have some), or a
        Refused when one's window is known to be spent (checked before any store call)."""
        missing: AppliedLimit | None = None
        for applied in limits:
            lease = self._leases.get(applied.key)
            if lease is None:
                lease = self._leases[applied.key] = _Lease()
            if now >= lease.deadline:
                lease.tokens, lease.exhausted = 0, False
            if lease.tokens > 0:
                continue
            if lease.exhausted:
                return Refused(lease.deadline - now, applied)
            if missing is None:
                missing = applied
        return missing

    def _merge(self, key: str, grant: Grant, sent: float) -> None:
        """Under the lock: add a grant to the key's lease.

        The tokens may be spent until sent + (window_end - store_now) on the monotonic clock: the
        store read its now after `sent`, so that moment is never after the store's window end.
        A grant of an older window than the lease's (a slow answer overtaken) is dropped.
        """
        self._boot = grant.boot
        lease = self._leases.setdefault(key, _Lease())
        deadline = sent + (grant.window_end - grant.store_now)
        if grant.window_end > lease.window_end or sent >= lease.deadline:
            lease.window_end, lease.tokens, lease.deadline = grant.window_end, 0, deadline
            lease.exhausted = False
        elif grant.window_end < lease.window_end:
            return
        lease.tokens += grant.granted
        lease.deadline = max(lease.deadline, deadline)
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
        for applied in limits:
            lease = self._leases[applied.key]
            if lease.tokens > 0 and now < lease.deadline:
                continue
            limit = applied.limit
            window, used = self._local.get(applied.key, (-1, 0))
            if window != window_of(moment, limit.seconds):
                used = 0
            if used >= limit.count // share:
                end = (window_of(moment, limit.seconds) + 1) * limit.seconds
                return Refused(end - moment, applied)
        for applied in limits:
            lease = self._leases[applied.key]
            if lease.tokens > 0 and now < lease.deadline:
                lease.tokens -= 1
                continue
            window = window_of(moment, applied.limit.seconds)
            known, used = self._local.get(applied.key, (-1, 0))
            self._local[applied.key] = (window, used + 1 if known == window else 1)
        return ADMITTED

    def _after_fork(self) -> None:
        """In a forked child: the parent's leases and connections stay the parent's."""
        self._lock = threading.Lock()
        self._leases = {}
        self._local = {}
        self._down_until = float("-inf")
        self._store.forget_connections()
