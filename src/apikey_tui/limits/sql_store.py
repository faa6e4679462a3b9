"""The store of counts in the key database: an UNLOGGED table on PostgreSQL, a table on SQLite."""

from __future__ import annotations

import secrets
import time

from sqlalchemy import Connection, Engine, text

from apikey_tui.clock import Clock, system_clock
from apikey_tui.db.driver_errors import database_errors
from apikey_tui.db.engine import WRITE
from apikey_tui.errors import StoreUnavailableError
from apikey_tui.limits.port import Grant

# Windows whose end is this far past are deleted now and then (PRUNE_EVERY_S per process):
# a lease is never judged after its window's end, so old rows only take room.
PRUNE_AFTER_S = 60.0
PRUNE_EVERY_S = 30.0

# PostgreSQL's clock decides the window (clock_timestamp(): the moment of the statement, not of
# the transaction), so hosts with skewed clocks agree. SQLite serves one host: its process clock.
_POSTGRES_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_MARKER = "SELECT boot, created_at, lost_at FROM apikey_tui_limit_boot WHERE id = 1"
_MAKE_MARKER = (
    "INSERT INTO apikey_tui_limit_boot (id, boot, created_at, lost_at) "
    "VALUES (1, :boot, :now, :lost) ON CONFLICT (id) DO NOTHING"
)
_MARK_LOST = (
    "UPDATE apikey_tui_limit_boot SET lost_at = created_at WHERE id = 1 AND lost_at IS NULL"
)
# SET expressions read the row as it was: the grant and the new count agree, in one statement.
_TAKE = """
INSERT INTO apikey_tui_limit_count AS c (limit_key, window_index, used, last_grant, ends_at)
VALUES (:key, :window, :first, :first, :ends)
ON CONFLICT (limit_key, window_index) DO UPDATE SET
  last_grant = {greatest}(0, {least}(:want, :n - c.used)),
  used = c.used + {greatest}(0, {least}(:want, :n - c.used))
RETURNING last_grant
"""
_USED = "SELECT used FROM apikey_tui_limit_count WHERE limit_key = :key AND window_index = :window"
_PRUNE = "DELETE FROM apikey_tui_limit_count WHERE ends_at < :before"


class SqlLimitStore:
    """Counts in the key database, shared by every process (and, on PostgreSQL, every host).

    One transaction per take: read the store's now and the boot marker, then one atomic upsert.
    On SQLite the transaction is BEGIN IMMEDIATE (takes of every process on the host queue for
    the file's write lock) and `clock`, the process's injected wall clock, decides the window.
    """

    def __init__(self, engine: Engine, *, clock: Clock = system_clock) -> None:
        self._engine = engine
        self._clock = clock
        self._postgres = engine.dialect.name == "postgresql"
        names = ("GREATEST", "LEAST") if self._postgres else ("MAX", "MIN")
        self._take = text(_TAKE.format(greatest=names[0], least=names[1]))
        self._pruned_at = float("-inf")

    def take(
        self, limit_key: str, n: int, window_seconds: int, want: int, known_boot: str
    ) -> Grant:
        """Grant up to want tokens of the current window; see LimitStore."""
        with database_errors(self._engine), self._engine.connect() as conn:
            with conn.execution_options(**WRITE).begin():
                now = self._now(conn)
                boot, lost = self._marker(conn, now, known_boot)
                window = int(now // window_seconds)
                ends = float((window + 1) * window_seconds)
                granted = 0
                if lost is None or window * window_seconds > lost:
                    found = conn.execute(
                        self._take,
                        {
                            "key": limit_key, "window": window, "first": min(want, n),
                            "ends": ends, "want": want, "n": n,
                        },
                    )  # fmt: skip
                    granted = int(found.scalar_one())
                self._prune(conn, now)
        return Grant(granted, ends, now, boot)

    def window_use(self, limit_key: str, window_seconds: int) -> tuple[int, float]:
        """The window's count, by the store's clock (CountReader.window_use)."""
        with database_errors(self._engine), self._engine.connect() as conn:
            now = self._now(conn)
            window = int(now // window_seconds)
            found = conn.execute(text(_USED), {"key": limit_key, "window": window}).scalar()
        return int(found or 0), float((window + 1) * window_seconds)

    def counted(self) -> bool:
        """Whether the boot marker is there (CountReader.counted)."""
        with database_errors(self._engine), self._engine.connect() as conn:
            return conn.execute(text(_MARKER)).first() is not None

    def _now(self, conn: Connection) -> float:
        if self._postgres:
            return float(conn.execute(text(_POSTGRES_NOW)).scalar_one())
        return self._clock().timestamp()

    def _marker(self, conn: Connection, now: float, known: str) -> tuple[str, float | None]:
        """The boot id and lost_at, making the marker when it is absent (see LimitStore)."""
        row = conn.execute(text(_MARKER)).first()
        if row is None:
            conn.execute(
                text(_MAKE_MARKER),
                {"boot": secrets.token_hex(8), "now": now, "lost": now if known else None},
            )
            row = conn.execute(text(_MARKER)).first()
            if row is None:  # made meanwhile by another transaction, not yet visible here
                raise StoreUnavailableError("the limits store is being set up; try again")
        boot, created, lost = row
        if known and boot != known and lost is None:
            conn.execute(text(_MARK_LOST))
            lost = created
        return str(boot), (None if lost is None else float(lost))

    def _prune(self, conn: Connection, now: float) -> None:
        """Now and then (per process), delete windows long past their end."""
        moment = time.monotonic()
        if moment - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = moment
        conn.execute(text(_PRUNE), {"before": now - PRUNE_AFTER_S})

    def forget_connections(self) -> None:
        """In a forked child: the pool's connections are the parent's (never close them)."""
        self._engine.dispose(close=False)
