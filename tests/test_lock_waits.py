"""A write never waits for ever on PostgreSQL: a lock another session keeps is one line, later."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from apikey_tui.cli import main
from apikey_tui.db import engine as engine_module
from apikey_tui.store import CreatedKey, KeyStore
from apikey_tui.store.change_log import LOG_LOCK
from tests.conftest import CHEAP, _libpq
from tests.test_postgres_connections import fresh_database  # noqa: F401  (a fixture)


@contextmanager
def advisory_lock(url: str) -> Iterator[None]:
    """The change log's lock, held by a session of its own (any role that connects may)."""
    with psycopg.connect(_libpq(url), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOG_LOCK,))
        yield


@contextmanager
def row_lock(url: str) -> Iterator[None]:
    """The key row, locked FOR UPDATE in a transaction left open (a service's role may: it
    updates last_used_at)."""
    with psycopg.connect(_libpq(url)) as holder, holder.transaction():
        holder.execute("SELECT id FROM apikey_tui_key FOR UPDATE")
        yield


def within(seconds: float, call: Callable[[], int]) -> tuple[bool, int | None]:
    """Run call in a thread: (whether it returned within seconds, what it returned)."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), (result[0] if result else None)


@pytest.mark.parametrize("held", [advisory_lock, row_lock], ids=["advisory", "row"])
def test_a_delete_behind_a_lock_kept_open_fails_in_one_line_and_changes_nothing(
    fresh_database: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    held: Callable[[str], contextlib.AbstractContextManager[None]],
) -> None:
    """`keys delete` behind a lock another session keeps (the change log's advisory lock, or
    the key's row) gives up after the write's lock wait with one line and exit 1, and the key
    is still there; before, it waited for as long as that session lived. In a database of its
    own: the advisory lock is the whole database's, and would hold up other tests' writes."""
    postgres_url = fresh_database
    monkeypatch.setattr(engine_module, "LOCK_WAIT_S", 0.5)
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    store.create_key("alice", "demo", ["project"])
    with held(postgres_url):
        returned, code = within(
            30,
            lambda: main(
                [
                    "--database-url",
                    postgres_url,
                    "keys",
                    "delete",
                    "demo",
                    "--owner",
                    "alice",
                    "--yes",
                ]
            ),
        )
    assert returned, "the delete still waits for the lock"
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "another session holds a lock" in err and "nothing was changed" in err
    assert store.get_key("alice", "demo").name == "demo"
    store.close()


def test_a_command_behind_the_schema_lock_kept_open_fails_in_one_line_naming_it(
    fresh_database: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A command that may create the tables, behind a session that keeps the schema's advisory
    lock (any role may take it), gives up after the lock wait with one line naming that lock,
    and the key is still there: `keys delete` blamed a lock "this change needs"."""
    postgres_url = fresh_database
    monkeypatch.setattr(engine_module, "LOCK_WAIT_S", 0.5)
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    store.create_key("alice", "demo", ["project"])
    command = ["keys", "delete", "demo", "--owner", "alice", "--yes"]
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (engine_module._SCHEMA_LOCK,))
        returned, code = within(30, lambda: main(["--database-url", postgres_url, *command]))
    assert returned, "the command still waits for the schema lock"
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "schema lock" in err and "nothing was changed" in err
    assert store.get_key("alice", "demo").name == "demo"
    store.close()


