"""Engines for SQLite and PostgreSQL, schema creation and the schema version check."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.pool import StaticPool

from apikey_tui import schema
from apikey_tui.config import mask_url
from apikey_tui.errors import StoreUnavailableError
from apikey_tui.sqlite_watch import existing_file_uri

# Execution option that makes a SQLite transaction take the write lock at BEGIN: a
# read-then-write transaction that starts deferred can fail with "database is locked" when
# another writer got in between, and the busy timeout cannot help it.
WRITE = {"apikey_tui_write": True}
SQLITE_BUSY_TIMEOUT_MS = 10_000
POSTGRES_CONNECT_TIMEOUT_S = 5
_SCHEMA_LOCK = 0x61706B74  # 'apkt': serialises schema changes between PostgreSQL clients


def make_engine(url: str, *, create: bool = True) -> Engine:
    """Create an engine for a SQLite or PostgreSQL URL with the settings this package relies on.

    With create=False a missing SQLite file stays missing (connections fail instead): a service
    must not create, as its own Unix user, the database its admins are meant to create.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, create=create)
    if parsed.drivername == "postgresql":  # plain postgresql:// means psycopg 3 here
        parsed = parsed.set(drivername="postgresql+psycopg")
    return create_engine(
        parsed,
        hide_parameters=True,  # bound parameters (hashes) never reach an exception message
        pool_pre_ping=True,  # a restarted server costs one reconnect, not an error
        connect_args={"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S},
    )


def _sqlite_engine(url: str, *, create: bool) -> Engine:
    database = make_url(url).database
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

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take over transaction control from the sqlite3 module so BEGIN IMMEDIATE is possible.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=FULL")  # a committed delete survives a power cut
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("apikey_tui_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _create_private_file(path: Path) -> None:
    """Create the SQLite file owner-only (0600) if it does not exist yet, and its folder 0700."""
    if path.exists():
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreUnavailableError(f"cannot create database file {path}: {exc.strerror}") from None


@contextmanager
def database_errors(engine: Engine) -> Iterator[None]:
    """Turn connection-level database failures into one-line StoreUnavailableError."""
    try:
        yield
    except (OperationalError, InterfaceError, PoolTimeoutError) as exc:
        raise StoreUnavailableError(
            f"database unavailable ({mask_url(str(engine.url))}): {_reason(exc)}"
        ) from None


def _reason(exc: Exception) -> str:
    origin = exc.orig if isinstance(exc, DBAPIError) else exc
    lines = [line.strip() for line in str(origin).splitlines() if line.strip()]
    return (lines[0] if lines else type(origin).__name__)[:200]


def ensure_schema(engine: Engine, *, create: bool = True) -> None:
    """Create the tables in an empty database, or check that an existing one is of our version.

    An older or newer database raises SchemaVersionError (`apikey_tui.schema` says why);
    only `upgrade_schema` changes an existing schema.
    """
    with _schema_transaction(engine) as conn:
        schema.ensure(conn, create=create)


def upgrade_schema(engine: Engine) -> tuple[int | None, int]:
    """Upgrade the database in place, in one transaction; return (version before, after)."""
    with _schema_transaction(engine) as conn:
        return schema.upgrade(conn)


@contextmanager
def _schema_transaction(engine: Engine) -> Iterator[Connection]:
    with database_errors(engine), engine.execution_options(**WRITE).begin() as conn:
        if conn.dialect.name == "postgresql":
            # Concurrent openers queue here: one creates or upgrades, the others then see it.
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _SCHEMA_LOCK})
        yield conn
