"""Per-key invalidation from the change log, and a key index that never blocks a request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

from apikey_tui import keyformat
from apikey_tui.db import VERIFIER_APPLICATION, make_engine
from apikey_tui.errors import InvalidKeyError, VerifierUnavailableError
from apikey_tui.store import KeyStore, change_log
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, FakeClock

CREDENTIAL_READ = "apikey_tui_key_scope"  # only a key's own read joins its scopes
LOG_READ = "apikey_tui_change"


def _engine(url: str) -> Engine:
    return make_engine(url, create=False, pre_ping=False, application_name=VERIFIER_APPLICATION)


class Statements:
    """Counts (and can hold up) the statements a verifier's engine runs, by a word they contain."""

    def __init__(self, engine: Engine) -> None:
        self.seen: list[str] = []
        self.hold: Callable[[str], bool] | None = None  # those it picks wait for `release`
        self.held, self.release = threading.Event(), threading.Event()
        event.listen(engine, "before_cursor_execute", self._before)

    def _before(self, _conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        self.seen.append(statement)
        if self.hold is not None and self.hold(statement) and not self.release.is_set():
            self.held.set()
            assert self.release.wait(20)

    def count(self, word: str) -> int:
        return sum(word in statement for statement in self.seen)


def _index_read(statement: str) -> bool:
    """Whether a statement reads the whole key index (not one key, not the log)."""
    return (
        "fingerprint" in statement
        and CREDENTIAL_READ not in statement
        and LOG_READ not in (statement)
    )


@pytest.fixture
def checker(database_url: str) -> Iterator[tuple[Verifier, Statements]]:
    """A verifier on its own engine (push or commit watch), with its statements counted."""
    engine = _engine(database_url)
    statements = Statements(engine)
    verifier = Verifier(engine, hasher=CHEAP, revocation_bound=0.2)
    yield verifier, statements
    statements.release.set()
    verifier.close()


def _settle(database_url: str) -> None:
    """Long enough for PostgreSQL's push (or its time bound) to move the generation."""
    if database_url.startswith("postgresql"):
        time.sleep(0.5)


def _cached(verifier: Verifier, keys: list[str], database_url: str) -> None:
    """Verify the keys, then again once the log holding their creation has been read.

    On a loaded machine a key's creation may reach the verifier (push) after its first check
    cached it; the log read then rightly re-reads it once. The second pass absorbs that, so
    what a test counts afterwards is caused by its own change alone.
    """
    for _ in range(2):
        for key in keys:
            verifier.verify(f"ApiKey {key}")
        _settle(database_url)


def test_an_unrelated_commit_rereads_no_cached_key(
    store: KeyStore, database_url: str, checker: tuple[Verifier, Statements]
) -> None:
    """After an admin edits a scope's description, 30 cached keys answer with no key read."""
    verifier, statements = checker
    keys = [store.create_key("alice", f"k{i}", ["project"]).plaintext for i in range(30)]
    _cached(verifier, keys, database_url)
    before = statements.count(CREDENTIAL_READ)
    store.describe_scope("project", "an unrelated edit")
    _settle(database_url)
    for key in keys:
        assert verifier.verify(f"ApiKey {key}", ["project"]).key_name.startswith("k")
    assert statements.count(CREDENTIAL_READ) == before


def test_a_changed_key_alone_is_reread(
    store: KeyStore, database_url: str, checker: tuple[Verifier, Statements]
) -> None:
    """Rescoping one of 10 cached keys re-reads that key only, and the new scopes apply."""
    verifier, statements = checker
    keys = [store.create_key("alice", f"k{i}", ["project"]).plaintext for i in range(10)]
    _cached(verifier, keys, database_url)
    before = statements.count(CREDENTIAL_READ)
    store.set_key_scopes("alice", "k3", ["serving"])
    _settle(database_url)
    for key in keys:
        verifier.verify(f"ApiKey {key}")
    assert statements.count(CREDENTIAL_READ) == before + 1
    assert verifier.verify(f"ApiKey {keys[3]}").scopes == {"serving"}


def test_a_sqlite_reread_of_a_changed_key_is_two_statements_and_leaves_no_run_pending(
    sqlite_url: str,
) -> None:
    """On SQLite, each re-read of a cached key an admin just changed runs exactly the log read
    and the key's own read (no BEGIN, ROLLBACK or position read) and leaves no check pending."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    engine = _engine(sqlite_url)
    statements = Statements(engine)
    verifier = Verifier(engine, hasher=CHEAP)
    try:
        header = f"ApiKey {store.create_key('alice', 'k', ['project']).plaintext}"
        verifier.verify(header)
        for scopes in (["project", "serving"], ["project"], ["serving"]):
            store.set_key_scopes("alice", "k", scopes)
            seen = len(statements.seen)
            assert verifier.verify(header).scopes == set(scopes)
            ran = statements.seen[seen:]
            assert len(ran) == 2
            assert LOG_READ in ran[0] and CREDENTIAL_READ not in ran[0]
            assert CREDENTIAL_READ in ran[1]
            assert not verifier._gate._pending  # the inline runs were counted out
        assert verifier.stats.argon2 == 1
    finally:
        verifier.close()
        store.close()


def test_a_service_answers_its_first_request_while_the_index_loads(
    store: KeyStore, checker: tuple[Verifier, Statements]
) -> None:
    """With the full index read held up (as at 1M keys), the first request still gets its 200."""
    verifier, statements = checker
    key = store.create_key("alice", "first", ["project"]).plaintext
    wrong = keyformat.generate(keyformat.parse(key).public_id)[1]  # same id, another secret
    statements.hold = _index_read
    assert verifier.verify(f"ApiKey {key}").key_name == "first"
    with pytest.raises(InvalidKeyError):
        verifier.verify(f"ApiKey {wrong}")
    assert statements.held.wait(10)  # the index read was under way (and held) all along


def test_a_key_committed_during_a_log_read_is_accepted_at_its_first_check(
    store: KeyStore, database_url: str, checker: tuple[Verifier, Statements]
) -> None:
    """A key made while a log read that began before it runs is accepted at once, never 401."""
    verifier, statements = checker
    first = store.create_key("alice", "first", ["project"]).plaintext
    verifier.verify(f"ApiKey {first}")
    assert verifier.wait_index(10)
    store.describe_scope("project", "moves the generation")
    _settle(database_url)
    statements.hold = lambda statement: LOG_READ in statement
    with ThreadPoolExecutor(2) as pool:
        pool.submit(verifier.verify, f"ApiKey {first}")  # finds the cache stale: reads the log
        assert statements.held.wait(10)  # that read is under way, without...
        new = store.create_key("alice", "new", ["project"]).plaintext  # ...this key
        _settle(database_url)
        answer = pool.submit(verifier.verify, f"ApiKey {new}")
        time.sleep(0.2)  # the second request finds the cache stale and joins the read
        statements.release.set()
        assert answer.result(timeout=10).key_name == "new"


def test_a_reader_behind_the_pruned_log_still_refuses_a_deleted_key(
    database_url: str, clock: FakeClock
) -> None:
    """A verifier whose log position was pruned away drops its cache: a deleted key is 401."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock, revocation_bound=0.2)
    try:
        key = store.create_key("alice", "doomed", ["project"]).plaintext
        verifier.verify(f"ApiKey {key}")
        store.delete_key("alice", "doomed")
        clock.advance(timedelta(days=2))  # past the log's retention...
        store.create_key("alice", "later", ["project"])  # ...so this change prunes the delete
        with store.engine.connect() as conn:
            logged = {
                row[0] for row in conn.execute(text("SELECT public_id FROM apikey_tui_change"))
            }
        assert keyformat.parse(key).public_id not in logged
        _settle(database_url)
        with pytest.raises(InvalidKeyError):
            verifier.verify(f"ApiKey {key}")
    finally:
        verifier.close()
        store.close()


def test_every_change_logs_the_ids_it_touched_and_use_logs_nothing(store: KeyStore) -> None:
    """Create, rotate, disable, enable, expiry, rescope, delete append ids; last use does not."""

    def logged() -> list[str]:
        with store.engine.connect() as conn:
            rows = conn.execute(text("SELECT public_id FROM apikey_tui_change ORDER BY seq"))
            return [row[0] for row in rows]

    start = len(logged())
    created = store.create_key("alice", "ci", ["project"])
    first = created.info.public_id
    assert logged()[start:] == [first]
    store.record_use({first: store.clock()})
    assert logged()[start:] == [first]
    rotated = store.rotate_key("alice", "ci", grace=timedelta(hours=1)).info.public_id
    assert set(logged()[start + 1 :]) == {first, rotated}
    store.recreate_key("alice", "ci")  # ends the grace of `rotated`'s predecessor, replaces it
    mark = len(logged())
    store.disable_key("alice", "ci")
    store.enable_key("alice", "ci")
    store.set_key_scopes("alice", "ci", ["serving"])
    current = store.get_key("alice", "ci").public_id
    assert logged()[mark:] == [current] * 3
    store.delete_key("alice", "ci")
    assert logged()[-1] == current


def test_forged_ids_while_the_index_loads_buy_bounded_queries(
    store: KeyStore, database_url: str
) -> None:
    """300 forged ids while the index loads run at most the lookup budget's key reads."""
    engine = _engine(database_url)
    statements = Statements(engine)
    statements.hold = _index_read  # the index never finishes loading
    verifier = Verifier(engine, hasher=CHEAP, lookups_per_second=1, lookup_burst=20)
    store.create_key("alice", "real", ["project"])
    refused = unavailable = 0
    started = time.monotonic()
    try:
        for _ in range(300):
            try:
                verifier.verify(f"ApiKey {keyformat.generate()[1]}")
            except InvalidKeyError:
                refused += 1
            except VerifierUnavailableError:
                unavailable += 1
        budget = 20 + (time.monotonic() - started) * 1 + 1
        assert refused + unavailable == 300 and unavailable > 0
        assert statements.count(CREDENTIAL_READ) <= budget
    finally:
        statements.release.set()
        verifier.close()


def test_a_restart_under_traffic_of_valid_keys_answers_no_503(
    store: KeyStore, database_url: str
) -> None:
    """A fresh verifier whose index is still loading answers 120 distinct valid keys from 4
    threads with no 503, on a lookup budget of 20; forged ids alone then spend that budget."""
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(120)]
    engine = _engine(database_url)
    statements = Statements(engine)
    statements.hold = _index_read  # the index never finishes loading: every key is looked up
    verifier = Verifier(engine, hasher=CHEAP, lookups_per_second=0, lookup_burst=20)

    def answer(header: str) -> int:
        try:
            verifier.verify(header)
        except (InvalidKeyError, VerifierUnavailableError) as error:
            return error.status
        return 200

    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(answer, [f"ApiKey {key}" for key in keys]))
        assert answers.count(503) == 0 and answers.count(200) == 120
        forged = [answer(f"ApiKey {keyformat.generate()[1]}") for _ in range(30)]
        assert forged.count(401) == 20 and forged.count(503) == 10
    finally:
        statements.release.set()
        verifier.close()


