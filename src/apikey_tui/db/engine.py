"""Engines for SQLite and PostgreSQL, schema creation and the schema version check."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from apikey_tui import forksafety
from apikey_tui.config import mask_url, parse_database_url
from apikey_tui.db import schema
from apikey_tui.db.driver_errors import database_errors, lock_timed_out
from apikey_tui.errors import DatabaseUrlError, StoreUnavailableError

# Execution option that makes a SQLite transaction take the write lock at BEGIN: a
# read-then-write transaction that starts deferred can fail with "database is locked" when
# another writer got in between, and the busy timeout cannot help it.
WRITE = {"apikey_tui_write": True}
# Execution option for single-statement reads (the verifier's): no BEGIN on SQLite, so a read
# is one statement in its own implicit transaction, not BEGIN + SELECT + ROLLBACK.
READ = {"apikey_tui_read": True}
# The longest a write waits for a lock another session holds, on either database. On
# PostgreSQL nothing else bounds it: one session left open on a key's row, or holding the
# change log's advisory lock (any role that connects may take it: a service's, stolen), held
# every admin's delete for as long as it lived. Past it the write is rolled back and says so
# in one line (`driver_errors`). Read at each write's BEGIN there, at connect on SQLite.
LOCK_WAIT_S = 10.0
# A write's own wait in seconds, where it differs: `engine.execution_options(**{LOCK_WAIT: s})`.
LOCK_WAIT = "apikey_tui_lock_wait"
# The shortest wait a write can name: a write that must never wait for a lock (PostgreSQL's
# lock_timeout counts whole milliseconds, and 0 would mean for ever).
NO_LOCK_WAIT_S = 0.001
SQLITE_BUSY_TIMEOUT_MS = int(LOCK_WAIT_S * 1000)
# A PostgreSQL server that stops answering costs a caller at most about 2 s per step, never a
# hang: connecting (per address tried; 2 s is libpq's minimum), and waiting for a pooled
# connection when every one is in use. A connection whose sent data stays unacknowledged for
# 2 s (the host or the network is gone) is dropped, and TCP keepalive notices a vanished server
# behind an idle pooled connection within about 12 s. A server that is alive but frozen still
# acknowledges TCP, so a query in flight is bounded by the caller (the verifier's deadline).
# A setting given in the URL's query (e.g. ?connect_timeout=10) wins over these.
POSTGRES_CONNECT_TIMEOUT_S = 2
POSTGRES_POOL_TIMEOUT_S = 2
POSTGRES_TCP_USER_TIMEOUT_MS = 2_000
POSTGRES_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
# What each of our connections calls itself in pg_stat_activity (and in the server's log with
# %a): admins (the CLI, the app, KeyStore.open), a verifier's pool, and its LISTEN connection.
# A URL's ?application_name= wins.
ADMIN_APPLICATION = "apikey-tui-admin"
VERIFIER_APPLICATION = "apikey-tui-verifier"
LISTENER_APPLICATION = "apikey-tui-listener"
_SCHEMA_LOCK = 0x61706B74  # 'apkt': serialises schema changes between PostgreSQL clients


def existing_file_uri(path: str) -> str:
    """A SQLite URI that opens path read-write but never creates it."""
    return f"{Path(path).resolve().as_uri()}?mode=rw"


def make_engine(
    url: str,
    *,
    create: bool = True,
    pre_ping: bool = True,
    application_name: str = ADMIN_APPLICATION,
) -> Engine:
    """Create an engine for a SQLite or PostgreSQL URL with the settings this package relies on.

    With create=False a missing SQLite file stays missing (connections fail instead): a service
    must not create, as its own Unix user, the database its admins are meant to create.
    Only SQLite and PostgreSQL with psycopg 3 are accepted; any other URL raises
    DatabaseUrlError (`config.parse_database_url`) before anything is created or connected.
    application_name names PostgreSQL connections (pg_stat_activity) unless the URL does.
    """
    parsed = parse_database_url(url)  # plain postgresql:// comes back as postgresql+psycopg
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, create=create)
    return _postgres_engine(parsed, pre_ping=pre_ping, application_name=application_name)


def postgres_connection(url: URL, application_name: str) -> tuple[URL, dict[str, Any]]:
    """The URL to give libpq and the keyword arguments for psycopg.connect, for every
    PostgreSQL connection we open: our bounds and name, each overridden by the URL's query.

    psycopg never prepares statements unless the URL says `?prepare_threshold=N`: behind a
    transaction-pooling PgBouncer (before 1.21's max_prepared_statements) each statement may
    run on another server connection, where the name psycopg prepared (`_pg3_0`) is missing or
    taken by another client, and checks failed with 503. That threshold is psycopg's, not
    libpq's, so it leaves the URL and becomes an argument (a number, or `none`).
    """
    defaults: dict[str, Any] = {
        "connect_timeout": POSTGRES_CONNECT_TIMEOUT_S,
        "tcp_user_timeout": POSTGRES_TCP_USER_TIMEOUT_MS,
        **POSTGRES_KEEPALIVES,
        "application_name": application_name,
    }
    options = {k: v for k, v in defaults.items() if k not in url.query}
    options["prepare_threshold"] = _prepare_threshold(url.query.get("prepare_threshold"))
    return url.difference_update_query(["prepare_threshold"]), options


def _prepare_threshold(given: str | tuple[str, ...] | None) -> int | None:
    """The URL's prepare_threshold as psycopg takes it (it compares it with an int)."""
    if given is None or (isinstance(given, str) and given.strip().lower() == "none"):
        return None
    if isinstance(given, str) and given.strip().isascii() and given.strip().isdigit():
        return int(given)
    raise DatabaseUrlError("prepare_threshold in the database URL must be a number or none")


def _postgres_engine(url: URL, *, pre_ping: bool, application_name: str) -> Engine:
    url, connect_args = postgres_connection(url, application_name)
    try:
        engine = create_engine(
            url,
            hide_parameters=True,  # bound parameters (hashes) never reach an exception message
            # A restarted server costs one reconnect, not an error. The verifier turns it off
            # (each cold check is then one round trip) and retries a read once instead.
            pool_pre_ping=pre_ping,
            pool_timeout=POSTGRES_POOL_TIMEOUT_S,
            connect_args=connect_args,
        )
    except ImportError:  # the [postgres] extra is not installed
        raise DatabaseUrlError("PostgreSQL needs psycopg 3: install apikey-tui[postgres]") from None

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # SET LOCAL, in each write transaction: a session-wide SET would outlive it on a server
        # connection a transaction-pooling PgBouncer hands to other clients.
        options = connection.get_execution_options()
        if options.get("apikey_tui_write", False):
            bound_lock_wait(connection, options.get(LOCK_WAIT))

    return engine


def bound_lock_wait(connection: Connection, seconds: float | None = None) -> None:
    """PostgreSQL: this transaction waits at most `seconds` (LOCK_WAIT_S) for any lock."""
    wait = LOCK_WAIT_S if seconds is None else seconds
    connection.exec_driver_sql(f"SET LOCAL lock_timeout = {max(1, int(wait * 1000))}")


def _sqlite_engine(url: URL, *, create: bool) -> Engine:
    database = url.database
    in_memory = not database or database == ":memory:"
    options: dict[str, Any] = {
        "connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
    }
    if in_memory:
        options["poolclass"] = StaticPool  # one connection, or each thread sees its own database
    elif create:
        _create_private_file(Path(database))  # type: ignore[arg-type]
    else:
        uri = existing_file_uri(database)  # type: ignore[arg-type]
        options["creator"] = lambda: sqlite3.connect(
            uri, uri=True, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, check_same_thread=False
        )
    engine = create_engine(url, hide_parameters=True, **options)
    # The file each connection opened, to tell a write when the path no longer leads to it.
    where = None if in_memory or database is None else os.path.abspath(database)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, record: Any) -> None:
        if where is not None:
            record.info[_OPENED] = _file_identity(where)
        # Take over transaction control from the sqlite3 module so BEGIN IMMEDIATE is possible.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # No journal mode here: WAL is a property of the file, set by ensure_schema once the
        # database is known to be ours and of a version we accept (`use_wal`).
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")  # a committed delete survives a power cut
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        if options.get("apikey_tui_read", False):
            return
        write = options.get("apikey_tui_write", False)
        if write and where is not None:
            _refuse_a_file_gone(where, connection.connection.info.get(_OPENED))
        if write and not connection.connection.info.get(_WRITING):
            # A fork waits for it to end (forksafety.WRITE_WAIT): its child could never write.
            forksafety.write_begins()
            connection.connection.info[_WRITING] = True
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        if record.info.pop(_WRITING, False):  # committed or rolled back by now
            forksafety.write_ends()

    return engine


