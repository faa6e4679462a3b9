"""PostgreSQL pushes key changes to verifiers (LISTEN/NOTIFY); gaps fall back to the bound."""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, make_url

from apikey_tui.cli import main
from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    InvalidKeyError,
    SchemaVersionError,
    VerifierUnavailableError,
)
from apikey_tui.store import KeyStore
from apikey_tui.store.credentials import CredentialReads
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import PushFreshness
from tests.conftest import CHEAP, POSTGRES_URL, _libpq, eventually, fresh_schema
from tests.test_privileges import _as, role  # noqa: F401  (role: a fixture)
from tests.test_verifier import header
from tests.throwaway_postgres import ThrowawayPostgres, free_port

# The shared server, as the suite's URL names it (APIKEY_TUI_TEST_POSTGRES_URL), in libpq form.
SHARED_URL = make_url(POSTGRES_URL)
SHARED = SHARED_URL.set(drivername="postgresql").render_as_string(hide_password=False)
LONG_BOUND = 120.0  # far longer than any test waits: only a push can explain a quick refusal


def refused(checker: Verifier, key: str, scopes: tuple[str, ...] = ()) -> bool:
    """Whether the key is refused now (401 or 403)."""
    try:
        checker.verify(header(key), scopes)
    except (InvalidKeyError, InsufficientScopeError):
        return True
    return False


def listening(checker: Verifier) -> bool:
    """Whether the verifier hears of changes by push right now."""
    freshness = checker._freshness
    assert isinstance(freshness, PushFreshness)
    return freshness.listening


def test_delete_rescope_and_recreate_reach_a_verifier_by_push(postgres_url: str) -> None:
    """With a 120 s bound, each change is refused within moments: it was pushed, not polled."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    key = store.create_key("alice", "demo", ["project", "serving"]).plaintext
    checker.verify(header(key), ["serving"])
    assert eventually(lambda: listening(checker))
    store.set_key_scopes("alice", "demo", ["project"])
    assert eventually(lambda: refused(checker, key, ("serving",)))
    new = store.recreate_key("alice", "demo").plaintext
    assert eventually(lambda: refused(checker, key))
    assert checker.verify(header(new)).key_name == "demo"  # the new key is known at once
    store.delete_key("alice", "demo")
    assert eventually(lambda: refused(checker, new))
    checker.close()
    store.close()


def test_close_ends_the_listener_and_its_connection(postgres_url: str) -> None:
    """close() ends the listener thread, closing its connection, before it returns: with a
    120 s bound it waited up to a heartbeat (30 s), so a suite or a process making verifiers
    one after another held a PostgreSQL connection and a thread per closed one meanwhile."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    checker.verify(header(key))
    assert eventually(lambda: listening(checker))
    freshness = checker._freshness
    assert isinstance(freshness, PushFreshness)
    thread, connection = freshness._thread, freshness._connection
    assert thread is not None and connection is not None
    checker.close()
    store.close()
    assert not thread.is_alive() and connection.closed


