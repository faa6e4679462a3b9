"""Tests of the Verifier on SQLite and the real PostgreSQL: scopes, cache, revocation, budget."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apikey_tui import keyformat
from apikey_tui.errors import (
    InsufficientScopeError,
    InvalidKeyError,
    MissingKeyError,
    VerifierUnavailableError,
)
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import CommitFreshness, PushFreshness
from tests.conftest import CHEAP, eventually
from tests.throwaway_postgres import ThrowawayPostgres


@dataclass(frozen=True)
class CountingHasher(SecretHasher):
    """The cheapest profile, counting how often argon2 verification runs."""

    calls: list[int] | None = None

    def verify(self, stored_hash: str, secret: str) -> bool:
        assert self.calls is not None
        self.calls.append(1)
        return super().verify(stored_hash, secret)


@dataclass(frozen=True)
class SlowHasher(CountingHasher):
    """Counts like CountingHasher, and takes 50 ms per check so that requests overlap."""

    def verify(self, stored_hash: str, secret: str) -> bool:
        time.sleep(0.05)
        return super().verify(stored_hash, secret)


@pytest.fixture
def counting() -> CountingHasher:
    return CountingHasher("cheapest", calls=[])


@pytest.fixture
def verifier(database_url: str, store: KeyStore, counting: CountingHasher) -> Iterator[Verifier]:
    """A verifier on the same database as `store`, asking the database at every check."""
    checker = Verifier.from_url(database_url, hasher=counting, revocation_bound=0)
    yield checker
    checker.close()


def header(key: str) -> str:
    return f"ApiKey {key}"


def test_valid_key_returns_the_caller(store: KeyStore, verifier: Verifier) -> None:
    """A valid key with the needed scopes returns owner, name, public id and scopes."""
    created = store.create_key("alice", "demo", ["project", "serving"])
    caller = verifier.verify(header(created.plaintext), ["serving", "project"])
    assert (caller.owner, caller.key_name, caller.public_id) == (
        "alice",
        "demo",
        created.info.public_id,
    )
    assert caller.scopes == {"project", "serving"}


def test_required_scopes_are_all_of(store: KeyStore, verifier: Verifier) -> None:
    """A key with only 'project' is refused for serving+project, naming the missing scope."""
    key = store.create_key("alice", "demo", ["project"]).plaintext
    assert verifier.verify(header(key), ["project"]).key_name == "demo"
    with pytest.raises(InsufficientScopeError) as info:
        verifier.verify(header(key), ["serving", "project"])
    assert info.value.missing == ["serving"] and info.value.status == 403
    assert info.value.problem()["missing_scopes"] == ["serving"]


def test_unknown_wrong_and_deleted_keys_get_one_identical_answer(
    store: KeyStore, verifier: Verifier
) -> None:
    """Unknown id, wrong secret and deleted key raise InvalidKeyError with identical bodies."""
    created = store.create_key("alice", "demo", ["project"])
    verifier.verify(header(created.plaintext), ["project"])
    parts = keyformat.parse(created.plaintext)
    _, unknown = keyformat.generate()
    _, wrong_secret = keyformat.generate(parts.public_id)
    answers = []
    for key in (unknown, wrong_secret):
        with pytest.raises(InvalidKeyError) as info:
            verifier.verify(header(key))
        answers.append((info.value.problem(), info.value.http_headers("api")))
    store.delete_key("alice", "demo")
    with pytest.raises(InvalidKeyError) as info:
        verifier.verify(header(created.plaintext))
    answers.append((info.value.problem(), info.value.http_headers("api")))
    assert answers[0] == answers[1] == answers[2]


def test_argon2_runs_once_per_key(
    store: KeyStore, database_url: str, counting: CountingHasher
) -> None:
    """A thousand checks of one key run argon2 once; a second key costs one more."""
    checker = Verifier.from_url(database_url, hasher=counting)
    first = store.create_key("alice", "one", ["project"]).plaintext
    second = store.create_key("alice", "two", ["project"]).plaintext
    for _ in range(1000):
        checker.verify(header(first), ["project"])
    checker.verify(header(second))
    assert counting.calls is not None and len(counting.calls) == 2
    assert checker.cache_size() == 2
    checker.close()


def test_concurrent_first_requests_run_argon2_once(store: KeyStore, database_url: str) -> None:
    """Eight threads presenting one new key at the same moment cost a single argon2 check."""
    slow = SlowHasher("cheapest", calls=[])
    checker = Verifier.from_url(database_url, hasher=slow, check_workers=8)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    with ThreadPoolExecutor(8) as pool:
        names = list(pool.map(lambda _: checker.verify(header(key)).key_name, range(8)))
    assert names == ["demo"] * 8
    assert slow.calls is not None and len(slow.calls) == 1
    checker.close()


def test_cache_holds_no_key_or_secret(store: KeyStore, verifier: Verifier) -> None:
    """Nothing the verifier keeps (entries, repr, attributes) contains the key or its secret."""
    key = store.create_key("alice", "demo", ["project"]).plaintext
    verifier.verify(header(key))
    secret = keyformat.parse(key).secret
    attributes = {name: getattr(verifier, name, None) for name in type(verifier).__slots__}
    kept = repr(attributes) + repr(list(verifier._entries.values()))
    assert secret[:16] not in kept and key not in kept


def test_delete_recreate_and_rescope_take_effect_at_the_next_check(
    store: KeyStore, verifier: Verifier
) -> None:
    """After re-scope, recreate and delete, the very next check sees the change."""
    old = store.create_key("alice", "demo", ["project", "serving"]).plaintext
    verifier.verify(header(old), ["serving"])
    store.set_key_scopes("alice", "demo", ["project"])
    with pytest.raises(InsufficientScopeError):
        verifier.verify(header(old), ["serving"])
    new = store.recreate_key("alice", "demo").plaintext
    with pytest.raises(InvalidKeyError):
        verifier.verify(header(old))
    assert verifier.verify(header(new)).key_name == "demo"
    store.delete_key("alice", "demo")
    with pytest.raises(InvalidKeyError):
        verifier.verify(header(new))


def test_postgres_cache_is_trusted_only_within_the_bound(
    postgres_url: str, counting: CountingHasher
) -> None:
    """With a 0.5 s bound, a deleted key is refused once the bound has passed, not before."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    checker = Verifier.from_url(postgres_url, hasher=counting, revocation_bound=0.5)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker.verify(header(key))
    store.delete_key("alice", "demo")
    time.sleep(0.6)
    with pytest.raises(InvalidKeyError):
        checker.verify(header(key))
    checker.close()
    store.close()


