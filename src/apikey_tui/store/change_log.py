"""The change log: writers append the ids a change touched; verifiers read what changed."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    Column,
    Connection,
    Dialect,
    Engine,
    Label,
    Select,
    bindparam,
    delete,
    func,
    insert,
)
from sqlalchemy import select as sa_select
from sqlmodel import Session

from apikey_tui import forksafety
from apikey_tui.db import READ, database_errors
from apikey_tui.db.driver_errors import typed_error
from apikey_tui.db.models import ChangeRow, KeyRow
from apikey_tui.store.records import in_grace

# How long a change stays in the log. A verifier that has not read the log for longer (on
# SQLite: one that served no request for that long) finds its position pruned and drops its
# whole cache once; everyone else reads only the changes.
RETENTION = timedelta(days=1)
# PostgreSQL: change transactions take this advisory lock before appending, so sequence numbers
# are handed out in commit order and a reader at N never misses an N-1 committed after it.
LOG_LOCK = 0x61706B79  # "apky"


class Change(NamedTuple):
    """One entry of the log as a reader sees it: the id's state now, not at the change."""

    seq: int
    public_id: str
    fingerprint: str | None  # None: made before fingerprints (or gone)
    exists: bool  # False: no key answers to this id any more (deleted, recreated, grace over)


CHANGE = ChangeRow.__table__  # type: ignore[attr-defined]
KEY = KeyRow.__table__  # type: ignore[attr-defined]
_current, _previous = KEY.alias("current_key"), KEY.alias("previous_key")

POSITION = sa_select(func.max(CHANGE.c.seq))
# Every change from a position on (that position's own row included: if it is gone, the log
# was pruned past the reader), with the changed id's fingerprint now, as a current id or as a
# previous one in grace.
# A key a request names is read by itself after this, not carried in it: a UNION ALL of its
# rows (when the log names it) was measured on SQLite (issue 31): right after a commit the cost
# is the pages SQLite reads again, not the statements, so it saved nothing on a changed key and
# cost a commit that changed other keys 12-20 us more (measured 2026-11-27, built and dropped).
CHANGES = (
    sa_select(
        CHANGE.c.seq,
        CHANGE.c.public_id,
        _current.c.id,
        _current.c.fingerprint,
        _previous.c.old_fingerprint,
        _previous.c.grace_until,
    )
    .select_from(
        CHANGE.outerjoin(_current, _current.c.public_id == CHANGE.c.public_id).outerjoin(
            _previous, _previous.c.old_public_id == CHANGE.c.public_id
        )
    )
    .where(CHANGE.c.seq >= bindparam("seq"))
    .order_by(CHANGE.c.seq)
    .limit(bindparam("limit"))
)
# More changes than this since a reader's last look (a bulk import, a reader long idle) are read
# as "fell behind": dropping the cache and reloading the index beats one query of a million rows.
MAX_CHANGES = 10_000
KEY_COUNT = sa_select(func.count()).select_from(KEY)
PAGE = (
    sa_select(
        KEY.c.id, KEY.c.public_id, KEY.c.fingerprint, KEY.c.old_public_id, KEY.c.old_fingerprint,
        KEY.c.grace_until,
    )
    .where(KEY.c.id > bindparam("after"))
    .order_by(KEY.c.id)
    .limit(bindparam("limit"))
)  # fmt: skip


def append(session: Session, public_ids: Iterable[str | None], now: datetime) -> None:
    """Log these ids as changed, in the caller's transaction; prune what is past RETENTION."""
    ids = sorted({public_id for public_id in public_ids if public_id})
    if not ids:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(sa_select(func.pg_advisory_xact_lock(LOG_LOCK)))
    connection.execute(insert(CHANGE), [{"public_id": i, "changed_at": now} for i in ids])
    newest = sa_select(func.max(CHANGE.c.seq)).scalar_subquery()
    connection.execute(
        delete(CHANGE).where(CHANGE.c.changed_at < now - RETENTION, CHANGE.c.seq < newest)
    )


def position(connection: Connection) -> int:
    """The newest entry's seq (the migration's first row keeps the log from being empty)."""
    return int(fetch(connection, POSITION, {})[0][0] or 0)


def since(reads: ReusedConnections, seq: int, now: datetime) -> list[Change] | None:
    """Changes after seq with each id's fingerprint now, read on one of the verifier's kept
    connections (`ReusedConnections.fetch`); None if seq's row was pruned (or more than
    MAX_CHANGES followed it)."""
    rows = reads.fetch(CHANGES, {"seq": seq, "limit": MAX_CHANGES + 2})
    if not rows or rows[0].seq != seq or len(rows) > MAX_CHANGES + 1:
        return None
    changes = []
    for row in rows[1:]:
        if row.id is not None:
            changes.append(Change(row.seq, row.public_id, row.fingerprint, True))
        elif in_grace(row.public_id, row.grace_until, now):  # matched as a previous id
            changes.append(Change(row.seq, row.public_id, row.old_fingerprint, True))
        else:
            changes.append(Change(row.seq, row.public_id, None, False))
    return changes


