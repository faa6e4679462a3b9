"""The verifier's port: what it reads from the key database and the little it writes.

Nothing here can create a key, change a secret's scopes or hide anything from the audit
trail; the verifier imports nothing else of the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Table, bindparam, func, or_, text, update
from sqlalchemy import select as sa_select
from sqlmodel import Session, col

from apikey_tui.clock import Clock, system_clock
from apikey_tui.db import database_errors
from apikey_tui.db.engine import NO_LOCK_WAIT_S, bound_lock_wait
from apikey_tui.db.models import (
    KeyRow,
    OwnerNetworkRow,
    OwnerRow,
    UsageBatchTable,
    UsageTable,
    usage_minute,
)
from apikey_tui.hashing import SecretHasher
from apikey_tui.limits.model import Limit, limits_of_text
from apikey_tui.networks import NetworkRules, rules_of_text
from apikey_tui.store import change_log
from apikey_tui.store.change_log import Change as Change  # the verifier's view of a change
from apikey_tui.store.context import StoreContext
from apikey_tui.store.metadata import NO_META as NO_META  # the verifier's empty caller.meta
from apikey_tui.store.metadata import caller_meta
from apikey_tui.store.records import (
    INFO_COLUMNS,
    KEY_TABLE,
    SCOPE_TABLE,
    in_grace,
    key_info,
    previous_until,
    secret_works,
)
from apikey_tui.store.types import Actor, KeyInfo

# A flush of usage counts on SQLite is multi-row INSERTs of this many rows (6 values a row stays
# under its 32,766 bound parameters), in one transaction; on PostgreSQL one COPY.
# Rows one SQLite INSERT carries. Every length of VALUES list is its own statement, which the
# driver keeps prepared (128 of them, ~0.6 KB a row each): one length for full chunks and one
# row for the rest (executemany) keep two, where a chunk per flush's remainder kept ~2 MB a
# flush until 128 were cached (issue 31). 500 rows write as fast as 5,000.
USAGE_ROWS_PER_INSERT = 500
_USAGE_COLUMNS = ", ".join(c.name for c in UsageTable.columns)
_USAGE_COPY = f"COPY {UsageTable.name} ({_USAGE_COLUMNS}) FROM STDIN"
# A flush's mark: no row when the batch was written before (its answer was lost). No conflict
# target: DO NOTHING then needs only the INSERT privilege a verifier's role has.
_MARK_BATCH = (
    f"INSERT INTO {UsageBatchTable.name} (id, minute) VALUES (:id, :minute) ON CONFLICT DO NOTHING"  # noqa: S608
)

# PostgreSQL: every recorded change also NOTIFYs this channel in its own transaction, so
# verifiers on every host hear of it at commit (and never before: a rolled-back change is silent).
# The notice names the schema the change was made in: one channel serves a whole database, and a
# deployment in another schema must not wake this one's verifiers (a read of the log per notice).
CHANGE_CHANNEL = "apikey_tui_changes"
# That schema as writers and listeners both name it: the one holding the change log their
# search_path finds, not current_schema(), the first schema of the path that exists. A verifier
# role with a schema of its own name (PostgreSQL's default path is `"$user", public`) has its
# own as current_schema() while it reads the keys in public: it counted no admin's notice, and
# a deleted key stayed valid until a heartbeat happened to be peeked (43 s at a 1 s bound).
_LOG = change_log.CHANGE.name  # our own table's name: no input reaches this SQL
NOTICE_SCHEMA = (
    "coalesce((SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"  # noqa: S608
    f" ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass('{_LOG}')),"
    " current_schema(), '')"
)
_NOTIFY = text(f"SELECT pg_notify(:channel, {NOTICE_SCHEMA})")
# The change log's newest position: what a listener's heartbeat asks (`PushFreshness`).
LOG_POSITION = change_log.POSITION


def announce(session: Session, public_ids: Iterable[str | None], now: datetime) -> None:
    """Log these ids as changed and NOTIFY verifiers (PostgreSQL), in session's transaction."""
    change_log.append(session, public_ids, now)
    if session.get_bind().dialect.name == "postgresql":
        with session.no_autoflush:  # pending rows flush at commit, where callers expect it
            session.execute(_NOTIFY, {"channel": CHANGE_CHANNEL})


