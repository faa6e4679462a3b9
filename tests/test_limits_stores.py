"""Each store of counts keeps the LimitStore contract: Redis, PostgreSQL and SQLite, real ones."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from apikey_tui.db.engine import ensure_schema, make_engine
from apikey_tui.errors import StoreUnavailableError
from apikey_tui.limits import AppliedLimit, Limit, Limiter, Outage, Unavailable
from apikey_tui.limits.port import LimitStore
from apikey_tui.limits.redis_store import RedisLimitStore
from apikey_tui.limits.sql_store import SqlLimitStore
from tests.conftest import FakeClock
from tests.redis_server import RedisServer
from tests.throwaway_postgres import free_port


class Subject:
    """A store under test and the one way it loses its counts (as its crash would)."""

    def __init__(self, store: LimitStore, lose: object, turn: object) -> None:
        self.store = store
        self.lose = lose  # () -> None
        self.turn = turn  # () -> None: wait (or move the clock) until the next 1 s window


@pytest.fixture(params=["redis", "postgresql", "sqlite"])
def subject(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Subject]:
    """A fresh store of each kind, with its loss and its turn of a 1 s window."""

    def wait_turn() -> None:
        time.sleep(1 - time.time() % 1 + 0.01)

    if request.param == "redis":
        server = RedisServer()
        server.start()

        def restart() -> None:  # kill -9 and start again: no persistence, every count is gone
            server.kill()
            server.start()

        try:
            yield Subject(RedisLimitStore(server.url), restart, wait_turn)
        finally:
            server.cleanup()
        return
    url = request.getfixturevalue("postgres_url" if request.param == "postgresql" else "sqlite_url")
    engine = make_engine(url)
    ensure_schema(engine)

    def empty() -> None:  # what PostgreSQL's crash recovery does to UNLOGGED tables
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM apikey_tui_limit_count"))
            conn.execute(text("DELETE FROM apikey_tui_limit_boot"))

    def move_on() -> None:
        clock.advance(timedelta(seconds=1))

    postgres = request.param == "postgresql"
    try:
        yield Subject(SqlLimitStore(engine, clock=clock), empty, wait_turn if postgres else move_on)
    finally:
        engine.dispose()


def test_a_take_grants_what_is_left_and_never_more(subject: Subject) -> None:
    """Takes of 3 under a limit of 5 get 3, 2, then 0, in a window the store's clock places."""
    store = subject.store
    grants = [store.take("key:a:3600", 5, 3600, 3, "") for _ in range(3)]
    assert [g.granted for g in grants] == [0 + 3, 2, 0]
    first = grants[0]
    assert 0 < first.window_end - first.store_now <= 3600 and first.window_end % 3600 == 0
    assert len({g.boot for g in grants}) == 1 and grants[0].boot
    assert store.take("key:b:3600", 5, 3600, 9, "").granted == 5  # another key, its own count


def test_a_store_that_lost_its_counts_grants_nothing_until_the_window_turns(
    subject: Subject,
) -> None:
    """After the counts are lost (Redis restarted without persistence; PostgreSQL's crash
    empties UNLOGGED tables), a process that knew the old boot gets 0 in the running window,
    and so does everyone after it; the next window grants again."""
    store = subject.store
    before = store.take("key:a:1", 1_000_000, 1, 5, "")
    assert before.granted == 5
    subject.lose()  # type: ignore[operator]
    after = store.take("key:a:1", 1_000_000, 1, 5, before.boot)
    if after.window_end == before.window_end:
        assert after.granted == 0 and after.boot != before.boot
        assert store.take("key:a:1", 1_000_000, 1, 5, "").granted == 0
    # Else the turn came between (a loaded machine): the window running when the loss was
    # noticed began before it, so it grants nothing either; the next one grants again.
    assert after.granted == 0
    subject.turn()  # type: ignore[operator]
    later = store.take("key:a:1", 1_000_000, 1, 5, before.boot)
    assert later.granted == 5 and later.window_end > before.window_end


def test_a_brand_new_store_starts_fresh(subject: Subject) -> None:
    """No process knew a boot: the first take makes the marker and grants at once."""
    assert subject.store.take("key:a:60", 10, 60, 4, "").granted == 4


def test_an_unreachable_redis_is_one_line_and_fail_closed_is_unavailable() -> None:
    """Connection refused: StoreUnavailableError of one line naming the masked URL; the
    limiter answers Unavailable (fail-closed is the default)."""
    url = f"redis://:s3cret@127.0.0.1:{free_port()}/0"
    store = RedisLimitStore(url)
    with pytest.raises(StoreUnavailableError) as raised:
        store.take("key:a:1", 10, 1, 1, "")
    message = str(raised.value)
    assert "\n" not in message and "s3cret" not in message and "127.0.0.1" in message
    limiter = Limiter(store, outage=Outage(retry_seconds=1.0))
    applied = (AppliedLimit("key:a", Limit(10, 1)),)
    assert isinstance(limiter.admit(applied, time.monotonic()), Unavailable)


@pytest.mark.parametrize(
    ("options", "warned"),
    [
        (("--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"), True),
        (("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"), True),
        (("--maxmemory", "64mb", "--maxmemory-policy", "noeviction"), False),
        (("--maxmemory-policy", "allkeys-lru"), False),  # no memory bound: nothing is evicted
    ],
)
def test_a_redis_that_may_evict_counts_is_warned_about_once(
    options: tuple[str, ...], warned: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis with a memory bound and an eviction policy may drop a count mid-window (the
    limit would admit N again): one warning naming the policy when the store first answers."""
    server = RedisServer(*options)
    server.start()
    try:
        store = RedisLimitStore(server.url)
        with caplog.at_level("WARNING", logger="apikey_tui.limits"):
            for _ in range(3):
                store.take("key:a:60", 10, 60, 1, "")
        lines = [r.getMessage() for r in caplog.records if "evict" in r.getMessage()]
        assert len(lines) == (1 if warned else 0)
        if warned:
            assert options[-1] in lines[0] and "noeviction" in lines[0]
    finally:
        server.cleanup()


def test_the_counts_on_postgresql_are_unlogged(postgres_url: str) -> None:
    """Both limits tables are UNLOGGED on PostgreSQL: no WAL per lease (a crash empties both)."""
    engine = make_engine(postgres_url)
    ensure_schema(engine)
    try:
        with engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT relname, relpersistence FROM pg_class WHERE relname IN "
                    "('apikey_tui_limit_count', 'apikey_tui_limit_boot') "
                    "AND relnamespace = current_schema()::regnamespace ORDER BY relname"
                )
            ).all()
    finally:
        engine.dispose()
    assert found == [("apikey_tui_limit_boot", "u"), ("apikey_tui_limit_count", "u")]