def test_a_verifiers_writes_wait_for_a_held_row_in_a_transaction_of_their_own(
    fresh_database: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A verifier's last-used write runs in a transaction with the write's lock wait: its
    close() gives up on a key row another session keeps locked (it waited for as long as that
    session lived, and held a service's shutdown with it), and its SET LOCAL never lands
    outside a transaction (the server logged a WARNING for each write of the autocommit
    engine, whose usage flush wrote its mark and its rows as two commits, not all or none)."""
    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    monkeypatch.setattr(engine_module, "LOCK_WAIT_S", 0.5)
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    warnings: list[str] = []

    @event.listens_for(checker._engine, "connect")
    def _notices(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))

    checker.verify(f"ApiKey {key}")
    checker.flush()  # no lock held: written
    assert warnings == []
    assert store.get_key("alice", "demo").last_used_at is not None
    checker._last_used.note(store.get_key("alice", "demo").public_id)  # one more to write
    with row_lock(postgres_url):

        def close() -> int:
            checker.close()
            return 0

        returned, _ = within(30, close)
    assert returned, "the verifier's close() still waits for the row"
    assert warnings == []
    store.close()


def test_opening_while_the_schema_is_being_upgraded_says_so(
    fresh_database: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An admin's store opened while another session holds the schema's lock (a `db upgrade`
    under way, which may take minutes) gives up after the write's lock wait saying that the
    tables are being created or upgraded: it said an app had left a key's row locked."""
    from apikey_tui.db.engine import _SCHEMA_LOCK
    from apikey_tui.errors import StoreUnavailableError

    postgres_url = fresh_database
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    monkeypatch.setattr(engine_module, "LOCK_WAIT_S", 0.5)
    with psycopg.connect(_libpq(postgres_url)) as upgrading, upgrading.transaction():
        upgrading.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        with pytest.raises(StoreUnavailableError) as raised:
            KeyStore.open(postgres_url, hasher=CHEAP)
    message = str(raised.value)
    assert "creating or upgrading" in message and "\n" not in message
    assert "key's row" not in message


def test_two_services_writing_last_used_of_the_same_keys_never_deadlock(
    fresh_database: str,  # noqa: F811
) -> None:
    """Two verifiers (two worker processes) that noted the same keys in opposite orders, behind
    a session holding one of the rows, each give up at once (kept for their next round), never
    in a deadlock, and both write once it is gone: a verifier's write never waits for a lock."""
    from datetime import UTC, datetime

    from apikey_tui.errors import StoreUnavailableError
    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    ids = sorted(store.create_key("alice", name, ["project"]).info.public_id for name in "ab")
    checkers = [Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600) for _ in "12"]
    now = datetime.now(UTC)
    orders = [ids, ids[::-1]]
    with psycopg.connect(_libpq(postgres_url)) as holder, holder.transaction():
        holder.execute("SELECT id FROM apikey_tui_key WHERE public_id = %s FOR UPDATE", (ids[1],))
        for checker, order in zip(checkers, orders, strict=True):
            with pytest.raises(StoreUnavailableError, match="another session holds a lock"):
                checker._source.record_use(dict.fromkeys(order, now))
    for checker, order in zip(checkers, orders, strict=True):
        checker._source.record_use(dict.fromkeys(order, now))
        checker.close()
    assert all(store.get_key("alice", name).last_used_at is not None for name in "ab")
    store.close()


def test_a_verifiers_write_never_waits_for_an_admins_row_and_writes_it_next_round(
    fresh_database: str,  # noqa: F811
) -> None:
    """A verifier's last-used flush behind a key row an admin's open transaction holds gives up
    at once, keeping the use, and writes it once the admin is done: waiting (as every write
    may, 10 s), it held the rows it had written meanwhile, and an admin's batch waiting for
    one of those in turn was a deadlock PostgreSQL could settle by failing the admin's change."""
    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    checker.verify(f"ApiKey {key}")  # notes the use; nothing writes it for an hour
    with row_lock(postgres_url):

        def flush() -> int:
            checker.flush()
            return 0

        returned, _ = within(5, flush)  # the admin's transaction stays open meanwhile
        assert returned, "the verifier's write waits for the admin's row"
        assert store.get_key("alice", "demo").last_used_at is None
    checker.flush()  # the admin is done: the use kept from the failed round is written
    assert store.get_key("alice", "demo").last_used_at is not None
    checker.close()
    store.close()


@contextmanager
def held_briefly(url: str, statement: str, seconds: float) -> Iterator[None]:
    """A lock taken by `statement` in a transaction of its own, released after `seconds` (an
    admin's commit, a last-used batch): the body runs while it is held."""
    taken = threading.Event()

    def hold() -> None:
        with psycopg.connect(_libpq(url)) as holder, holder.transaction():
            holder.execute(statement)
            taken.set()
            threading.Event().wait(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10), "the lock was never taken"
    try:
        yield
    finally:
        thread.join(10)


def legacy_key(url: str) -> tuple[KeyStore, CreatedKey]:
    """A store and its one key, made as before fingerprints (0.1.0): its fingerprint is NULL."""
    from sqlalchemy import text

    store = KeyStore.open(url, hasher=CHEAP)
    created = store.create_key("alice", "legacy", ["project"])
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_key SET fingerprint = NULL"))
    return store, created


def test_a_fingerprint_behind_an_admins_commit_is_stored_all_the_same(
    fresh_database: str,  # noqa: F811
) -> None:
    """A key's first verification stores its missing fingerprint when another session holds the
    change log's lock for 0.1 s (an admin's commit): the verifier's 1 ms wait, meant for its
    batched last-used writes, gave up on it, so the key kept costing argon2 on wrong secrets."""

    from apikey_tui.verifier import Verifier
    from tests.conftest import every_fingerprint

    postgres_url = fresh_database
    store, created = legacy_key(postgres_url)
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    with held_briefly(postgres_url, f"SELECT pg_advisory_xact_lock({LOG_LOCK})", 0.1):
        assert checker.verify(f"ApiKey {created.plaintext}").key_name == "legacy"
    assert every_fingerprint(store)[created.info.public_id] is not None
    checker.close()
    store.close()


def test_a_hash_upgrade_behind_a_brief_row_lock_is_stored_all_the_same(
    fresh_database: str,  # noqa: F811
) -> None:
    """A key's hash is upgraded at its first check when another session holds its row for
    0.1 s (another worker's last-used write): with the 1 ms wait the upgrade was skipped."""
    from apikey_tui.hashing import SecretHasher
    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    created = store.create_key("alice", "demo", ["project"])
    today = SecretHasher()
    checker = Verifier.from_url(postgres_url, hasher=today, flush_interval=3600)
    with held_briefly(postgres_url, "SELECT id FROM apikey_tui_key FOR UPDATE", 0.1):
        assert checker.verify(f"ApiKey {created.plaintext}").key_name == "demo"
    credential = store.credential(created.info.public_id)
    assert credential is not None and not today.needs_rehash(credential.secret_hash)
    checker.close()
    store.close()


def test_many_first_checks_behind_a_held_change_log_lock_stay_inside_their_deadline(
    fresh_database: str,  # noqa: F811
) -> None:
    """Forty keys without fingerprints checked at once while another session holds the change
    log's lock (any role may take it) all answer well inside the deadline: each fingerprint
    write waited 0.2 s in one of four check threads, every check queued behind them, and the
    later ones (any key's first check too) were 503 after 2 s."""
    import time

    from sqlalchemy import text

    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    keys = [store.create_key("alice", f"legacy{i}", ["project"]).plaintext for i in range(40)]
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_key SET fingerprint = NULL"))
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    checker.start()
    took: list[float] = []
    failed: list[BaseException] = []

    def check(key: str) -> None:
        started = time.monotonic()
        try:
            checker.verify(f"ApiKey {key}")
        except Exception as exc:  # a 503 is what is looked for
            failed.append(exc)
        took.append(time.monotonic() - started)

    with advisory_lock(postgres_url):
        threads = [threading.Thread(target=check, args=(key,)) for key in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert failed == [] and max(took) < 1.0, (failed[:1], max(took))
    checker.close()
    store.close()


def test_a_fingerprint_write_never_holds_a_row_an_admins_batch_waits_for(
    fresh_database: str,  # noqa: F811
) -> None:
    """An admin's batch that holds the change log's lock and then updates a key whose
    fingerprint a verifier is writing commits, even where deadlock_timeout is shorter than the
    verifier's 0.2 s wait: the verifier held the row while it waited for the log's lock, a wait
    cycle that PostgreSQL settled by failing the admin's change."""
    import time

    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store, created = legacy_key(postgres_url)
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    checker.start()
    outcome: list[BaseException | None] = []

    def admin_batch() -> None:
        try:
            with psycopg.connect(_libpq(postgres_url)) as admin, admin.transaction():
                admin.execute("SET LOCAL deadlock_timeout = '50ms'")
                admin.execute("SELECT pg_advisory_xact_lock(%s)", (LOG_LOCK,))  # appended
                time.sleep(0.15)  # meanwhile the verifier writes the fingerprint
                admin.execute("UPDATE apikey_tui_key SET tags = tags")  # the batch's next key
            outcome.append(None)
        except psycopg.Error as exc:
            outcome.append(exc)

    batch = threading.Thread(target=admin_batch)
    batch.start()
    time.sleep(0.05)
    assert checker.verify(f"ApiKey {created.plaintext}").key_name == "legacy"
    batch.join(10)
    assert outcome == [None]
    checker.close()
    store.close()


def test_checks_that_only_read_the_schema_never_wait_for_its_lock(
    fresh_database: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A verifier's first check and `db grant-verifier` only read the schema: behind a session
    that keeps the schema's advisory lock (the whole database's: another schema's `db upgrade`,
    or any role that takes it) they answer at once. The first check waited for it and was 503
    at its 2 s deadline; the command waited 10 s and failed."""
    from apikey_tui.verifier import Verifier

    postgres_url = fresh_database
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(postgres_url, hasher=CHEAP, flush_interval=3600)
    try:
        with psycopg.connect(_libpq(postgres_url), autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (engine_module._SCHEMA_LOCK,))
            assert checker.verify(f"ApiKey {key}").key_name == "demo"
            returned, code = within(
                30,
                lambda: main(["--database-url", postgres_url, "db", "grant-verifier", "svc_r"]),
            )
        assert returned and code == 0, capsys.readouterr().err
        assert "GRANT SELECT" in capsys.readouterr().out
    finally:
        checker.close()
        store.close()