def test_wrong_secrets_buy_only_a_bounded_amount_of_argon2(
    store: KeyStore, database_url: str, counting: CountingHasher
) -> None:
    """200 wrong secrets for a real public id run argon2 at most burst + rate x elapsed times."""
    checker = Verifier.from_url(database_url, hasher=counting, failure_burst=5)
    created = store.create_key("alice", "demo", ["project"])
    start = time.monotonic()
    for _ in range(200):
        _, wrong = keyformat.generate(created.info.public_id)
        with pytest.raises(InvalidKeyError):
            checker.verify(header(wrong))
    elapsed = time.monotonic() - start
    assert counting.calls is not None and len(counting.calls) <= 5 + int(elapsed) + 1
    checker.close()


def test_old_hash_is_upgraded_on_the_next_successful_check(
    store: KeyStore, database_url: str
) -> None:
    """A key hashed with the test profile is rehashed with the real profile after one check."""
    created = store.create_key("alice", "demo", ["project"])
    checker = Verifier.from_url(database_url)  # the real profile
    checker.verify(header(created.plaintext))
    credential = store.credential(created.info.public_id)
    assert credential is not None and "$m=8,t=1,p=1$" in credential.secret_hash
    assert SecretHasher().verify(credential.secret_hash, keyformat.parse(created.plaintext).secret)
    checker.close()


def test_last_used_is_recorded_off_the_request_path(store: KeyStore, verifier: Verifier) -> None:
    """A check marks the key used once per minute; the write happens at flush, not per request."""
    key = store.create_key("alice", "demo", ["project"]).plaintext
    verifier.verify(header(key))
    verifier.verify(header(key))
    assert store.get_key("alice", "demo").last_used_at is None  # nothing written yet
    assert len(verifier._last_used.pending) == 1
    verifier.flush()
    assert store.get_key("alice", "demo").last_used_at is not None
    verifier.verify(header(key))
    assert verifier._last_used.pending == {}  # within the minute: no new write queued