_OPENED = "apikey_tui_opened"  # a pooled SQLite connection's (device, inode) when it connected
_WRITING = "apikey_tui_writing"  # set from a write's BEGIN IMMEDIATE until the connection is back


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _refuse_a_file_gone(path: str, opened: tuple[int, int] | None) -> None:
    """Refuse a write when the SQLite file this connection holds was deleted or moved.

    An open connection keeps writing to the file it opened, wherever it went: a key made by a
    long-running app after `rm keys.db` was shown once and stored where no one could read it.
    One stat per write transaction (each is also an fsync): reads and the verifier's warm path
    pay nothing.
    """
    if opened is not None and _file_identity(path) != opened:
        raise StoreUnavailableError(
            f"the database file {path} was moved or deleted after it was opened; "
            "nothing was written; open the database again where it is now"
        )


def _create_private_file(path: Path) -> None:
    """Create the SQLite file owner-only (0600) if it does not exist yet, and its folder 0700."""
    try:
        if path.exists():  # may itself fail, e.g. on a folder this user may not search
            return
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreUnavailableError(f"cannot create database file {path}: {exc.strerror}") from None


def ensure_schema(engine: Engine, *, create: bool = True, verifier: bool = False) -> None:
    """Create the tables in an empty database, or check that an existing one is of our version.

    An older or newer database raises SchemaVersionError (`apikey_tui.db.schema` says why);
    only `upgrade_schema` changes an existing schema.
    """
    # A check that may not create only reads: it need not queue for SQLite's write lock.
    with _schema_transaction(engine, write=create) as conn:
        schema.ensure(conn, create=create, verifier=verifier)
    use_wal(engine)  # only now: a database we refuse is never changed, not even its journal


