"""Shared fixtures: one store per test on SQLite and on the real PostgreSQL, never mocked."""

from __future__ import annotations

import os
import select
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from apikey_tui.clock import system_clock
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import Actor, KeyStore
from apikey_tui.verifier import Verifier
from tests.throwaway_postgres import ThrowawayPostgres

# The machine's shared PostgreSQL (trust auth). Tests never fall back to skipping: if it is
# down, every PostgreSQL case fails loudly with the reason.
POSTGRES_URL = os.environ.get(
    "APIKEY_TUI_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
CHEAP = SecretHasher("cheapest")
ACTOR = Actor("admin-test", "192.0.2.7")


# The fake clock starts this far from the wall clock, so that a part reading the wall clock
# instead of the clock it was given is caught at once (the two disagree by years, not by the
# milliseconds a test takes). It is a span from today, never a calendar date: the suite means
# the same on any day, and under `faketime -f '+1095d'` too.
FAKE_CLOCK_OFFSET = timedelta(days=400)


class FakeClock:
    """The tests' one wall clock: stands still until a test moves it; pass it as `clock=`."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = (system_clock() + FAKE_CLOCK_OFFSET).replace(microsecond=0)
        self.start = self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, span: timedelta) -> None:
        """Move the clock forward (or, with a negative span, back) by span."""
        self.now += span

    def at(self, seconds: float) -> None:
        """Set the clock to `seconds` after its start."""
        self.now = self.start + timedelta(seconds=seconds)


# What CI runs a second time under `faketime -f '+1095d'` (pytest -m time_dependent), to prove
# the suite passes on any date: every test on the fake clock, and every test whose name says it
# is about expiry, grace, rotation, lifetimes or unused keys (those read the real clock).
_ABOUT_TIME = ("grace", "expir", "rotat", "lifetime", "policy", "unused", "clock")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the time-dependent tests (see _ABOUT_TIME)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "clock" in fixtures or any(word in item.name for word in _ABOUT_TIME):
            item.add_marker(pytest.mark.time_dependent)


@pytest.fixture
def clock() -> FakeClock:
    """A fake wall clock, 400 days from today, for the store, the verifier and the app alike."""
    return FakeClock()


# What the code reads from the environment of whoever runs the suite: a test must mean the same
# from a plain shell, a tmux pane over SSH or CI. (Inside tmux the reveal said "Not copied: tmux"
# and the tmux tests saw a nested pane.) Tests that need one of these set it themselves.
_CALLERS_SESSION = (
    "TMUX", "TMUX_PANE", "STY", "TERM_PROGRAM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR",
    "TEXTUAL", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "USER", "USERNAME", "LNAME",
)  # fmt: skip
TEST_LOGIN = "tester"  # the OS login every test runs as (LOGNAME: the owner and actor default)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test sees one fixed terminal and login, whatever the caller's session has."""
    for name in _CALLERS_SESSION:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):  # the caller's database URL or argon2 profile
        if name.startswith("APIKEY_TUI_") and name != "APIKEY_TUI_TEST_POSTGRES_URL":
            monkeypatch.delenv(name)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("LOGNAME", TEST_LOGIN)


def eventually(condition: Callable[[], bool], seconds: float = 15.0) -> bool:
    """Poll condition until it holds or the time is up (a hang guard, not a timing claim)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """Check once that the real PostgreSQL answers, and fail (never skip) when it does not."""
    try:
        with psycopg.connect(_libpq(POSTGRES_URL), connect_timeout=5, autocommit=True) as conn:
            # One pg_trgm per database: made here, in public, it outlives every test's schema.
            # Made by the first test store instead, it would live in that test's schema and
            # dropping the schema would drop every other schema's filter indexes with it.
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable: {exc}", pytrace=False)
    return POSTGRES_URL


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A PostgreSQL URL whose search_path is a fresh schema, dropped after the test."""
    with fresh_schema(postgres_server) as url:
        yield url


@contextmanager
def fresh_schema(postgres_server: str) -> Iterator[str]:
    """A URL of the server whose search_path is a new schema, dropped on leaving."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(postgres_server), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{postgres_server}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(_libpq(postgres_server), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL for a fresh SQLite file in the test's temporary folder."""
    return f"sqlite:///{tmp_path / 'keys.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """The same test once on SQLite and once on the real PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def clocked(database_url: str, clock: FakeClock) -> Iterator[tuple[KeyStore, Verifier]]:
    """A store and a verifier on one fresh database (both backends), both on the fake clock."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    checker = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    yield store, checker
    checker.close()
    store.close()


@pytest.fixture
def store(database_url: str) -> Iterator[KeyStore]:
    """A KeyStore on a fresh database with the cheapest argon2 profile (tests only)."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    yield key_store
    key_store.close()


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A private, running PostgreSQL server that the test may stop."""
    server = ThrowawayPostgres()
    server.start()
    yield server
    server.cleanup()


def every_fingerprint(store: KeyStore, page: int = 2) -> dict[str, str | None]:
    """Public id -> fingerprint of every key, read as the verifier's index reads them (paged)."""
    found: dict[str, str | None] = {}
    after = 0
    while True:
        after, pairs = store.fingerprint_page(after, page)
        found.update(pairs)
        if not pairs:
            return found


def readable(source: int | socket.socket, timeout: float) -> bool:
    """Whether source has data within timeout; poll, since select refuses descriptors past 1,023."""
    poller = select.poll()
    poller.register(source, select.POLLIN)
    return bool(poller.poll(timeout * 1000))