@dataclass(frozen=True)
class Credential:
    """A key with its stored argon2id hash and secret fingerprint, for the verifier.

    Neither shows in a repr. fingerprint is None for keys made before schema version 2.
    For a rotated key's previous id (still in grace), info is the key's own (owner, name,
    scopes: a scope change applies to both secrets) with that id as public_id, and the hash and
    fingerprint are the previous secret's. expires_at is the moment this secret stops working:
    the key's expiry, or for a previous secret the earlier of that and the end of the grace.
    """

    info: KeyInfo
    secret_hash: str = field(repr=False)
    fingerprint: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None
    disabled: bool = False
    # Limits (schema version 9): the key's own are info.limits; its owner's pool is here.
    owner_limits: tuple[Limit, ...] = ()
    # Networks (schema version 10): the key's own are info.networks; its owner's are here.
    owner_networks: NetworkRules | None = None
    # Schema version 11: what services read as caller.meta, the owner's metadata with the
    # key's on top, built once here so a request reads it with no query (`metadata.caller_meta`).
    meta: Mapping[str, str] = field(default_factory=lambda: NO_META, compare=False)

    def works(self, now: datetime) -> bool:
        """Whether this secret works at now (`records.secret_works`)."""
        return secret_works(self.disabled, self.expires_at, now)


OWNER_TABLE: Table = OwnerRow.__table__  # type: ignore[attr-defined]
OWNER_NETWORK_TABLE: Table = OwnerNetworkRow.__table__  # type: ignore[attr-defined]

# Built once: on SQLite, building a select() costs more than running it.
_CREDENTIAL = (
    sa_select(
        *INFO_COLUMNS,
        KEY_TABLE.c.secret_hash,
        KEY_TABLE.c.fingerprint,
        KEY_TABLE.c.old_secret_hash,
        KEY_TABLE.c.old_fingerprint,
        SCOPE_TABLE.c.scope,
        OWNER_TABLE.c.limits.label("owner_limits"),
        OWNER_TABLE.c.meta.label("owner_meta"),
        OWNER_NETWORK_TABLE.c.networks.label("owner_networks"),
    )
    .select_from(
        KEY_TABLE.outerjoin(SCOPE_TABLE, SCOPE_TABLE.c.key_id == KEY_TABLE.c.id)
        .outerjoin(OWNER_TABLE, OWNER_TABLE.c.owner == KEY_TABLE.c.owner)
        .outerjoin(OWNER_NETWORK_TABLE, OWNER_NETWORK_TABLE.c.owner == KEY_TABLE.c.owner)
    )
    .where(
        or_(
            KEY_TABLE.c.public_id == bindparam("pid"), KEY_TABLE.c.old_public_id == bindparam("pid")
        )
    )
    .order_by(SCOPE_TABLE.c.scope)
)