def use_wal(engine: Engine) -> None:
    """Put a SQLite database in WAL mode (readers never block the writer); it stays so.

    WAL is a property of the file. It is switched only after the schema check, so a database
    from a newer release is refused untouched; a database already in WAL costs one pragma.
    """
    if engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return
    with database_errors(engine):
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()  # autocommit (isolation_level None): a pragma outside BEGIN
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()
        finally:
            raw.close()


def upgrade_schema(engine: Engine) -> schema.Upgrade:
    """Upgrade the database in place, in one transaction; say what was done."""
    with _schema_transaction(engine, write=True) as conn:
        versions = schema.upgrade(conn)
    use_wal(engine)
    return versions


@contextmanager
def _schema_transaction(engine: Engine, *, write: bool) -> Iterator[Connection]:
    with (
        database_errors(engine),
        engine.execution_options(**(WRITE if write else {})).begin() as conn,
    ):
        if conn.dialect.name == "postgresql":
            if write:
                # Openers that may create or upgrade queue here: one does, the others then see it.
                _schema_lock(conn, engine)
            else:
                # A check that only reads takes no lock: it sees the schema as last committed
                # (an upgrade is one transaction; a table it alters is waited for, as long as a
                # write waits). The lock is the whole database's: a verifier's first check
                # waited for another schema's `db upgrade`, or for any role keeping it, and
                # answered 503 at its deadline.
                bound_lock_wait(conn)
        yield conn


def _schema_lock(conn: Connection, engine: Engine) -> None:
    """Take the schema's advisory lock; past the lock wait, say which lock in one line."""
    try:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
    except DBAPIError as exc:
        if not lock_timed_out(exc):
            raise
        raise StoreUnavailableError(
            "another session holds apikey-tui's schema lock (creating or upgrading the tables: "
            f"a 'db upgrade' under way; or keeping pg_advisory_lock({_SCHEMA_LOCK}): see "
            f"pg_locks and pg_stat_activity); waited {LOCK_WAIT_S:g} s and gave up, nothing was "
            f"changed: try again once it ends ({mask_url(str(engine.url))})"
        ) from None
