"""The change log: writers append the ids a change touched; verifiers read what changed."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import (
    Dialect,
    Engine,
    PoolProxiedConnection,
    Select,
    bindparam,
    delete,
    func,
    insert,
)
from sqlalchemy import select as sa_select
from sqlmodel import Session

from apikey_tui import forksafety
from apikey_tui.db import database_errors
from apikey_tui.db.models import ChangeRow, KeyRow

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


def position(reads: HotReads) -> int:
    """The newest entry's seq (the migration's first row keeps the log from being empty)."""
    return int(reads.run(POSITION)[0][0] or 0)


def since(reads: HotReads, seq: int, now: datetime) -> list[Change] | None:
    """Changes after seq with each id's fingerprint now; None if seq's row was pruned (or
    more than MAX_CHANGES followed it)."""
    rows = reads.run(CHANGES, {"seq": seq, "limit": MAX_CHANGES + 2})
    if not rows or rows[0].seq != seq or len(rows) > MAX_CHANGES + 1:
        return None
    changes = []
    for row in rows[1:]:
        if row.id is not None:
            changes.append(Change(row.seq, row.public_id, row.fingerprint, True))
        elif row.grace_until is not None and row.grace_until > now:
            changes.append(Change(row.seq, row.public_id, row.old_fingerprint, True))
        else:
            changes.append(Change(row.seq, row.public_id, None, False))
    return changes


def page(
    reads: HotReads, after: int, limit: int, now: datetime
) -> tuple[int, list[tuple[str, str | None]]]:
    """Up to limit keys after row `after` (and their previous ids in grace), and the last row."""
    pairs: list[tuple[str, str | None]] = []
    last = after
    for row in reads.run(PAGE, {"after": after, "limit": limit}):
        last = row.id
        pairs.append((row.public_id, row.fingerprint))
        if row.old_public_id is not None and row.grace_until is not None and row.grace_until > now:
            pairs.append((row.old_public_id, row.old_fingerprint))
    return last, pairs


class _Prepared:
    """A Core select compiled once for one dialect, run on a raw DBAPI cursor.

    SQLAlchemy's execution machinery (cache key, context, events, result wrapping) costs about
    130 us a statement, five times what SQLite spends running it; the verifier's reads are few
    and fixed, so they are compiled once and their rows converted with the columns' own result
    processors (UTC datetimes included) into named tuples.
    """

    def __init__(self, statement: Select[Any], dialect: Dialect) -> None:
        self.compiled = compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self.order = compiled.positiontup if compiled.positional else None
        columns = list(statement.selected_columns)
        names = [str(c.key) for c in columns]  # an unnamed one (count, max) is renamed _0...
        self.row: Any = namedtuple("Row", names, rename=True)  # type: ignore[misc]
        self.processors: list[Any] = [
            c.type._cached_result_processor(dialect, None) for c in columns
        ]

    def parameters(self, given: Mapping[str, Any]) -> Any:
        # With the defaults the statement carries (SQLite's implicit OFFSET 0, for one).
        values = self.compiled.construct_params(dict(given))
        return values if self.order is None else [values[name] for name in self.order]

    def rows(self, raw: Sequence[Any]) -> list[Any]:
        processors, row = self.processors, self.row
        return [
            row(*(value if p is None else p(value) for p, value in zip(processors, r, strict=True)))
            for r in raw
        ]


class HotReads:
    """The verifier's reads: prepared statements on a few kept DBAPI connections.

    A pool checkout and return costs more than a SQLite read; keeping one connection per
    concurrent reader (a free list: at most as many as ever ran at once, which the CheckGate
    bounds) skips both. Reads run outside any transaction (SQLite: no BEGIN, each statement
    its own snapshot; PostgreSQL: autocommit), so nothing is held between them. After any
    failure every kept connection is let go, so one retry reaches a fresh one. In a forked
    child the list starts empty: the parent's connections are parked by the verifier.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._free: list[PoolProxiedConnection] = []
        self._prepared: dict[Select[Any], _Prepared] = {}
        forksafety.reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._free = []

    def run(self, statement: Select[Any], params: Mapping[str, Any] | None = None) -> list[Any]:
        """The rows of one read, as named tuples; database errors come out typed."""
        prepared = self._prepared.get(statement)
        if prepared is None:
            prepared = self._prepared[statement] = _Prepared(statement, self._engine.dialect)
        with database_errors(self._engine):
            try:
                conn = self._free.pop()
            except IndexError:
                conn = self._engine.raw_connection()
                if self._engine.dialect.name == "postgresql":
                    conn.driver_connection.autocommit = True  # type: ignore[union-attr]
            try:
                cursor = conn.cursor()
                cursor.execute(prepared.sql, prepared.parameters(params or {}))
                raw = cursor.fetchall()
                cursor.close()
            except BaseException:
                # The others likely share its fate (a server restart): the next read connects.
                conn.invalidate()
                self._drop_all()
                raise
            self._free.append(conn)
        return prepared.rows(raw)

    def _drop_all(self) -> None:
        free, self._free = self._free, []
        for conn in free:
            conn.invalidate()

    def close(self) -> None:
        """Return every kept connection to the engine's pool, as the pool lent it."""
        free, self._free = self._free, []
        for conn in free:
            if self._engine.dialect.name == "postgresql":
                conn.driver_connection.autocommit = False  # type: ignore[union-attr]
            conn.close()
