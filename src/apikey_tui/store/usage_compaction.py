"""Compaction of the usage table: minutes into hours after 48 h, hours into days after 30 d."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, text

from apikey_tui.db import WRITE, database_errors
from apikey_tui.db.models import DAY, HOUR, MINUTE, UsageBatchTable, UsageTable
from apikey_tui.store.context import StoreContext
from apikey_tui.store.usage import U, minute_of, window_start

HOURS_AFTER = timedelta(hours=48)  # minute rows older than this become hour rows
DAYS_AFTER = timedelta(days=30)  # hour rows older than this become day rows
DEFAULT_RETENTION = timedelta(days=400)  # rows older than this are deleted by `compact`
# A flush's mark (`apikey_tui_usage_batch`) is only read by that flush's retry, which follows
# within seconds, or when the database answers again: a week covers any outage worth the name.
MARKS_KEPT = timedelta(days=7)


@dataclass(frozen=True)
class Compaction:
    """What `compact` did: rows rolled into hours, into days, and deleted past the retention."""

    into_hours: int
    into_days: int
    expired: int


def compact(ctx: StoreContext, retention: timedelta = DEFAULT_RETENTION) -> Compaction:
    """Roll minutes older than 48 h into hours and hours older than 30 d into days; delete rows
    older than the retention. One transaction: killed midway, nothing changed.

    Also deletes the marks of verifier flushes older than `MARKS_KEPT` (they only guard a
    retry, which comes long before). Safe while verifiers append: on PostgreSQL each roll-up is
    one statement that deletes the rows and inserts their sums (a row appended meanwhile is
    neither, and stays for the next run); on SQLite the transaction holds the write lock
    throughout. Two at once: the second waits (PostgreSQL: an advisory lock; SQLite: the write
    lock) and finds less to do.
    """
    now = ctx.clock()
    into_hours = minute_of(now - HOURS_AFTER)
    into_hours -= into_hours % HOUR
    into_days = minute_of(now - DAYS_AFTER)
    into_days -= into_days % DAY
    expire = minute_of(window_start(now, retention))
    engine = ctx.engine.execution_options(**WRITE)
    with database_errors(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext('apikey_tui_usage'))"))
        expired = conn.execute(UsageTable.delete().where(U.minute < expire)).rowcount
        marks = UsageBatchTable.c.minute < minute_of(now - MARKS_KEPT)
        conn.execute(UsageBatchTable.delete().where(marks))
        hours = _roll(conn, (MINUTE,), into_hours, HOUR)
        days = _roll(conn, (MINUTE, HOUR), into_days, DAY)
    return Compaction(hours, days, expired)


def _roll(conn: Connection, spans: tuple[int, ...], before: int, span: int) -> int:
    """Replace rows of these spans starting before `before` by their sums per `span`; how many."""
    table, cols = UsageTable.name, "public_id, minute, span, kind, scope, requests"
    span_list = ", ".join(str(s) for s in spans)
    where = f"span IN ({span_list}) AND minute < :before"
    period = f"minute - minute % {span}"
    if conn.dialect.name == "postgresql":
        # One statement: exactly the rows deleted are summed, whatever commits meanwhile.
        statement = text(
            f"WITH moved AS (DELETE FROM {table} WHERE {where} RETURNING *), "  # noqa: S608
            f"rolled AS (INSERT INTO {table} ({cols}) "
            f"SELECT public_id, {period}, {span}, kind, scope, sum(requests) FROM moved "
            f"GROUP BY public_id, {period}, kind, scope RETURNING 1) "
            "SELECT (SELECT count(*) FROM moved)"
        )
        return int(conn.execute(statement, {"before": before}).scalar_one())
    conn.execute(
        text(
            f"INSERT INTO {table} ({cols}) "  # noqa: S608
            f"SELECT public_id, {period}, {span}, kind, scope, sum(requests) FROM {table} "
            f"WHERE {where} GROUP BY public_id, {period}, kind, scope"
        ),
        {"before": before},
    )
    return int(
        conn.execute(text(f"DELETE FROM {table} WHERE {where}"), {"before": before}).rowcount  # noqa: S608
    )