def test_verify_async_gives_the_same_answers(store: KeyStore, verifier: Verifier) -> None:
    """The async entry point accepts valid keys and raises the same typed errors."""
    key = store.create_key("alice", "demo", ["project"]).plaintext

    async def scenario() -> None:
        assert (await verifier.verify_async(header(key), ["project"])).key_name == "demo"
        assert (await verifier.verify_async(header(key), ["project"])).key_name == "demo"
        with pytest.raises(MissingKeyError):
            await verifier.verify_async(None)
        with pytest.raises(InsufficientScopeError):
            await verifier.verify_async(header(key), ["serving"])

    asyncio.run(scenario())


def test_database_down_is_503_never_a_pass(throwaway_postgres: ThrowawayPostgres) -> None:
    """With the database stopped, even a key checked before is refused with 503."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(throwaway_postgres.url, hasher=CHEAP, revocation_bound=0)
    checker.verify(header(key))
    store.close()
    throwaway_postgres.stop()
    with pytest.raises(VerifierUnavailableError) as info:
        checker.verify(header(key))
    assert info.value.status == 503 and info.value.challenge("api") is None
    checker.close()


def test_missing_or_empty_sqlite_database_is_503(tmp_path: Path) -> None:
    """A missing file (never created by the service) or one without tables answers 503."""
    _, key = keyformat.generate()
    sqlite3.connect(tmp_path / "empty.db").close()
    for name in ("missing.db", "empty.db"):
        checker = Verifier.from_url(f"sqlite:///{tmp_path / name}")
        with pytest.raises(VerifierUnavailableError):
            checker.verify(header(key))
        checker.close()
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("change", ["removed", "replaced"])
def test_a_sqlite_file_removed_or_replaced_under_the_service_is_503(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key checked (and cached) before the database file was removed, or replaced by another
    database, is refused with 503 afterwards: the old file's connections are never served."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP)
    created = store.create_key("alice", "ci", ["project"])
    store.close()
    monkeypatch.setattr(CommitFreshness, "PLACE_CHECK", 0.0)  # look at every check
    checker = Verifier.from_url(url, hasher=CHEAP)
    try:
        assert checker.verify(header(created.plaintext)).key_name == "ci"
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"keys.db{suffix}").unlink(missing_ok=True)
        if change == "replaced":
            other = KeyStore.open(url, hasher=CHEAP)
            other.create_key("bob", "other", ["project"])
            other.close()
        with pytest.raises(VerifierUnavailableError):
            checker.verify(header(created.plaintext))
    finally:
        checker.close()


def _child_checks(url: str, key: str, done: Any) -> None:
    checker = _SHARED[0]
    caller = checker.verify(header(key))
    checker.flush()
    done.put((caller.key_name, checker._last_used.running))


_SHARED: list[Verifier] = []


def test_a_forked_worker_gets_its_own_threads_and_connections(sqlite_url: str) -> None:
    """A verifier used before a fork still checks keys and records use in the forked child."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    checker.verify(header(key))  # the parent starts its writer thread and opens its watch
    _SHARED[:] = [checker]
    context = multiprocessing.get_context("fork")
    done = context.Queue()
    child = context.Process(target=_child_checks, args=(sqlite_url, key, done))
    child.start()
    name, writer_ok = done.get(timeout=30)
    child.join(timeout=30)
    assert (name, writer_ok, child.exitcode) == ("demo", True, 0)
    checker.close()
    store.close()