class CredentialReads(StoreContext):
    """Reads credentials and records use; the store's admin side (`KeyStore`) builds on it."""

    def __init__(self, engine: Engine, **options: Any) -> None:
        super().__init__(engine, **options)
        self._reads = change_log.ReusedConnections(engine)  # the verifier's hot reads

    def release(self) -> None:
        """Return the connections kept for reads to the engine's pool; the engine stays open
        (for a store made per task on a shared engine)."""
        self._reads.close()

    def close(self) -> None:
        """Release the store's database connections."""
        self.release()
        super().close()

    def open_reads(self, count: int) -> None:
        """Connect `count` reads now, so the first requests find them open."""
        self._reads.open(count)

    def credential(self, public_id: str) -> Credential | None:
        """Return the key with this public id, its hash and fingerprint, or None.

        public_id may be a key's current id or a rotated key's previous id while its grace runs
        (by the store's clock; after it, None). Expired and disabled keys are returned, marked
        (expires_at, disabled), for the verifier to refuse. One prebuilt SELECT joining the
        scopes, on a reused connection (on SQLite a prepared statement, `change_log.fetch`): a
        cold check costs one round trip.
        """
        rows = self._reads.fetch(_CREDENTIAL, {"pid": public_id})
        if not rows:
            return None
        r = rows[0]
        scopes = [row.scope for row in rows if row.scope is not None]
        now = self.clock()
        info = key_info(r, scopes, now, public_id=public_id)
        disabled = r.disabled_at is not None
        pool = limits_of_text(r.owner_limits)
        fence = rules_of_text(r.owner_networks)
        meta = caller_meta(r.owner_meta, r.meta)
        if r.public_id == public_id:
            return Credential(
                info, r.secret_hash, r.fingerprint, r.expires_at, disabled, pool, fence, meta
            )
        if not in_grace(r.old_public_id, r.grace_until, now) or r.old_secret_hash is None:
            return None  # the previous secret's grace has ended
        assert r.grace_until is not None
        until = previous_until(r.expires_at, r.grace_until)
        return Credential(
            info, r.old_secret_hash, r.old_fingerprint, until, disabled, pool, fence, meta
        )

    def key_count(self) -> int:
        """How many keys there are (to size the verifier's key index)."""
        with self._reads.connection() as conn:
            return int(conn.execute(change_log.KEY_COUNT).scalar_one())

    def fingerprint_page(self, after: int, limit: int) -> tuple[int, list[tuple[str, str | None]]]:
        """Up to `limit` (public id, fingerprint) of keys after row `after`, and the last row.

        A rotated key's previous id is listed too while its grace runs (store clock); the
        fingerprint is None for keys made before schema version 2. Keyset paging on the
        primary key: each page is one short indexed query, however many keys there are.
        """
        with self._reads.connection() as conn:
            return change_log.page(conn, after, limit, self.clock())

    def log_position(self) -> int:
        """The newest entry's position in the change log."""
        with self._reads.connection() as conn:
            return change_log.position(conn)

    def changes_since(self, seq: int) -> list[Change] | None:
        """Every change after seq: (seq, public id, its fingerprint now, whether a key has it).

        None when seq's own entry was pruned: the reader fell behind and must drop everything.
        """
        return change_log.since(self._reads, seq, self.clock())

    def replace_hash(
        self, public_id: str, old_hash: str, new_hash: str, *, wait: float | None = None
    ) -> None:
        """Store an upgraded hash, unless the key was recreated or deleted meanwhile (wait: the
        lock wait, if less than the writes' own: `StoreContext.session`)."""
        with self.session(write=True, wait=wait) as session:
            session.exec(
                update(KeyRow)
                .where(col(KeyRow.public_id) == public_id, col(KeyRow.secret_hash) == old_hash)
                .values(secret_hash=new_hash)
            )
            session.commit()

    def add_fingerprint(
        self, public_id: str, fingerprint: str, *, wait: float | None = None
    ) -> bool:
        """Give a key made before fingerprints (0.1.0) the fingerprint of its secret, just proven
        right by argon2; False (nothing changed) when the id already has one or names no key.

        Public ids are never reused, so an id without a fingerprint still names the secret that
        was checked. A rotated key's previous id gets its own (old_fingerprint). The id goes in
        the change log, so verifiers' indexes learn it and refuse wrong secrets for it without
        argon2 from then on. Written by whoever verified the secret and may write the column:
        serve-leaks, and a verifier on SQLite (a PostgreSQL verifier role may not: skipped).
        wait: the lock wait, if less than the writes' own (`StoreContext.session`).
        """
        key = KEY_TABLE
        with self.session(write=True, wait=wait) as session:
            conn = session.connection()
            if conn.dialect.name == "postgresql":
                # The change log's lock first, waited for holding nothing; then the row, not
                # waited for. Row first, this write held it waiting for the log's lock, while
                # an admin's batch holding that lock waited for the row: a wait cycle that a
                # deadlock_timeout shorter than this wait settled by failing the admin's change.
                conn.execute(sa_select(func.pg_advisory_xact_lock(change_log.LOG_LOCK)))
                bound_lock_wait(conn, NO_LOCK_WAIT_S)
            changed = 0
            for id_column, column in (
                (key.c.public_id, key.c.fingerprint),
                (key.c.old_public_id, key.c.old_fingerprint),
            ):
                result = session.connection().execute(
                    update(key)
                    .where(id_column == public_id, column.is_(None))
                    .values({column.name: fingerprint})
                )
                changed += result.rowcount
            if changed:
                announce(session, [public_id], self.clock())
            session.commit()
        return bool(changed)

    def record_use(self, used: Mapping[str, datetime]) -> None:
        """Move last_used_at forward for the given public ids (never backwards).

        A rotated key's previous id counts as a use of the key. Never waits for a lock: a lock
        in the way fails it, and the caller keeps its uses. It holds its keys' rows as it goes,
        and one waiting for a row an admin's batch holds while the batch waits for one of its
        rows is a deadlock PostgreSQL may settle by failing the admin's change.
        """
        if not used:
            return
        table = KEY_TABLE
        statement = (
            update(table)
            .where(
                or_(
                    table.c.public_id == bindparam("pid"), table.c.old_public_id == bindparam("pid")
                ),
                or_(table.c.last_used_at.is_(None), table.c.last_used_at < bindparam("at")),
            )
            .values(last_used_at=bindparam("at"))
        )
        with self.session(write=True, wait=NO_LOCK_WAIT_S) as session:
            # One executemany: a service that used 10,000 keys in a minute writes them at once.
            # In id order: each worker process noted its keys in its own order, and two such
            # transactions locking the same rows in opposite orders deadlock.
            session.connection().execute(
                statement, [{"pid": pid, "at": used[pid]} for pid in sorted(used)]
            )
            session.commit()

    def record_usage(
        self, rows: Sequence[tuple[str, int, int, int, str, int]], batch: str | None = None
    ) -> None:
        """Append usage rows (public_id, minute, span, kind, scope, requests), all or none.

        Insert-only (the verifier's role may do nothing else with the table) and never in the
        change log: counts are no change to a key. One transaction, marked with the batch's id
        (`apikey_tui_usage_batch`) when one is given: a retry of a flush whose commit succeeded
        but whose answer was lost finds its mark and writes nothing, so a count is written once.
        """
        if not rows:
            return
        engine = self._write_engine  # a transaction, with the writes' lock wait
        with database_errors(engine), engine.begin() as conn:
            if batch is not None:
                mark = {"id": batch, "minute": usage_minute(self.clock())}
                if not conn.execute(text(_MARK_BATCH), mark).rowcount:
                    return  # written before: the answer to that flush was lost
            if conn.dialect.name == "postgresql":
                # COPY, in the same transaction: 100,000 rows in about the time the server's own
                # INSERT ... SELECT of them takes; one INSERT of a JSON array of rows took twice
                # that (the server parses the JSON), and psycopg dumps Python lists into arrays
                # slower still. COPY needs only the INSERT privilege; psycopg escapes each value.
                raw: Any = conn.connection.driver_connection  # psycopg's own connection
                with raw.cursor() as cursor, cursor.copy(_USAGE_COPY) as copy:
                    for row in rows:
                        copy.write_row(row)
                return
            one = "(" + ", ".join(["?"] * 6) + ")"
            insert = f"INSERT INTO {UsageTable.name} ({_USAGE_COLUMNS}) VALUES "  # noqa: S608
            full = len(rows) - len(rows) % USAGE_ROWS_PER_INSERT
            # Only placeholders are joined in; every value is a bound parameter.
            chunked = insert + ", ".join([one] * USAGE_ROWS_PER_INSERT)
            for start in range(0, full, USAGE_ROWS_PER_INSERT):
                chunk = rows[start : start + USAGE_ROWS_PER_INSERT]
                conn.exec_driver_sql(chunked, tuple(value for row in chunk for value in row))
            if full < len(rows):
                conn.exec_driver_sql(insert + one, list(rows[full:]))  # executemany


def credential_source(
    engine: Engine,
    *,
    hasher: SecretHasher | None = None,
    clock: Clock = system_clock,
    writes: Engine | None = None,
) -> CredentialReads:
    """The verifier's reads on engine, its writes on writes (engine's own when None: reads in
    autocommit need an engine that is not); it records no event, its actor only names it."""
    return CredentialReads(
        engine, hasher=hasher, actor=Actor("verifier"), clock=clock, writes=writes
    )