def test_changes_in_another_schema_of_the_database_wake_no_verifier(
    postgres_server: str, postgres_url: str
) -> None:
    """20 commits of a deployment in another schema count as no notice of this verifier's (each
    counted, and cost a read of the change log, before); one commit of its own schema counts."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    try:
        checker.verify(header(store.create_key("alice", "demo", ["project"]).plaintext))
        assert eventually(lambda: listening(checker))
        freshness = checker._freshness
        assert isinstance(freshness, PushFreshness)
        with fresh_schema(postgres_server) as neighbour_url:
            neighbour = KeyStore.open(neighbour_url, hasher=CHEAP)
            try:
                # The notices counted, not the generation: that also moves, at most once per
                # POLL, when anything (ours or not) waits unread on the socket (_poll).
                before = freshness._pushes
                for i in range(20):
                    neighbour.create_key("bob", f"k{i}", ["project"])
                store.create_key("alice", "marker", ["project"])  # ours, after theirs
                assert eventually(lambda: freshness._pushes > before)
                time.sleep(0.2)  # any notice of theirs arrived before ours: none may count
                assert freshness._pushes == before + 1
            finally:
                neighbour.close()
    finally:
        checker.close()
        store.close()


def test_no_stale_accept_follows_a_restart_of_postgres(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """A key deleted while the listener was away is refused once it is back: it drops all."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    store.close()
    checker = Verifier.from_url(throwaway_postgres.url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    checker.verify(header(key))
    assert eventually(lambda: listening(checker))
    throwaway_postgres.stop()
    throwaway_postgres.start()
    admin = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    admin.delete_key("alice", "demo")  # most likely before the listener is back: notice lost
    admin.close()
    assert eventually(lambda: listening(checker), 30)
    assert refused(checker, key)
    checker.close()


def test_with_bound_zero_a_cold_check_is_one_statement_outside_a_transaction(
    postgres_url: str,
) -> None:
    """revocation_bound=0 asks the database once per check: one SELECT, autocommit, no ping.

    Counted once the key index is in: while it loads it cannot vouch for the key, and a check
    reads the change log too (under CI's load the index was still loading: 10 statements)."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=0)
    try:
        checker.verify(header(key))
        assert checker.wait_index()
        statements: list[str] = []

        def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            statements.append(statement)

        event.listen(checker._engine, "before_cursor_execute", note)
        for _ in range(5):
            checker.verify(header(key))
        assert len(statements) == 5
        assert checker._engine.pool._pre_ping is False
        source = checker._source
        assert isinstance(source, CredentialReads)
        assert source.engine.get_execution_options()["isolation_level"] == "AUTOCOMMIT"
    finally:
        checker.close()
        store.close()


def test_bound_zero_needs_no_listener(postgres_url: str) -> None:
    """A verifier that asks at every check has no use for push and starts no listener."""
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=0)
    assert not isinstance(checker._freshness, PushFreshness)
    checker.close()


@contextmanager
def transaction_pooling_pgbouncer(pool_size: int = 20) -> Iterator[str]:
    """A private PgBouncer in transaction pooling in front of the shared PostgreSQL.

    pool_size server connections at most per database and user, shared by every client.
    """
    database = f"apikey_pgb_{uuid.uuid4().hex[:10]}"  # a fresh database: options can't pass
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    folder = Path(tempfile.mkdtemp(prefix="apikey-pgbouncer-"))
    port = free_port()
    (folder / "users.txt").write_text(f'"{SHARED_URL.username or "postgres"}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={SHARED_URL.host or '127.0.0.1'} port={SHARED_URL.port or 5432} "
        f"user={SHARED_URL.username or 'postgres'}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
        f"auth_type = trust\nauth_file = {folder}/users.txt\n"
        f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nunix_socket_dir =\n"
        f"logfile = {folder}/pgbouncer.log\nlog_connections = 0\nlog_disconnections = 0\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:  # PgBouncer refuses to run as root
        shutil.chown(folder, "postgres")
        for item in folder.iterdir():
            shutil.chown(item, "postgres")
    bouncer = subprocess.Popen(
        [
            *as_postgres,
            shutil.which("pgbouncer") or "/usr/sbin/pgbouncer",
            str(folder / "pgbouncer.ini"),
        ]
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "pgbouncer did not start"
                time.sleep(0.1)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"
    finally:
        bouncer.terminate()
        bouncer.wait(timeout=15)
        shutil.rmtree(folder, ignore_errors=True)
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_pgbouncer_in_transaction_pooling_is_detected_and_the_bound_still_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through a transaction-pooling PgBouncer, LISTEN is found not to work: a warning, no
    push, and a deleted key is still refused within the bound."""
    with transaction_pooling_pgbouncer() as url:
        store = KeyStore.open(url, hasher=CHEAP)
        name = f"pgb-{uuid.uuid4().hex[:8]}"
        key = store.create_key("alice", name, ["project"]).plaintext
        checker = Verifier.from_url(url, hasher=CHEAP, revocation_bound=0.5)
        with caplog.at_level(logging.WARNING, logger="apikey_tui.verifier"):
            checker.verify(header(key))
            assert eventually(lambda: "LISTEN does not work" in caplog.text)
        assert not listening(checker)
        store.delete_key("alice", name)
        assert eventually(lambda: refused(checker, key), 5)
        checker.close()
        store.close()


# Load through a transaction-pooling PgBouncer: processes x verifiers x threads x checks.
LOAD_PROCESSES, LOAD_VERIFIERS, LOAD_THREADS, LOAD_CHECKS = 3, 2, 4, 150


def _checks_through(url: str, keys: list[str]) -> dict[str, int]:
    """In a fresh process: several verifiers checking keys from several threads at once.

    revocation_bound=0 makes every check a read of the database; returns the outcomes, the
    driver errors the verifiers counted and the log lines that name a prepared statement.
    """
    prepared: list[str] = []

    class Note(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "prepared statement" in record.getMessage():
                prepared.append(record.getMessage())

    logging.getLogger("apikey_tui").addHandler(Note())
    verifiers = [
        Verifier.from_url(url, hasher=CHEAP, revocation_bound=0) for _ in range(LOAD_VERIFIERS)
    ]
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def run(checker: Verifier, offset: int) -> None:
        for n in range(LOAD_CHECKS):
            key = keys[(offset + n) % len(keys)]
            try:
                checker.verify(header(key))
                outcome = "ok"
            except AuthError as error:
                outcome = str(error.status)
            with lock:
                seen[outcome] += 1

    threads = [
        threading.Thread(target=run, args=(checker, offset))
        for checker in verifiers
        for offset in range(LOAD_THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for checker in verifiers:
        seen["database_errors"] += checker.stats.database_errors
        checker.close()
    seen["prepared_statement_lines"] = len(prepared)
    return dict(seen)


def test_many_verifiers_through_a_small_transaction_pool_get_no_503() -> None:
    """Several processes, each with several verifiers checking at once through a PgBouncer
    whose 2 server connections all of them share, get every valid key accepted: no 503 and no
    driver error (psycopg's automatic prepared statements would clash across the pool)."""
    with transaction_pooling_pgbouncer(pool_size=2) as url:
        store = KeyStore.open(url, hasher=CHEAP)
        keys = [store.create_key("alice", f"load-{n}", ["project"]).plaintext for n in range(8)]
        store.close()
        with multiprocessing.get_context("spawn").Pool(LOAD_PROCESSES) as pool:
            results = pool.starmap(_checks_through, [(url, keys)] * LOAD_PROCESSES)
    total: Counter[str] = Counter()
    for result in results:
        total.update(result)
    expected = LOAD_PROCESSES * LOAD_VERIFIERS * LOAD_THREADS * LOAD_CHECKS
    assert total == Counter({"ok": expected}), dict(total)


def test_a_new_key_whose_notice_is_late_passes_after_a_flood_spent_the_rechecks(
    postgres_url: str,
) -> None:
    """Forged ids that spent the log re-read budget never make a new key's first check a 401."""
    from tests.test_verifier_attacks import forged

    store = KeyStore.open(postgres_url, hasher=CHEAP)
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    checker.verify(header(store.create_key("alice", "first", ["project"]).plaintext))
    assert eventually(lambda: listening(checker))

    def late_notice(_c: Any, _cur: Any, statement: str, params: Any, *_a: Any) -> Any:
        # The notice of this commit has not reached the verifier yet (it may lag by ms).
        return ("SELECT 1" if "pg_notify" in statement else statement), params

    event.listen(store.engine, "before_cursor_execute", late_notice, retval=True)
    for _ in range(50):  # a flood of unknown ids spends the re-read budget (3, then 1 a second)
        with pytest.raises(InvalidKeyError):
            checker.verify(header(forged()))
    new = store.create_key("alice", "second", ["project"]).plaintext
    assert checker.verify(header(new)).key_name == "second"
    checker.close()
    store.close()


def test_a_verifier_whose_search_path_starts_with_an_empty_schema_counts_the_admins_notices(
    postgres_server: str, postgres_url: str
) -> None:
    """A verifier whose search_path puts an empty schema before the keys' (PostgreSQL's default
    `"$user", public` for a role with a schema of its name) counts the admins' notices: each
    named current_schema(), which differed, so none counted and a deleted key stayed valid
    until a heartbeat happened to be peeked (43 s at the 1 s bound)."""
    schema = str(make_url(postgres_url).query["options"]).split("=")[1]
    own = f"own_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {own}".encode())
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    verifier_url = make_url(postgres_url).update_query_dict(
        {"options": f"-csearch_path={own},{schema}"}
    )
    checker = Verifier.from_url(
        verifier_url.render_as_string(hide_password=False),
        hasher=CHEAP,
        revocation_bound=LONG_BOUND,
    )
    try:
        key = store.create_key("alice", "demo", ["project"]).plaintext
        checker.verify(header(key))
        assert eventually(lambda: listening(checker))
        freshness = checker._freshness
        assert isinstance(freshness, PushFreshness)
        before = freshness._pushes
        store.delete_key("alice", "demo")
        assert eventually(lambda: freshness._pushes > before)
        assert refused(checker, key)
    finally:
        checker.close()
        store.close()
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {own} CASCADE".encode())


def test_a_change_whose_notice_never_counted_is_read_within_the_bound(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key deleted with no notice (one lost, or a writer's NOTIFY gone wrong) is refused
    within the bound while the listener is alive: the heartbeat reads the log's position, where
    `SELECT 1` left the key valid until a heartbeat's answer happened to be peeked."""
    from sqlalchemy import text

    from apikey_tui.store import credentials

    store = KeyStore.open(postgres_url, hasher=CHEAP)
    bound = 1.0
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=bound)
    try:
        key = store.create_key("alice", "demo", ["project"]).plaintext
        checker.verify(header(key))
        assert eventually(lambda: listening(checker))
        checker.verify(header(key))  # read the log once the listener counts: synced with it
        # No notice at all: one naming another schema still wakes the request path's peek.
        monkeypatch.setattr(credentials, "_NOTIFY", text("SELECT :channel"))
        store.delete_key("alice", "demo")
        # One check once the bound has passed, nothing between: each check peeks at the
        # listener's socket, and one that caught a heartbeat's answer unread would read the log
        # whatever the heartbeat asked. The bound is the contract: a heartbeat within a quarter
        # of it, or the fallback to it if the listener lags that long.
        time.sleep(bound * 1.1)
        assert refused(checker, key)
    finally:
        checker.close()
        store.close()


def test_a_listener_whose_heartbeat_cannot_read_the_log_says_so_once_and_keeps_the_bound(
    postgres_url: str,
    role: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A listener that LISTENs but whose heartbeat fails (its role may not read the change log)
    logs that notices stopped once, never that they are back, and the bound holds; it said
    both again at each reconnect (0.5 s apart: four lines a second, three connections)."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    assert main(["--database-url", postgres_url, "db", "grant-verifier", role, "--apply"]) == 0
    capsys.readouterr()
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as conn:
        conn.execute(f"REVOKE SELECT ON apikey_tui_change FROM {role}".encode())  # noqa: S608
    monkeypatch.setattr(PushFreshness, "RETRY", (0.01, 0.01))  # many reconnects, quickly
    checker = Verifier.from_url(_as(role, postgres_url), hasher=CHEAP, revocation_bound=1.0)
    freshness = checker._freshness
    assert isinstance(freshness, PushFreshness)
    try:
        with caplog.at_level(logging.WARNING, logger="apikey_tui.verifier"):
            freshness.generation()  # starts the listener
            # Each attempt LISTENs and probes, then its heartbeat fails: five attempts made.
            assert eventually(lambda: freshness._pushes >= 5)
            assert not freshness.listening
        said = [r.getMessage() for r in caplog.records]
        assert sum("notices stopped" in line for line in said) == 1
        assert not any("by push again" in line for line in said)
    finally:
        checker.close()
        store.close()


def test_a_change_whose_notice_never_counted_is_read_within_the_bound_after_an_empty_log(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the change log emptied by hand before the listener started (its newest
    position NULL): the first change's move was taken for the first heartbeat's answer and
    never counted, so the deleted key stayed valid for as long as the listener lived."""
    from sqlalchemy import text

    from apikey_tui.store import credentials

    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as conn:
        conn.execute("DELETE FROM apikey_tui_change")  # a DBA's clean-up: no newest row kept
    bound = 1.0
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=bound)
    try:
        checker.verify(header(key))
        assert eventually(lambda: listening(checker))
        checker.verify(header(key))  # read the log once the listener counts: synced with it
        monkeypatch.setattr(credentials, "_NOTIFY", text("SELECT :channel"))
        store.delete_key("alice", "demo")
        time.sleep(bound * 1.1)  # one check past the bound, as above
        assert refused(checker, key)
    finally:
        checker.close()
        store.close()


def test_a_stray_change_log_earlier_on_the_search_path_is_refused_not_read(
    postgres_url: str,
) -> None:
    """A change log in a schema the search_path names before the keys' (a leftover, or one
    planted where any role may create, as public before PostgreSQL 15) is refused: the
    verifier answers 503 and an admin's open fails in one line. Read, it hid every change
    from the listener and the log reads, and a deleted key stayed valid (5 s and counting
    at a 1 s bound)."""
    schema = str(make_url(postgres_url).query["options"]).split("=")[1]
    stray = f"stray_{uuid.uuid4().hex[:8]}"
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {stray}".encode())
        conn.execute(
            f"CREATE TABLE {stray}.apikey_tui_change (seq serial PRIMARY KEY, "
            "public_id varchar(32) NOT NULL, changed_at timestamp NOT NULL)".encode()
        )
    hijacked = make_url(postgres_url).update_query_dict(
        {"options": f"-csearch_path={stray},{schema}"}
    )
    url = hijacked.render_as_string(hide_password=False)
    checker = Verifier.from_url(url, hasher=CHEAP, revocation_bound=1.0)
    try:
        with pytest.raises(VerifierUnavailableError):
            checker.verify(header(key))
        with pytest.raises(SchemaVersionError, match=f"more than one schema.*{stray}"):
            KeyStore.open(url, hasher=CHEAP)
    finally:
        checker.close()
        store.close()
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {stray} CASCADE".encode())


def test_db_upgrade_refuses_a_search_path_with_tables_in_two_schemas(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade` on a search_path that finds apikey-tui's tables in two schemas (an older
    release's left in a schema named first) refuses in one line and writes nothing: it upgraded
    whichever tables it found first, the stray ones, and left the keys' schema as it was."""
    schema = str(make_url(postgres_url).query["options"]).split("=")[1]
    stray = f"stray_{uuid.uuid4().hex[:8]}"
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {stray}".encode())
        # An older release's version table, as 0.1.0 left it (no Alembic table yet).
        conn.execute(
            f"CREATE TABLE {stray}.apikey_tui_meta (key text PRIMARY KEY, value text)".encode()
        )
        version = f"INSERT INTO {stray}.apikey_tui_meta VALUES ('schema_version', '1')"  # noqa: S608
        conn.execute(version.encode())  # the test's own schema name, no input
    hijacked = make_url(postgres_url).update_query_dict(
        {"options": f"-csearch_path={stray},{schema}"}
    )
    url = hijacked.render_as_string(hide_password=False)
    try:
        code = main(["--database-url", url, "db", "upgrade"])
        captured = capsys.readouterr()
        assert code != 0
        assert "more than one schema" in captured.err and stray in captured.err
        assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
        with psycopg.connect(SHARED) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (stray,)
            ).fetchall()
        assert tables == [("apikey_tui_meta",)]
    finally:
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {stray} CASCADE".encode())


def test_a_table_of_anothers_named_with_our_prefix_later_on_the_search_path_is_no_stray(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table and a view that are not apikey-tui's but whose names start with its prefix (an
    operator's backup, a report), in a schema the path names after ours, hide none of our
    tables: `db upgrade` and an open go ahead (they were refused as our tables in two schemas)."""
    schema = str(make_url(postgres_url).query["options"]).split("=")[1]
    other = f"other_{uuid.uuid4().hex[:8]}"
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {other}".encode())
        conn.execute(f"CREATE TABLE {other}.apikey_tui_backup_2025 (id int)".encode())
        conn.execute(f"CREATE VIEW {other}.apikey_tui_report AS SELECT 1 AS x".encode())
    both = make_url(postgres_url).update_query_dict({"options": f"-csearch_path={schema},{other}"})
    url = both.render_as_string(hide_password=False)
    try:
        assert main(["--database-url", url, "db", "upgrade"]) == 0, capsys.readouterr().err
        KeyStore.open(url, hasher=CHEAP).close()
    finally:
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {other} CASCADE".encode())