def test_a_forked_child_leaves_its_parents_kept_connections_open(postgres_url: str) -> None:
    """A child forked beside a started verifier (multiprocessing, a preloading master) never
    closes the parent's kept PostgreSQL connections: the parent's next read needs no retry."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP)
    checker.start()  # reads kept open: checked out of the pool for good
    # A pool full of idle connections (any busy moment leaves it so): a connection handed back
    # to it then has no room and is closed, in the process that hands it back.
    idle = [checker._engine.connect() for _ in range(5)]  # QueuePool's pool_size
    for connection in idle:
        connection.close()
    pid = os.fork()
    if pid == 0:  # the child does nothing: only what the fork hooks do runs
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    try:
        assert checker.verify(header(key)).key_name == "demo"
        assert checker.stats.database_errors == 0
    finally:
        checker.close()
        store.close()


def test_a_closed_verifier_is_freed_the_first_of_its_process_too(sqlite_url: str) -> None:
    """A verifier closed and dropped is garbage collected with its caches and key index, also
    the process's first on SQLite (whose dialect the reads' compiled statements keep)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    store.close()
    code = (
        "import gc, sys, weakref\n"
        "from apikey_tui.hashing import SecretHasher\n"
        "from apikey_tui.verifier import Verifier\n"
        "def used():\n"
        "    checker = Verifier.from_url(sys.argv[1], hasher=SecretHasher('cheapest'))\n"
        "    checker.start()\n"
        "    checker.verify('ApiKey ' + sys.argv[2])\n"
        "    checker.close()\n"
        "    return weakref.ref(checker)\n"
        "freed = [used(), used()]\n"
        "gc.collect()\n"
        "print([ref() is None for ref in freed])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, sqlite_url, key],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[True, True]", result.stderr


def test_a_verifier_used_after_close_is_still_freed(database_url: str) -> None:
    """A verifier that reads a key after close() (a request still in flight, an app whose
    lifespan ran twice) and is then dropped is garbage collected, with the connection it kept:
    the pool's listeners held it, and SQLAlchemy holds a pool while a connection is out."""
    import gc
    import warnings
    import weakref

    store = KeyStore.open(database_url, hasher=CHEAP)
    first, second = (store.create_key("alice", name, ["project"]).plaintext for name in "ab")
    store.close()
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    checker.verify(header(first))
    checker.close()
    assert checker.verify(header(second)).key_name == "b"  # read on a connection kept anew
    freed = weakref.ref(checker)
    del checker
    with warnings.catch_warnings():  # psycopg's: a connection freed unclosed (what is tested)
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        gc.collect()  # the pool the verifier held, freed with it, and its connection
    assert freed() is None


def test_a_verifier_used_after_close_then_dropped_ends_the_threads_that_use_started(
    postgres_url: str,
) -> None:
    """A verifier used after close() (a request still in flight, an app whose lifespan ran
    twice) starts threads again (on PostgreSQL a check runs in the gate's); dropped then, it is
    closed all the same: close() detached its finalizer, and they ran for the process's life."""
    database_url = postgres_url
    import gc
    import threading

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    other = store.create_key("alice", "other", ["project"]).plaintext
    checker = Verifier.from_url(database_url, hasher=CHEAP, flush_interval=3600)
    checker.verify(header(key))
    checker.close()
    before = set(threading.enumerate())
    # A key it never checked: a cold check, in a gate thread (the first key's cached answer
    # could be trusted for the revocation bound, and then no thread starts).
    checker.verify(header(other))
    started = {t for t in threading.enumerate() if t.name.startswith("apikey-tui")} - before
    assert started
    del checker
    gc.collect()
    assert eventually(lambda: not any(t.is_alive() for t in started), seconds=15)
    store.close()


def test_a_verifier_on_the_callers_engine_dropped_leaves_that_engine_working() -> None:
    """A verifier built on the caller's engine (`Verifier(engine)`, shared with a store) and
    dropped without close() ends its threads but leaves the engine to its owner: its finalizer
    disposed of it, which on an in-memory SQLite database dropped the store's tables."""
    import gc
    import threading

    store = KeyStore.open("sqlite://", hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier(store.engine, hasher=CHEAP)
    assert checker.verify(header(key)).key_name == "demo"
    del checker
    gc.collect()
    assert eventually(
        lambda: not any(t.name == "apikey-tui-close" for t in threading.enumerate()), seconds=15
    )
    assert store.get_key("alice", "demo").name == "demo"
    store.close()


def test_a_verifier_dropped_without_close_ends_its_threads_and_writes_what_it_noted(
    database_url: str,
) -> None:
    """A verifier dropped without close() (an app made per test, a lifespan that never ran its
    end) ends its threads (last-used, usage, the PostgreSQL listener) and writes the use it
    noted: they held its parts, and ran, with the connections they kept, for the process's life."""
    import gc
    import threading

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    before = set(threading.enumerate())
    checker = Verifier.from_url(database_url, hasher=CHEAP, flush_interval=3600)
    checker.verify(header(key))  # notes the use; nothing writes it for an hour
    started = {t for t in threading.enumerate() if t.name.startswith("apikey-tui")} - before
    assert {"apikey-tui-last-used", "apikey-tui-usage"} <= {t.name for t in started}
    del checker
    gc.collect()
    assert eventually(lambda: not any(t.is_alive() for t in started), seconds=15)
    assert store.get_key("alice", "demo").last_used_at is not None
    store.close()


def test_a_verifier_dropped_just_before_the_process_exits_writes_what_it_noted(
    database_url: str,
) -> None:
    """A verifier dropped without close() and collected as the process ends (a script's main()
    returning) still writes the use it noted and closes its connections, quietly: its closing
    thread was a daemon, killed at exit mid-close (the use lost, a connection left open)."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    code = (
        "import gc, sys\n"
        "from apikey_tui.verifier import Verifier\n"
        "from tests.conftest import CHEAP\n"
        "def main() -> None:\n"
        "    checker = Verifier.from_url(sys.argv[1], hasher=CHEAP, flush_interval=3600)\n"
        "    checker.verify(sys.argv[2])\n"
        "main()\n"
        "gc.collect()  # the collector's next run, as the process ends\n"
    )
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-c", code, database_url, header(key)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stderr == ""
    assert store.get_key("alice", "demo").last_used_at is not None
    store.close()


def test_importing_the_verifier_never_loads_textual_or_rich() -> None:
    """A service importing the verifier and its adapters pays nothing for the terminal UI."""
    code = (
        "import sys, apikey_tui.verifier, apikey_tui.integrations.asgi, "
        "apikey_tui.integrations.wsgi, apikey_tui.store, apikey_tui.cli\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich'}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_cached_answers_only_for_a_verified_unchanged_key(
    store: KeyStore, database_url: str
) -> None:
    """cached() is None until the key was verified, the caller after, None again once changed."""
    checker = Verifier.from_url(database_url, hasher=CHEAP, revocation_bound=60)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    assert checker.cached(header(key)) is None
    checker.verify(header(key))
    freshness = checker._freshness
    if isinstance(freshness, PushFreshness):  # push coming up moves the generation once: wait
        deadline = time.monotonic() + 15
        while not freshness.listening and time.monotonic() < deadline:
            time.sleep(0.02)
        checker.verify(header(key))
    caller = checker.cached(header(key), ["project"])
    # Under xdist another test's commit on the same PostgreSQL server notifies the same channel
    # and moves the generation (dropping the entry, as any notice does): verify again then.
    for _ in range(5):
        if caller is not None:
            break
        checker.verify(header(key))
        caller = checker.cached(header(key), ["project"])
    assert caller is not None and caller.key_name == "demo"
    with pytest.raises(InsufficientScopeError):
        checker.cached(header(key), ["serving"])
    assert checker.cached(None) is None and checker.cached("ApiKey \ud800") is None
    assert checker.cached(f"Bearer {key}") is None
    checker.close()


def test_a_restart_pays_the_key_profile_once_per_key_after_the_upgrade(sqlite_url: str) -> None:
    """A key hashed with key-secret-v1 is upgraded to the default profile at its first check;
    a restarted verifier then runs argon2 once for it, on the 8 KiB hash."""
    store = KeyStore.open(sqlite_url, hasher=SecretHasher("key-secret-v1"))
    key = store.create_key("alice", "old", ["project"])
    store.close()
    for _ in range(2):  # the service, then the same service restarted
        verifier = Verifier.from_url(sqlite_url)
        try:
            assert verifier.verify(f"ApiKey {key.plaintext}").key_name == "old"
            assert verifier.verify(f"ApiKey {key.plaintext}").key_name == "old"
            assert verifier.stats.argon2 == 1
        finally:
            verifier.close()
    reader = KeyStore.open(sqlite_url)
    stored = reader.credential(key.info.public_id)
    reader.close()
    assert stored is not None and "$m=8,t=1,p=1$" in stored.secret_hash


def test_a_started_verifier_answers_its_first_request_without_connecting(
    database_url: str,
) -> None:
    """After start() (serve-auth's lifespan calls it), the first request opens no connection,
    checks no schema and reads no log position: it reads its key and nothing else of those."""
    from sqlalchemy import event

    from apikey_tui.db import VERIFIER_APPLICATION, make_engine

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "first", ["project"]).plaintext
    store.close()
    engine = make_engine(
        database_url, create=False, pre_ping=False, application_name=VERIFIER_APPLICATION
    )
    connects: list[object] = []
    statements: list[str] = []
    event.listen(engine, "connect", lambda *_: connects.append(1))
    event.listen(engine, "before_cursor_execute", lambda _c, _k, sql, *_: statements.append(sql))
    verifier = Verifier(engine, hasher=CHEAP)
    try:
        verifier.start()
        assert verifier.wait_index(10)
        connected, seen = len(connects), len(statements)
        assert verifier.verify(f"ApiKey {key}").key_name == "first"
        assert len(connects) == connected
        first = statements[seen:]
        assert not any("version" in sql or "max(apikey_tui_change.seq)" in sql for sql in first)
        assert sum("apikey_tui_key_scope" in sql for sql in first) == 1
    finally:
        verifier.close()


def test_closing_waits_for_a_check_still_running() -> None:
    """CheckGate.close() returns only once a running check has finished (up to the check
    timeout), so the connections it holds are back before Verifier.close() disposes of the
    engine; it returned at once, and a check still running leaked its connection."""
    from apikey_tui.verifier.gate import CheckGate

    gate = CheckGate(workers=2, timeout=30.0, max_pending=4)
    started, release, done, closed = (threading.Event() for _ in range(4))

    def work() -> str:
        started.set()
        release.wait(30)
        done.set()
        return "checked"

    future = gate.submit("k", work)
    assert started.wait(30)

    def close() -> None:
        gate.close()
        closed.set()

    closer = threading.Thread(target=close)
    closer.start()
    assert not closed.wait(0.5)  # still waiting for the check
    release.set()
    closer.join(30)
    assert closed.is_set() and done.is_set() and future.result() == "checked"


def test_check_threads_left_idle_end_and_hold_no_work() -> None:
    """A check thread holds no finished work and ends once idle, so checks submitted after
    close() (requests still in flight, a verifier dropped unclosed) leave no thread for good;
    a thread that takes a stop meant for an older one keeps working."""
    import gc
    import weakref

    from apikey_tui.verifier.gate import CheckGate

    class Work:
        def __call__(self) -> str:
            return "checked"

    gate = CheckGate(workers=2, timeout=30.0, max_pending=4, idle=0.05)
    work = Work()
    assert gate.wait(gate.submit("k", work), time.monotonic() + 30) == "checked"
    held = weakref.ref(work)
    del work
    gc.collect()
    assert held() is None  # the idle thread kept no reference to what it ran
    deadline = time.monotonic() + 30
    while gate._threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gate._threads == []
    assert gate.wait(gate.submit("k", Work()), time.monotonic() + 30) == "checked"
    gate.close()
    # Used again after close: a stop left queued for a thread (one stuck past the timeout, say)
    # never ends the thread the next check starts, so that check is run.
    gate = CheckGate(workers=1, timeout=30.0, max_pending=4, idle=30.0)
    gate._queue.put(None)
    assert gate.wait(gate.submit("k", Work()), time.monotonic() + 30) == "checked"
    gate.close()


@pytest.mark.parametrize("fails", [False, True])
def test_an_inline_run_shares_its_outcome_with_those_who_join_it(fails: bool) -> None:
    """A run in the caller's thread (CheckGate inline) is joined by later submits of its key,
    sync and async: each gets its value (or its exception), the work runs once, and the key
    leaves the pending runs afterwards; alone, the caller gets it with no Future made."""
    import asyncio

    from apikey_tui.verifier.gate import CheckGate

    gate = CheckGate(workers=2, timeout=30.0, max_pending=4)
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def work() -> str:
        runs.append(1)
        started.set()
        assert release.wait(30)
        if fails:
            raise LookupError("the run failed")
        return "checked"

    outcome: list[object] = []

    def inline_caller() -> None:
        try:
            outcome.append(gate.wait(gate.submit("k", work, inline=True), time.monotonic() + 30))
        except LookupError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=inline_caller)
    caller.start()
    assert started.wait(30)
    joined = gate.submit("k", lambda: "never run", inline=True)
    joined_again = gate.submit("k", lambda: "never run")
    assert joined is joined_again  # one Future for every joiner
    release.set()
    caller.join(30)

    async def waited() -> object:
        try:
            return await gate.wait_async(joined, time.monotonic() + 30)
        except LookupError as exc:
            return exc

    if fails:
        assert isinstance(outcome[0], LookupError)
        assert asyncio.run(waited()) is outcome[0]
        with pytest.raises(LookupError):
            gate.wait(joined, time.monotonic() + 30)
    else:
        assert outcome == ["checked"] and asyncio.run(waited()) == "checked"
        assert gate.wait(joined, time.monotonic() + 30) == "checked"
    assert runs == [1] and not gate._pending and gate._inline == 0
    alone = gate.submit("k", lambda: "alone", inline=True)
    assert not isinstance(alone, Future) and gate.wait(alone, time.monotonic() + 1) == "alone"
    gate.close()
