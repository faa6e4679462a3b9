"""The one place that turns database and driver errors into the typed error tree."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from apikey_tui.config import mask_url
from apikey_tui.errors import (
    ApiKeyError,
    DatabaseCorruptError,
    DatabasePermissionError,
    StoreUnavailableError,
)

# The constraint failures a caller may give a meaning of its own (`database_errors`).
UNIQUE = "unique"
FOREIGN_KEY = "foreign key"
Conflicts = Mapping[str, Callable[[], ApiKeyError]]
# Told apart by code, never by message text: SQLite's extended result codes (the sqlite3 module
# reports them), PostgreSQL's SQLSTATEs.
_SQLITE_CONFLICTS = {2067: UNIQUE, 1555: UNIQUE, 787: FOREIGN_KEY}
_POSTGRES_CONFLICTS = {"23505": UNIQUE, "23503": FOREIGN_KEY}

# SQLite result codes (the low byte of an extended code) and PostgreSQL SQLSTATEs that get a
# clearer error than "database unavailable".
_SQLITE_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_SQLITE_DENIED = {3, 8, 23}  # SQLITE_PERM, SQLITE_READONLY, SQLITE_AUTH
# Codes that a full disk or a read-only file system also produce (SQLITE_IOERR, SQLITE_FULL,
# SQLITE_CANTOPEN, and the two above): the file system is asked which it is.
_SQLITE_PLACE = {3, 8, 10, 11, 13, 14, 26}
_POSTGRES_CORRUPT = {"XX001", "XX002"}  # data_corrupted, index_corrupted
# insufficient_privilege; invalid_schema_name, which is what a role without USAGE on the
# schema in its search_path meets when it looks for (or creates) the tables.
_POSTGRES_DENIED = {"42501", "3F000"}
_POSTGRES_LOCK_TIMEOUT = "55P03"  # lock_not_available: a statement's lock_timeout ran out


def lock_timed_out(exc: Exception) -> bool:
    """Whether a PostgreSQL statement gave up waiting for a lock another session held."""
    origin = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    return str(getattr(origin, "sqlstate", None) or "") == _POSTGRES_LOCK_TIMEOUT


@contextmanager
def database_errors(engine: Engine, conflicts: Conflicts | None = None) -> Iterator[None]:
    """Turn every SQLAlchemy or driver error into StoreUnavailableError or one of its subclasses.

    The one place that does it: wrap every use of an engine or a raw connection in it. The
    message is one line naming the masked URL and the driver's reason; never the statement,
    its parameters, or a value the database echoes back. Other exceptions pass unchanged.
    conflicts: what a UNIQUE or FOREIGN_KEY failure means to this caller (a duplicate name, a
    scope removed meanwhile); the error it makes is raised instead. Any other constraint
    failure is a refused change.
    """
    try:
        yield
    except Exception as exc:
        error = typed_error(engine, exc, conflicts)
        if error is None:
            raise
        raise error from None


def typed_error(
    engine: Engine, exc: Exception, conflicts: Conflicts | None = None
) -> ApiKeyError | None:
    """What `database_errors` raises for exc instead (None: no database error, raise it as it is).

    For a hot path that cannot afford a generator's context manager (the verifier's reads,
    `change_log.ReusedConnections`): the same mapping, called where a read failed.
    """
    if not isinstance(exc, _driver_errors()):
        return None
    meaning = (conflicts or {}).get(_conflict(exc) or "")
    if meaning is not None:
        return meaning()
    file = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    return _store_error(exc, mask_url(str(engine.url)), file)


def _conflict(exc: Exception) -> str | None:
    """UNIQUE or FOREIGN_KEY for those constraint failures, else None."""
    origin = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    code = getattr(origin, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _SQLITE_CONFLICTS.get(code)
    return _POSTGRES_CONFLICTS.get(str(getattr(origin, "sqlstate", None) or ""))


def _driver_errors() -> tuple[type[Exception], ...]:
    # psycopg is optional and imported only by a PostgreSQL engine: when it is not loaded, none
    # of its errors can exist, and a SQLite-only process never pays for importing it.
    psycopg_error = getattr(sys.modules.get("psycopg"), "Error", None)
    found: tuple[type[Exception], ...] = (SQLAlchemyError, sqlite3.Error)
    return found if psycopg_error is None else (*found, psycopg_error)


def _store_error(exc: Exception, where: str, file: str | None = None) -> StoreUnavailableError:
    origin = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    code = getattr(origin, "sqlite_errorcode", None)
    sqlite_code = code & 0xFF if isinstance(code, int) else None
    sqlstate = str(getattr(origin, "sqlstate", None) or "")
    if sqlite_code in _SQLITE_PLACE and file:
        # SQLite says "disk I/O error" when it cannot grow its -shm on a full disk, and
        # "malformed" when a read-only mount keeps it from reading its -wal: ask the file
        # system what is really wrong before calling the file damaged.
        found = _file_system_state(file)
        if found == "read-only":
            message = "the file system holding the database is read-only"
            return DatabasePermissionError(f"{message} ({where}): {_reason(exc)}")
        if found == "full":
            message = "the disk holding the database is full"
            return StoreUnavailableError(f"{message} ({where}): {_reason(exc)}")
    if sqlite_code in _SQLITE_CORRUPT:
        message = "the database file is damaged or is not a SQLite database"
        return DatabaseCorruptError(f"{message} ({where}): {_reason(exc)}")
    if sqlstate in _POSTGRES_CORRUPT:
        message = "the database server reports damaged data"
        return DatabaseCorruptError(f"{message} ({where}): {_reason(exc)}")
    if sqlite_code in _SQLITE_DENIED:
        message = "this user may not write the database file"
        return DatabasePermissionError(f"{message} ({where}): {_reason(exc)}")
    if sqlstate in _POSTGRES_DENIED:
        message = "the database role lacks a privilege apikey-tui needs"
        return DatabasePermissionError(f"{message} ({where}): {_reason(exc)}")
    if sqlstate == _POSTGRES_LOCK_TIMEOUT:  # only writes set a lock_timeout (`engine`)
        return StoreUnavailableError(
            "another session holds a lock this change needs (an app or script left open, a "
            "long transaction, a service's role holding a key's row: see pg_stat_activity); "
            f"waited for it and gave up, nothing was changed ({where})"
        )
    if sqlstate.startswith("22"):
        # A data exception's text may quote the offending value: name its kind instead.
        return StoreUnavailableError(
            f"the database refused a value ({where}): {type(origin).__name__}"
        )
    if sqlstate.startswith("23") or sqlite_code == 19:  # SQLITE_CONSTRAINT
        # Those a caller expects have their own errors (`conflicts` above).
        return StoreUnavailableError(f"the database refused a change ({where}): {_reason(exc)}")
    # PEP 249 gives every driver the same class names, so raw driver errors sort alike.
    lost = {cls.__name__ for cls in type(origin).__mro__} & {"OperationalError", "InterfaceError"}
    if lost or isinstance(exc, PoolTimeoutError):
        return StoreUnavailableError(f"database unavailable ({where}): {_reason(exc)}")
    return StoreUnavailableError(f"database error ({where}): {_reason(exc)}")


def _file_system_state(file: str) -> str | None:
    """'read-only' or 'full' when the file system holding `file` is so, else None."""
    if file == ":memory:" or file.startswith("file:"):
        return None
    try:
        found = os.statvfs(os.path.dirname(os.path.abspath(file)))
    except OSError:
        return None
    if found.f_flag & os.ST_RDONLY:
        return "read-only"
    if found.f_bavail * found.f_frsize < _FULL_BELOW:
        return "full"
    return None


_FULL_BELOW = 64 * 1024  # bytes left: SQLite grows its files by pages, not by a few bytes


def _reason(exc: Exception) -> str:
    """The first line of the driver's message (not SQLAlchemy's, which adds the statement)."""
    origin = exc.orig if isinstance(exc, StatementError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(origin).splitlines() if line.strip()]
    first = lines[0] if lines else type(origin).__name__
    return "".join(c if c.isprintable() else "?" for c in first)[:200]