def page(
    connection: Connection, after: int, limit: int, now: datetime
) -> tuple[int, list[tuple[str, str | None]]]:
    """Up to limit keys after row `after` (and their previous ids in grace), and the last row."""
    pairs: list[tuple[str, str | None]] = []
    last = after
    for row in fetch(connection, PAGE, {"after": after, "limit": limit}):
        last = row.id
        pairs.append((row.public_id, row.fingerprint))
        if in_grace(row.old_public_id, row.grace_until, now):
            pairs.append((row.old_public_id, row.old_fingerprint))
    return last, pairs


class _Raw(NamedTuple):
    """A select as SQLite runs it: its SQL, its parameters in order, how to read a row."""

    sql: str
    names: tuple[str, ...]
    defaults: dict[str, Any]
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]  # (column, its type's reader)
    row: Callable[[Iterable[Any]], Any]  # a named tuple: row.seq, as SQLAlchemy's rows


# Per statement and kind of dialect (not per engine: a process may open many).
_raw: dict[tuple[Select[Any], type[Dialect], str], _Raw | None] = {}


def fetch(
    connection: Connection,
    statement: Select[Any],
    params: dict[str, Any],
    events: Any = None,
) -> Sequence[Any]:
    """The rows of one of the verifier's reads: `connection.execute(statement, params).all()`,
    at a fifth of its cost on SQLite.

    There the SQL text (compiled once per dialect) runs on the driver's own connection, whose
    statement cache keeps it prepared: no execution context, no compiled-cache lookup, a row a
    plain named tuple, each column read by its type's own result processor (the same values
    SQLAlchemy gives). The engine's before_ and after_cursor_execute listeners still see every
    statement (with no execution context). `events`: that engine's dispatch (`engine.dispatch`,
    as ReusedConnections passes it), asked whether anything listens; None asks the
    connection's own (the engine's joined with the connection's). A driver error runs the
    statement once more the ordinary way, so it reaches the handle_error listeners (the
    verifier's metric) and the one error mapper (`typed_error`, in every use of
    ReusedConnections) as every other does. PostgreSQL reads always go the ordinary way (its
    connection may be inside a transaction).
    """
    dialect = connection.dialect
    key = (statement, type(dialect), dialect.paramstyle)
    raw = _raw[key] if key in _raw else _raw.setdefault(key, _compile(statement, dialect))
    if raw is None:
        return connection.execute(statement, params).all()
    # The parameters in order, the statement's own values (a LIMIT's) beneath the caller's: C
    # calls only, where a generator cost a re-read eight Python calls.
    values = tuple(map((raw.defaults | params).__getitem__, raw.names))
    sql = raw.sql
    try:
        # The pool's DB-API connection (an attribute; driver_connection is three property
        # calls): for the sqlite3 driver, the driver's connection itself.
        dbapi = connection.connection.dbapi_connection
        # Whether any listens to these two events. The verifier's engine has other listeners
        # (connect, begin, handle_error), so SQLAlchemy's own test (_has_events) passes, and
        # asking through the connection's joined dispatch is 16 Python calls a read (~9% of a
        # re-read's instructions); the engine's own dispatch answers in two: that engine's,
        # its parents' and its class's listeners. Not asked: listeners on ReusedConnections'
        # own option engine and connections, which nothing outside it holds.
        if events is None:
            listened = connection._has_events or connection.engine._has_events
        else:
            listened = bool(events.before_cursor_execute) or bool(events.after_cursor_execute)
        if not listened:
            found = dbapi.execute(sql, values).fetchall()  # type: ignore[union-attr]
        else:
            cursor = dbapi.cursor()  # type: ignore[union-attr]
            dispatch = connection.dispatch
            before, after = dispatch.before_cursor_execute, dispatch.after_cursor_execute
            if before:
                for listener in before:
                    sql, values = listener(connection, cursor, sql, values, None, False)
            cursor.execute(sql, values)
            if after:
                after(connection, cursor, sql, values, None, False)
            found = cursor.fetchall()
            cursor.close()
    except Exception:  # sqlite3.Error: once more the ordinary way (listeners, metric, mapper)
        return connection.execute(statement, params).all()
    make, processors = raw.row, raw.processors
    if not processors:
        return [make(found_row) for found_row in found]
    rows = []
    for found_row in found:
        row = list(found_row)
        for i, read in processors:  # a datetime parse costs more than a whole row's copy
            value = row[i]
            if value is not None:
                row[i] = read(value)
        rows.append(make(row))
    return rows


