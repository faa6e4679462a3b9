"""The limits' model and the lease protocol of Limiter, on a store whose clock the test moves."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from sqlalchemy import create_engine

from apikey_tui.config import LIMITS_PROCESSES_ENV
from apikey_tui.errors import InvalidInputError, StoreUnavailableError
from apikey_tui.limits import (
    ADMITTED,
    AppliedLimit,
    FailMode,
    Grant,
    Limit,
    Limiter,
    Outage,
    Refused,
    Unavailable,
    format_limit,
    lease_size,
    parse_fail_mode,
    parse_limit,
)
from apikey_tui.verifier.restrictions import Restrictions
from tests.conftest import FakeClock


class MemoryStore:
    """The LimitStore contract in memory: its own clock (`now`, Unix seconds), counted calls."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.used: Counter[tuple[str, int]] = Counter()
        self.calls = 0
        self.down = False

    def take(
        self, limit_key: str, n: int, window_seconds: int, want: int, known_boot: str
    ) -> Grant:
        self.calls += 1
        if self.down:
            raise StoreUnavailableError("limits store unavailable (test): connection refused")
        window = int(self.now // window_seconds)
        granted = max(0, min(want, n - self.used[limit_key, window]))
        self.used[limit_key, window] += granted
        return Grant(granted, float((window + 1) * window_seconds), self.now, "boot-1")

    def forget_connections(self) -> None:
        pass


@pytest.mark.parametrize(
    ("text", "count", "seconds", "written"),
    [
        ("10/s", 10, 1, "10/s"),
        ("40/10s", 40, 10, "40/10s"),
        ("600/1m", 600, 60, "600/m"),
        (" 100000/30d ", 100000, 30 * 86400, "100000/30d"),
        ("5/h", 5, 3600, "5/h"),
    ],
)
def test_a_limit_is_n_per_duration_and_a_bare_unit_means_one(
    text: str, count: int, seconds: int, written: str
) -> None:
    """N/DURATION parses with the CLI's durations (a bare unit is one) and is written back."""
    limit = parse_limit(text)
    assert (limit.count, limit.seconds, format_limit(limit)) == (count, seconds, written)
    assert parse_limit(format_limit(limit)) == limit


@pytest.mark.parametrize(
    "text",
    ["10", "/s", "0/s", "-1/s", "10/0s", "10/x", "10/1.5s", "1e3/s", "10/s/s", "9999999999/s"],
)
def test_a_malformed_limit_is_one_line(text: str) -> None:
    """A limit that is not N/DURATION (N from 1, a duration of at least 1s) is one clear line."""
    with pytest.raises(InvalidInputError) as raised:
        parse_limit(text)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("limit ")


def test_fail_mode_reads_closed_and_open_only() -> None:
    """The failure mode is closed or open, said plainly; anything else is one line."""
    assert (parse_fail_mode("Closed"), parse_fail_mode("open")) == (FailMode.CLOSED, FailMode.OPEN)
    with pytest.raises(InvalidInputError, match="closed or open"):
        parse_fail_mode("maybe")


def test_the_lease_is_capped_to_a_sixteenth_of_the_limit() -> None:
    """A lease is at most N // 16 (at least one): one process cannot hog a small limit."""
    assert [lease_size(n, 50) for n in (1, 16, 100, 2000)] == [1, 1, 6, 50]


def test_a_lease_in_hand_is_spent_without_a_round_trip() -> None:
    """One take brings L tokens; the next L - 1 admissions ask the store nothing."""
    store = MemoryStore()
    limiter = Limiter(store, lease=10)
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    assert [limiter.admit(applied, 0.0) for _ in range(25)] == [ADMITTED] * 25
    assert store.calls == 3


def test_an_exhausted_window_refuses_with_no_round_trip_until_it_turns() -> None:
    """After the store grants 0, every refusal is local until the window's end; then it asks."""
    store = MemoryStore(now=1_000_000.0)  # a window of 60 s ends 40 s later (1_000_020 + ...)
    # A clock that stands still: the store's answer is not moved on by the time the call took
    # (22 us on a loaded machine took the retry below out of its 20 us tolerance).
    limiter = Limiter(store, lease=10, monotonic=lambda: 5.0)
    applied = (AppliedLimit("key:a", Limit(20, 60)),)
    answers = [limiter.admit(applied, 5.0) for _ in range(1000)]
    assert answers[:20] == [ADMITTED] * 20
    refused = answers[20]
    assert isinstance(refused, Refused) and refused.limit is applied[0]
    assert refused.retry_after == pytest.approx(1_000_020 - 1_000_000)
    calls = store.calls
    assert all(isinstance(a, Refused) for a in answers[21:]) and store.calls == calls
    store.now = 1_000_020.0
    assert limiter.admit(applied, 25.0) is ADMITTED and store.calls == calls + 1


def test_a_lease_is_never_spent_after_the_stores_window_ends() -> None:
    """Tokens left at the store's turn are void: the store's clock (here 30 s ahead of the
    process's monotonic clock) decides, so the next request asks the store again."""
    store = MemoryStore(now=1_000_019.5)  # half a second before the turn at 1_000_020
    limiter = Limiter(store, lease=10)
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    assert limiter.admit(applied, 100.0) is ADMITTED  # 9 tokens left, until 100.5 locally
    assert limiter.admit(applied, 100.4) is ADMITTED and store.calls == 1
    store.now = 1_000_020.0
    assert limiter.admit(applied, 100.5) is ADMITTED and store.calls == 2
    assert store.used == {("key:a:60", 16666): 10, ("key:a:60", 16667): 10}


def test_a_request_refused_by_one_limit_consumes_nothing_from_the_others() -> None:
    """Under a key limit with room and an owner limit that is spent, the request is refused and
    the key limit keeps every token: later requests under it alone get all N."""
    store = MemoryStore()
    limiter = Limiter(store, lease=4)
    key = AppliedLimit("key:a", Limit(64, 60))
    owner = AppliedLimit("owner:alice", Limit(1, 60))
    assert limiter.admit((key, owner), 0.0) is ADMITTED
    for _ in range(10):
        refused = limiter.admit((key, owner), 0.0)
        assert isinstance(refused, Refused) and refused.limit is owner
    assert [limiter.admit((key,), 0.0) for _ in range(63)] == [ADMITTED] * 63
    assert isinstance(limiter.admit((key,), 0.0), Refused)


def test_an_exhausted_limit_refuses_before_any_other_is_leased() -> None:
    """A limit known to be spent refuses at once: no take for the other limits of the request."""
    store = MemoryStore()
    limiter = Limiter(store, lease=4)
    owner = AppliedLimit("owner:alice", Limit(1, 60))
    assert limiter.admit((owner,), 0.0) is ADMITTED
    assert isinstance(limiter.admit((owner,), 0.0), Refused)
    calls = store.calls
    for n in range(5):
        key = AppliedLimit(f"key:k{n}", Limit(64, 60))
        assert isinstance(limiter.admit((key, owner), 0.0), Refused)
    assert store.calls == calls


def test_fail_closed_answers_unavailable_and_leaves_the_store_alone_for_a_while() -> None:
    """The store down: tokens in hand are spent (they were granted); without them the answer
    is Unavailable, and the store is asked again only after the retry interval."""
    store = MemoryStore()
    limiter = Limiter(store, lease=4, outage=Outage(retry_seconds=2.0))
    applied = (AppliedLimit("key:a", Limit(64, 60)),)
    assert limiter.admit(applied, 0.0) is ADMITTED
    store.down = True
    assert [limiter.admit(applied, 0.0) for _ in range(3)] == [ADMITTED] * 3
    answers = [limiter.admit(applied, 0.5) for _ in range(100)]
    assert all(isinstance(a, Unavailable) for a in answers) and store.calls == 2
    assert answers[0] == Unavailable(2.0)
    store.down = False
    assert limiter.admit(applied, 2.6) is ADMITTED and store.calls == 3


def test_fail_open_admits_at_most_n_over_p_per_window_of_the_process_clock(
    clock: FakeClock,
) -> None:
    """fail-open with 4 processes declared: each admits at most N // 4 per window of its own
    wall clock while the store is down, and the allowance comes back when the window turns."""
    from datetime import timedelta

    store = MemoryStore()
    store.down = True
    outage = Outage(FailMode.OPEN, processes=4, retry_seconds=1.0)
    limiter = Limiter(store, lease=4, outage=outage, clock=clock)
    applied = (AppliedLimit("key:a", Limit(40, 60)),)
    clock.now = clock.now.replace(second=0, microsecond=0)
    answers = [limiter.admit(applied, float(n) / 1000) for n in range(100)]
    assert answers.count(ADMITTED) == 10
    refused = answers[10]
    assert isinstance(refused, Refused) and refused.retry_after == pytest.approx(60)
    clock.advance(timedelta(seconds=60))
    assert [limiter.admit(applied, 1.0 + n / 1000) for n in range(20)].count(ADMITTED) == 10


def test_a_forked_child_never_spends_its_parents_lease() -> None:
    """A forked child starts with no lease (it asks the store), so a lease is never spent twice."""
    store = MemoryStore()
    limiter = Limiter(store, lease=10)
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    assert limiter.admit(applied, 0.0) is ADMITTED and limiter.store_calls == 1
    pid = os.fork()
    if pid == 0:  # the child exits 0 only if it had to ask the store
        code = 0
        try:
            limiter.admit(applied, 0.0)
            code = 0 if limiter.store_calls == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert limiter.admit(applied, 0.0) is ADMITTED and limiter.store_calls == 1


def test_applied_limits_share_a_count_per_subject_and_window() -> None:
    """A changed N keeps the window's count (same store key); another window length does not."""
    first = AppliedLimit("key:a", Limit(10, 1))
    assert first.key == AppliedLimit("key:a", Limit(20, 1)).key == "key:a:1"
    assert AppliedLimit("key:a", Limit(10, 60)).key != first.key
    with pytest.raises(InvalidInputError):
        AppliedLimit("", Limit(1, 1))


@pytest.mark.parametrize(("key_n", "owner_n"), [(300, None), (300, 250), (200, 1000)])
def test_threads_spending_leases_without_the_lock_never_admit_more_than_n_in_a_window(
    key_n: int, owner_n: int | None
) -> None:
    """8 threads spend held leases lock-free (falling back to admit) while the store's window
    turns between their checks: per window at most N admitted, and no token is spent twice."""
    import sys
    import threading

    class LockedStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__(now=1_000_000.0)
            self.lock = threading.Lock()

        def take(self, limit_key: str, n: int, window_seconds: int, want: int, known: str) -> Grant:
            with self.lock:
                return super().take(limit_key, n, window_seconds, want, known)

    store = LockedStore()
    now = [0.0]  # the process's monotonic clock; the store's is 1_000_000 + it
    limiter = Limiter(store, lease=7, monotonic=lambda: now[0])
    key = AppliedLimit("key:a", Limit(key_n, 10))
    pool = owner_n is not None
    limits = (key, AppliedLimit("owner:o", Limit(owner_n, 10))) if owner_n else (key,)
    leases = limiter.leases(limits)
    # The clock moves only between checks (a check is dated by the clock it read): threads
    # enter a check unless the clock is about to move, which waits for those inside.
    turn = threading.Condition()
    inside = [0, False]  # checks under way, the clock waiting to move
    admitted: Counter[int] = Counter()
    done = threading.Event()

    def hammer() -> None:
        mine: Counter[int] = Counter()
        while not done.is_set():
            with turn:
                turn.wait_for(lambda: not inside[1])
                inside[0] += 1
            moment = now[0]  # constant until this check ends (see `turn`)
            if limiter.spend(leases, lambda: now[0]) or limiter.admit(limits, moment) is ADMITTED:
                mine[int((1_000_000 + moment) // 10)] += 1
            with turn:
                inside[0] -= 1
                turn.notify_all()
        with turn:
            admitted.update(mine)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch almost anywhere: the races happen
    try:
        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for step in range(1, 121):  # 12 windows of 10 s, in steps of 1 s
            done.wait(0.01)
            with turn:
                inside[1] = True
                turn.wait_for(lambda: inside[0] == 0)
                store.now = 1_000_000.0 + step
                now[0] = float(step)
                inside[1] = False
                turn.notify_all()
        done.set()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert admitted and max(admitted.values()) <= min(key_n, owner_n or key_n)
    for _key, window in store.used:  # each admission spent a token of every limit, once
        assert admitted[window] <= store.used[key.key, window]
        assert not pool or admitted[window] <= store.used["owner:o:10", window]


def test_a_held_lease_is_spent_without_a_round_trip_and_never_after_its_deadline() -> None:
    """spend takes a held token without the store, and a token whose deadline passed (the clock
    read after the take) is void: spend says no and admit asks the store for the new window."""
    store = MemoryStore(now=1_000_019.5)  # half a second before the turn at 1_000_020
    limiter = Limiter(store, lease=10)
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    leases = limiter.leases(applied)
    assert not limiter.spend(leases, lambda: 100.0) and store.calls == 0
    assert limiter.admit(applied, 100.0) is ADMITTED  # 9 tokens left, until 100.5
    assert [limiter.spend(leases, lambda: 100.4) for _ in range(3)] == [True] * 3
    assert not limiter.spend(leases, lambda: 100.5) and store.calls == 1
    store.now = 1_000_020.0
    assert limiter.admit(applied, 100.5) is ADMITTED and store.calls == 2


def test_tokens_a_refused_spend_took_go_back_but_never_into_a_newer_window() -> None:
    """A spend refused by its second lease puts the first one's token back (all N are still
    admitted); a token whose lease was renewed for a new window meanwhile is dropped instead."""
    store = MemoryStore()
    limiter = Limiter(store, lease=4)
    key = AppliedLimit("key:a", Limit(64, 60))
    owner = AppliedLimit("owner:alice", Limit(1, 60))
    leases = limiter.leases((key, owner))
    assert limiter.admit((key, owner), 0.0) is ADMITTED  # the owner's one token is spent
    stale = leases[0].held  # what a spender held up mid-spend holds: tokens of the key's lease
    assert not any(limiter.spend(leases, lambda: 0.0) for _ in range(10))
    # The put-back drained them: a token is taken once, by that spender or by the lock.
    admitted = sum(stale[1]) + [limiter.admit((key,), 0.0) for _ in range(64)].count(ADMITTED)
    assert admitted == 63

    store = MemoryStore(now=1_000_019.0)
    limiter = Limiter(store, lease=2)
    pooled = AppliedLimit("owner:alice", Limit(1000, 60))
    key = AppliedLimit("key:a", Limit(32, 60))
    leases = limiter.leases((key, pooled))
    assert limiter.admit((key, pooled), 0.0) is ADMITTED  # one token of each left, until 1.0

    def late_clock() -> float:  # the window turns while the spend holds both tokens
        store.now = 1_000_020.0
        assert limiter.admit((key,), 1.0) is ADMITTED  # the key's lease of the new window
        return 1.0

    assert not limiter.spend(leases, late_clock)
    more = 0
    while limiter.admit((key,), 1.0) is ADMITTED:
        more += 1
    assert 1 + more == 32 == store.used[key.key, 16667]


def test_a_burst_that_finds_a_lease_spent_sends_one_take_not_one_each() -> None:
    """Eight threads that need a lease at once share the one take under way: one store call,
    and its lease admits them all (no take per request, no surplus leased and stranded)."""
    import threading

    class SlowStore(MemoryStore):
        """Holds each take until eight are under way or a second has passed."""

        def __init__(self) -> None:
            super().__init__()
            self.arrived = threading.Semaphore(0)
            self.under_way = 0
            self.lock = threading.Lock()

        def take(self, limit_key: str, n: int, window_seconds: int, want: int, known: str) -> Grant:
            with self.lock:
                self.under_way += 1
                if self.under_way == 8:
                    self.arrived.release(8)
            self.arrived.acquire(timeout=1.0)
            with self.lock:
                return super().take(limit_key, n, window_seconds, want, known)

    store = SlowStore()
    limiter = Limiter(store, lease=16)
    limits = (AppliedLimit("key:a", Limit(1000, 60)),)
    start = threading.Barrier(8)
    answers: list[object] = []

    def ask() -> None:
        start.wait()
        answers.append(limiter.admit(limits, 0.0))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [ADMITTED] * 8
    assert store.calls == 1


def test_a_grant_that_arrives_after_its_deadline_is_never_spent() -> None:
    """A take answered after its window's end (the store read its now 0.1 s before the turn,
    the answer took 0.3 s) brings void tokens: the request is admitted with a token of the new
    window, by the taker and by a thread that waited for its take alike."""
    import threading
    import time

    class LateStore(MemoryStore):
        """Answers each take 0.3 s after reading its now; the first one 0.1 s before a turn."""

        started = threading.Event()

        def take(self, limit_key: str, n: int, window_seconds: int, want: int, known: str) -> Grant:
            grant = super().take(limit_key, n, window_seconds, want, known)
            self.started.set()
            time.sleep(0.3)  # the answer is late: the store's window has turned meanwhile
            self.now = grant.window_end
            return grant

    store = LateStore(now=1_000_019.9)  # 0.1 s before the turn at 1_000_020
    limiter = Limiter(store, lease=10)
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    waiter: list[object] = []

    def wait_for_the_take() -> None:
        LateStore.started.wait()  # the taker's take is under way: this one waits for it
        waiter.append(limiter.admit(applied, time.monotonic()))

    thread = threading.Thread(target=wait_for_the_take)
    thread.start()
    assert limiter.admit(applied, time.monotonic()) is ADMITTED
    thread.join()
    assert waiter == [ADMITTED]
    # Both admissions spent tokens of the window that began at the turn, none of the other.
    assert store.used[applied[0].key, 16666] == 10 and store.used[applied[0].key, 16667] == 10
    assert sum(limiter.leases(applied)[0].held[1]) == 10 - 2


def test_a_store_that_fails_slowly_is_left_alone_for_the_retry_interval_after_the_failure() -> None:
    """A take that fails only after longer than the retry interval (SQLite's busy timeout of
    2 s, a connect timeout) leaves the store alone from its failure on: the thread that waited
    for it and the next request get the outage answer at once, not a take (and its wait) each."""
    import threading

    moment = [500.0]  # the limiter's monotonic clock, moved by the store's slow failure
    started, release = threading.Event(), threading.Event()

    class SlowFailure(MemoryStore):
        def take(self, limit_key: str, n: int, window_seconds: int, want: int, known: str) -> Grant:
            self.calls += 1
            started.set()
            release.wait(10)
            moment[0] += 5.0  # the busy timeout ran out
            raise StoreUnavailableError("limits store unavailable (test): database is locked")

    store = SlowFailure()
    limiter = Limiter(store, outage=Outage(retry_seconds=1.0), monotonic=lambda: moment[0])
    applied = (AppliedLimit("key:a", Limit(1000, 60)),)
    waited: list[object] = []

    def wait_for_the_take() -> None:
        started.wait(10)
        waited.append(limiter.admit(applied, moment[0]))

    thread = threading.Thread(target=wait_for_the_take)
    thread.start()
    threading.Timer(0.2, release.set).start()  # the waiter is (most likely) waiting by then
    first = limiter.admit(applied, moment[0])
    thread.join()
    assert isinstance(first, Unavailable) and first.retry_after == pytest.approx(1.0)
    assert isinstance(waited[0], Unavailable)
    assert isinstance(limiter.admit(applied, moment[0] + 0.5), Unavailable)
    assert store.calls == 1
    assert limiter.admit(applied, moment[0] + 1.0) is not None and store.calls == 2


def test_a_store_clock_that_steps_back_across_a_turn_costs_one_take_not_a_loop() -> None:
    """After the store's clock went back into the window before the lease's (a failover to a
    host whose clock is behind), a request takes once and spends that grant: the store's clock
    decides. It used to drop every such grant and take again until the clock caught up."""

    class CatchingUp(MemoryStore):
        def take(self, limit_key: str, n: int, window_seconds: int, want: int, known: str) -> Grant:
            if self.calls >= 20:  # a guard: the old loop ends once the clock has caught up
                self.now = 1_000_021.0
            return super().take(limit_key, n, window_seconds, want, known)

    store = CatchingUp(now=1_000_020.5)
    limiter = Limiter(store, lease=4)
    applied = (AppliedLimit("key:a", Limit(64, 1)),)
    assert [limiter.admit(applied, 100.0) for _ in range(4)] == [ADMITTED] * 4  # until 100.5
    store.now = 1_000_019.9  # the store's clock is back in the window that ended at 1_000_020
    assert limiter.admit(applied, 100.1) is ADMITTED and store.calls == 2


@pytest.mark.parametrize("text", ["²", "٣", "two", "-1"])
def test_a_process_count_that_is_no_whole_number_is_one_line(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """APIKEY_TUI_LIMITS_PROCESSES that Python's isdigit takes but int refuses is one line."""
    monkeypatch.setenv(LIMITS_PROCESSES_ENV, text)
    with pytest.raises(InvalidInputError, match=LIMITS_PROCESSES_ENV):
        Restrictions.build(create_engine("sqlite://"))