def test_more_changes_than_one_read_takes_reads_as_falling_behind(
    store: KeyStore, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_CHANGES since the last read, the verifier starts over: a deleted key is 401."""
    monkeypatch.setattr(change_log, "MAX_CHANGES", 3)
    engine = _engine(database_url)
    statements = Statements(engine)
    verifier = Verifier(engine, hasher=CHEAP, revocation_bound=0.2)
    try:
        doomed = store.create_key("alice", "doomed", ["project"]).plaintext
        verifier.verify(f"ApiKey {doomed}")
        store.delete_key("alice", "doomed")
        new = [store.create_key("alice", f"new{n}", ["project"]).plaintext for n in range(5)]
        _settle(database_url)
        with pytest.raises(InvalidKeyError):
            verifier.verify(f"ApiKey {doomed}")
        assert all(verifier.verify(f"ApiKey {key}").key_name.startswith("new") for key in new)
        # The log's position was read twice: at the start, and when starting over.
        assert statements.count("max(apikey_tui_change.seq)") == 2
    finally:
        verifier.close()


def test_the_prepared_reads_give_what_sqlalchemy_gives_and_its_listeners_see_them(
    store: KeyStore, database_url: str
) -> None:
    """change_log.fetch (SQLite: the SQL on the driver's connection) returns the rows, values
    and names SQLAlchemy's execute returns, and before_ and after_cursor_execute still see
    each read."""
    from apikey_tui.limits import Limit
    from apikey_tui.store.credentials import _CREDENTIAL

    store.create_key("alice", "plain", ["project"])
    store.create_key("alice", "full", ["project", "serving"], expires=timedelta(days=30))
    store.set_limits_of_keys([store.get_key("alice", "full")], [Limit(10, 1), Limit(900, 86400)])
    store.set_owner_limits("alice", [Limit(50, 60)])
    store.rotate_key("alice", "full", grace=timedelta(hours=1))
    store.disable_key("alice", "plain", "tests")
    old = store.get_key("alice", "full").old_public_id
    assert old is not None
    engine = _engine(database_url)
    statements = Statements(engine)
    after: list[str] = []
    event.listen(engine, "after_cursor_execute", lambda _c, _k, sql, *_a: after.append(sql))
    reads = change_log.ReusedConnections(engine)
    ids = [store.get_key("alice", name).public_id for name in ("plain", "full")]
    asked: list[tuple[Any, dict[str, Any]]] = [
        (change_log.CHANGES, {"seq": 0, "limit": 100}),
        (change_log.PAGE, {"after": 0, "limit": 100}),
        (change_log.POSITION, {}),
        *[(_CREDENTIAL, {"pid": public_id}) for public_id in [*ids, old]],
    ]
    try:
        for statement, params in asked:
            with reads.connection() as conn:
                seen = len(statements.seen)
                fetched = change_log.fetch(conn, statement, params)
                assert len(statements.seen) == seen + 1
                assert after[-1] == statements.seen[-1] and len(after) == seen + 1
                expected = conn.execute(statement, params).all()
            assert [tuple(row) for row in fetched] == [tuple(row) for row in expected]
            assert [row._asdict() for row in fetched] == [row._asdict() for row in expected]
            assert fetched
    finally:
        reads.close()
        engine.dispose()


def test_a_kept_read_is_seen_by_listeners_added_later_to_its_engine_or_to_every_engine(
    store: KeyStore, database_url: str
) -> None:
    """ReusedConnections.fetch asks its engine's own dispatch whether anything listens (two
    calls, not sixteen): a listener added to that engine after the reads were kept, or to the
    Engine class, still sees each read, and once it is removed the reads run without it."""
    from apikey_tui.store.credentials import _CREDENTIAL

    public_id = store.create_key("alice", "seen", ["project"]).info.public_id
    engine = _engine(database_url)
    reads = change_log.ReusedConnections(engine)
    seen: list[str] = []

    def listener(_c: Any, _k: Any, sql: str, *_a: Any) -> None:
        seen.append(sql)

    def read() -> None:
        assert reads.fetch(_CREDENTIAL, {"pid": public_id})
        assert reads.fetch(change_log.CHANGES, {"seq": 0, "limit": 10})

    try:
        read()  # the connection kept, nothing listening
        assert seen == []
        for target, name in ((engine, "before_cursor_execute"), (Engine, "after_cursor_execute")):
            event.listen(target, name, listener)
            try:
                read()
            finally:
                event.remove(target, name, listener)
            assert len(seen) == 2 and "apikey_tui_change" in seen[1]
            seen.clear()
            read()
            assert seen == []
    finally:
        reads.close()
        engine.dispose()


def test_a_prepared_read_that_fails_is_mapped_and_counted_like_any_other(tmp_path: Any) -> None:
    """A driver error in change_log.fetch reaches handle_error listeners once and comes out
    as the one error mapper's StoreUnavailableError (here: a file without our tables)."""
    import sqlite3

    from apikey_tui.errors import StoreUnavailableError

    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    engine = _engine(f"sqlite:///{path}")
    errors: list[object] = []
    event.listen(engine, "handle_error", errors.append)
    reads = change_log.ReusedConnections(engine)
    with pytest.raises(StoreUnavailableError, match="no such table"):
        with reads.connection() as conn:
            change_log.fetch(conn, change_log.POSITION, {})
    assert len(errors) == 1
    # The same through ReusedConnections.fetch (the verifier's reads): mapped, counted once,
    # and the failed connection let go, never kept.
    with pytest.raises(StoreUnavailableError, match="no such table"):
        reads.fetch(change_log.CHANGES, {"seq": 0, "limit": 10})
    assert len(errors) == 2 and reads._free == []
    engine.dispose()


def test_a_kept_read_connection_that_fails_is_never_reused_and_other_errors_pass(
    sqlite_url: str,
) -> None:
    """ReusedConnections: a good read keeps its connection; a failed one lets every kept
    connection go (the next read connects) and comes out typed; a non-database error raised
    inside a read passes unchanged, and that connection is let go too."""
    from apikey_tui.errors import StoreUnavailableError

    KeyStore.open(sqlite_url, hasher=CHEAP).close()
    engine = _engine(sqlite_url)
    reads = change_log.ReusedConnections(engine)
    try:
        with reads.connection() as first:
            assert change_log.position(first) >= 0
        with reads.connection() as again:
            assert again is first  # kept and reused
            with pytest.raises(StoreUnavailableError, match="no such table"):
                with reads.connection() as second:  # a second reader at once: its own
                    assert second is not first
                    second.exec_driver_sql("SELECT * FROM no_such_table")
        assert reads._free == [first]  # the failed one was closed, not kept
        with pytest.raises(ValueError, match="not a database error"):
            with reads.connection() as conn:
                assert conn is first
                raise ValueError("not a database error")
        assert reads._free == [] and first.closed
        with reads.connection() as fresh:
            assert fresh is not first and change_log.position(fresh) >= 0
    finally:
        reads.close()
        engine.dispose()