def _compile(statement: Select[Any], dialect: Dialect) -> _Raw | None:
    """How `fetch` runs statement on SQLite; None elsewhere, or for a statement it cannot."""
    if dialect.name != "sqlite" or dialect.paramstyle != "qmark":
        return None
    compiled = statement.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    columns = statement.selected_columns
    keys = tuple(columns.keys())
    if not all(isinstance(column, Column | Label) for column in columns):
        return None  # an unnamed expression (max(seq)): SQLAlchemy names its row field itself
    if len(set(keys)) != len(keys) or not all(key.isidentifier() for key in keys):
        return None
    if any(
        compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names
    ):
        return None  # every parameter of ours is a str or an int: passed as it is
    read = (column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns)
    processors = tuple((i, process) for i, process in enumerate(read) if process is not None)
    defaults = {name: bind.effective_value for name, bind in compiled.binds.items()}
    row = namedtuple("Row", keys)  # type: ignore[misc]
    return _Raw(str(compiled), names, defaults, processors, row._make)


class ReusedConnections:
    """A few engine connections kept checked out and reused by the verifier's reads.

    A pool checkout and return costs more than a SQLite read; keeping one connection per
    concurrent reader (a free list: at most as many as ever ran at once, which the CheckGate
    bounds) skips both. A connection that failed is closed, never reused. In a forked child
    the list starts empty: the parent's connections are parked, never used or handed back.
    After any failure every kept connection is let go, so one retry reaches a fresh one.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine.execution_options(**READ)  # each read one statement, no BEGIN
        self._events = engine.dispatch  # whose cursor listeners `fetch` asks about
        self._free: list[Connection] = []
        forksafety.reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        # Parked, not dropped: a dropped checked-out connection is handed back to the pool by
        # the garbage collector, in this child: under the pool's lock (held for good if a
        # parent's thread held it at the fork) and, when the pool has no room, closed, which
        # ends the parent's PostgreSQL session (libpq sends Terminate on the shared socket).
        forksafety.park(self._free)
        self._free = []

    def connection(self) -> _Read:
        """A connection for one read (`with reads.connection() as conn:`); database errors
        come out typed, as from `database_errors`."""
        return _Read(self)

    def fetch(self, statement: Select[Any], params: dict[str, Any]) -> Sequence[Any]:
        """`fetch` on a kept connection, as `with self.connection() as conn:` runs it, in one
        call: a re-read makes two such reads, and the context object's four calls were a
        sixth of each one's Python."""
        try:
            conn = self._free.pop()
        except IndexError:
            conn = self._connect()
        try:
            rows = fetch(conn, statement, params, self._events)
            conn.rollback()  # ends the read (SQLAlchemy's implicit transaction, if any)
        except BaseException as exc:
            self._lost(conn, exc)
            raise
        self._free.append(conn)
        return rows

    def _connect(self) -> Connection:
        """A new connection (none kept free); its error typed."""
        try:
            return self._engine.connect()
        except Exception as exc:
            error = typed_error(self._engine, exc)
            if error is None:
                raise
            raise error from None

    def _lost(self, conn: Connection, exc: BaseException) -> None:
        """A read on conn (or the rollback ending it) raised exc: close conn and every kept
        connection, then raise exc's typed error (or return for the caller to raise exc)."""
        try:
            self._failed(conn)
        except Exception as failed:  # closing after the failure failed too
            error = typed_error(self._engine, failed)
            if error is None:
                raise
            raise error from None
        if isinstance(exc, Exception):  # the read's own error
            error = typed_error(self._engine, exc)
            if error is not None:
                raise error from None

    def _failed(self, conn: Connection) -> None:
        """Close conn and let every kept connection go: they likely share its fate (a server
        restart), so the next read connects."""
        free, self._free = self._free, []
        for other in [conn, *free]:
            other.invalidate()
            other.close()

    def open(self, count: int) -> None:
        """Keep `count` connections open now (at start-up: the index load takes one, the first
        request another, and neither pays a connect)."""
        with database_errors(self._engine):
            while len(self._free) < count:
                self._free.append(self._engine.connect())

    def close(self) -> None:
        """Return every kept connection to the engine's pool."""
        free, self._free = self._free, []
        for conn in free:
            conn.close()


class _Read:
    """One read on a kept connection: `ReusedConnections.connection()`.

    A class rather than a generator's context manager nested in `database_errors`: those two
    cost a SQLite read a third of its own time (~9 of ~27 us). The verifier's two reads of a
    re-read skip even this (`ReusedConnections.fetch`); the index load and the log position
    use it. Errors are mapped by `typed_error`, the mapper `database_errors` itself uses
    (`ReusedConnections._lost`); a connection that failed (or whose read raised anything) is
    closed, never reused.
    """

    __slots__ = ("_conn", "_reads")

    def __init__(self, reads: ReusedConnections) -> None:
        self._reads = reads
        self._conn: Connection | None = None

    def __enter__(self) -> Connection:
        reads = self._reads
        try:
            self._conn = conn = reads._free.pop()
        except IndexError:
            self._conn = conn = reads._connect()
        return conn

    def __exit__(self, kind: object, exc: BaseException | None, _tb: object) -> None:
        reads, conn = self._reads, self._conn
        assert conn is not None
        if exc is None:
            try:
                conn.rollback()  # ends the read (SQLAlchemy's implicit transaction, if any)
            except BaseException as failed:
                reads._lost(conn, failed)
                raise
            reads._free.append(conn)
            return
        reads._lost(conn, exc)
