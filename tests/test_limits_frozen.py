"""A limited key's check when its store of counts misbehaves (frozen, or failing in a way no one
foresaw): 503, never a hang, a 500 or a pass."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from apikey_tui.errors import AuthError, StoreUnavailableError, VerifierUnavailableError
from apikey_tui.limits import parse_limit
from apikey_tui.limits.redis_store import RedisLimitStore
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP
from tests.redis_server import RedisServer
from tests.test_verifier import header
from tests.throwaway_postgres import ThrowawayPostgres


@pytest.mark.slow
def test_a_sync_check_needing_a_lease_from_a_frozen_postgres_answers_503(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """A sync check (WSGI, Django) whose lease is spent asks a frozen key database for a new
    one under the check's deadline: 503 within check_timeout, never a request that hangs."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    key = store.create_key("alice", "metered", ["project"], limits=[parse_limit("1000/m")])
    store.close()
    # A long bound: the cached key stays trusted while frozen (documented), so only the
    # limit's store call is left to meet the frozen server.
    checker = Verifier.from_url(
        throwaway_postgres.url, hasher=CHEAP, revocation_bound=60, check_timeout=1
    )
    checker.start()
    for _ in range(3):
        checker.verify(header(key.plaintext), ["project"])
    outcomes: list[int] = []

    def check() -> None:
        for _ in range(20):  # past the 16 tokens of a lease: a take is due
            try:
                checker.verify(header(key.plaintext), ["project"])
                status = 200
            except AuthError as error:
                status = error.status
            outcomes.append(status)

    throwaway_postgres.freeze()
    try:
        worker = threading.Thread(target=check, daemon=True)
        worker.start()
        # A hang detector, not a timing assertion: each check waits at most check_timeout
        # for a read and as long for a take (with push found down under load, every check
        # may wait for the change log's read first), so 20 of them end well within this.
        worker.join(timeout=90)
        assert not worker.is_alive(), f"a check hung after {len(outcomes)} answers"
    finally:
        throwaway_postgres.thaw()
    assert set(outcomes) <= {200, 503}
    assert 503 in outcomes
    checker.close()


def test_a_store_failing_unforeseen_is_503_in_the_sync_and_the_async_check(
    store: KeyStore, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of counts raising something no one foresaw (not its StoreUnavailableError) makes
    the check a 503, as anything unforeseen inside a check is: never a 500."""
    key = store.create_key("alice", "metered", ["project"], limits=[parse_limit("1000/m")])
    checker = Verifier.from_url(database_url, hasher=CHEAP)

    def broken(*_args: object) -> None:
        raise AttributeError("'str' object has no attribute 'decode'")

    monkeypatch.setattr(checker.restrictions.limiter._store, "take", broken)
    try:
        with pytest.raises(VerifierUnavailableError):
            checker.verify(header(key.plaintext), ["project"])
        with pytest.raises(VerifierUnavailableError):
            asyncio.run(checker.verify_async(header(key.plaintext), ["project"]))
    finally:
        checker.close()


@pytest.mark.slow
def test_a_redis_url_asking_for_decoded_replies_still_counts(
    store: KeyStore, database_url: str
) -> None:
    """`?decode_responses=true` on the limits URL (redis-py then replies with str) counts as
    without it: the key gets its N requests, then 429."""
    server = RedisServer()
    server.start()
    try:
        url = server.url + "?decode_responses=true"
        key = store.create_key("alice", "metered", ["project"], limits=[parse_limit("2/30d")])
        checker = Verifier.from_url(database_url, hasher=CHEAP, limits_url=url)
        statuses = []
        for _ in range(3):
            try:
                checker.verify(header(key.plaintext), ["project"])
                statuses.append(200)
            except AuthError as error:
                statuses.append(error.status)
        checker.close()
        assert statuses == [200, 200, 429]
    finally:
        server.cleanup()


def test_a_redis_url_cannot_lift_the_stores_timeouts() -> None:
    """`?socket_timeout=3600` on the limits URL (redis-py lets a URL's options override the
    client's) still fails a take on a frozen Redis within the store's own bound, not an hour."""
    server = RedisServer()
    server.start()
    try:
        url = server.url + "?socket_timeout=3600&socket_connect_timeout=3600"
        store = RedisLimitStore(url)
        store.take("key:a/b:60", 10, 60, 1, "")
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        outcome: list[object] = []

        def take() -> None:
            try:
                outcome.append(store.take("key:a/b:60", 10, 60, 1, ""))
            except StoreUnavailableError as error:
                outcome.append(error)

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        taker.join(30)  # a hang guard: the bound is 0.5 s, the URL's an hour
        server.process.send_signal(signal.SIGCONT)
        assert outcome and isinstance(outcome[0], StoreUnavailableError)
    finally:
        server.cleanup()
