"""Which schema version a database has, and bringing it to this release's with Alembic.

Schema version n is Alembic revision ``f"{n:04d}"`` (`apikey_tui.db.migrations`). Version 1 is the
schema of release 0.1.0, which recorded its version only in the meta row and kept no Alembic
table: such a database is stamped with revision 0001 before it is upgraded.

Who upgrades: `apikey-tui db upgrade` alone. Admin commands create a fresh database at the
newest version but refuse an older one (services must be upgraded together with it), and a
verifier never changes the schema. A database from a newer release is refused, never touched.

Everything here runs on a connection the caller holds inside one transaction (`db.engine` begins
it, takes PostgreSQL's schema lock and turns driver errors into the typed tree): an upgrade
commits whole or not at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection, Integer, cast, column, event, inspect, select, table, text
from sqlalchemy.exc import DBAPIError

from apikey_tui.db import key_indexes
from apikey_tui.db.driver_errors import lock_timed_out
from apikey_tui.db.migrations import LOCATION, TABLE_PREFIX, VERSION_TABLE, revision_of
from apikey_tui.db.models import SCHEMA_VERSION, KeyRow, OwnerNetworkRow, OwnerRow, SchemaInfo
from apikey_tui.errors import InvalidInputError, SchemaVersionError, StoreUnavailableError
from apikey_tui.networks import SHADOW

if TYPE_CHECKING:  # Alembic costs ~0.3 s to import: only creating and upgrading need it
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.sql.elements import ColumnClause

UPGRADE_HINT = "run `apikey-tui db upgrade`"
# Seconds an upgrade on PostgreSQL waits for a table another session holds before it gives up.
UPGRADE_LOCK_WAIT = 5
_REVISION = re.compile(r"\d{4}")
_META = SchemaInfo.__tablename__
_version_table = table(VERSION_TABLE, column("version_num"))
_meta_table = table(_META, column("key"), column("value"))


def found_version(conn: Connection) -> int | None:
    """The schema version of the database, or None when it holds no apikey-tui table yet.

    Reads the catalog and one row; the verifier calls it too, so it needs no Alembic.
    """
    tables = {t for t in inspect(conn).get_table_names() if t.startswith(TABLE_PREFIX)}
    if not tables:
        return None
    if VERSION_TABLE in tables:
        revisions = list(conn.execute(select(_version_table.c.version_num)).scalars())
        if len(revisions) == 1 and _REVISION.fullmatch(str(revisions[0])):
            return int(revisions[0])
        if not revisions:
            raise SchemaVersionError("the database holds apikey-tui tables but no schema version")
        raise SchemaVersionError(
            f"the database's apikey-tui schema is at revision {', '.join(map(repr, revisions))}, "
            f"which this release (schema version {SCHEMA_VERSION}) does not know: "
            "it was made by a newer release; upgrade apikey-tui"
        )
    if _META in tables:  # release 0.1.0 kept no Alembic table
        value = conn.execute(
            select(_meta_table.c.value).where(_meta_table.c.key == "schema_version")
        ).scalar_one_or_none()
        if value is not None and value.isdigit():
            return int(value)
    raise SchemaVersionError("the database holds apikey-tui tables but no schema version")


# Our tables the connection's search_path finds, by schema (visible: the first of each name).
# By name, not by prefix: another's table or view named apikey_tui_* (a backup, a report) in
# a schema later on the path hides none of ours, and refusing it stopped every open.
_VISIBLE_SCHEMAS = text(
    "SELECT DISTINCT n.nspname FROM pg_catalog.pg_class c"
    " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
    " WHERE c.relkind IN ('r', 'p', 'v') AND c.relname = ANY(:names)"
    " AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1"
)
# Every table a release made: the shipped migrations only ever add tables (drops are
# downgrades), so this release's names include each older release's; and the key search's,
# which are no schema version's (`key_indexes`) but which the admins' filters read.
_SEARCH_TABLES = (key_indexes.SEARCH_TABLE, key_indexes.TAGS_TABLE, key_indexes.TERMS_TABLE)
_OUR_TABLES = sorted({*SchemaInfo.metadata.tables, VERSION_TABLE, *_SEARCH_TABLES})


def refuse_tables_in_many_schemas(conn: Connection) -> None:
    """PostgreSQL: refuse a search_path on which our tables come from more than one schema.

    A table of ours in a schema the path names first hides the real one: a stray change log
    (left over, or made where any role may create, as public before PostgreSQL 15) hid every
    change from a verifier, and a deleted key stayed valid for as long as it ran.
    """
    if conn.dialect.name != "postgresql":
        return
    schemas = list(conn.execute(_VISIBLE_SCHEMAS, {"names": _OUR_TABLES}).scalars())
    if len(schemas) > 1:
        raise SchemaVersionError(
            "apikey-tui's tables are found in more than one schema of the connection's "
            f"search_path ({', '.join(schemas)}): one schema's tables hide another's; drop the "
            "stray tables or set a search_path that names only the apikey-tui schema"
        )


def check(found: int | None, *, create: bool) -> None:
    """Refuse a database of another version than this release's, saying what to do."""
    if found == SCHEMA_VERSION or (found is None and create):
        return
    if found is None:
        raise SchemaVersionError(
            "the database has no apikey-tui tables yet; open it once with apikey-tui"
        )
    if found < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the database has schema version {found}; this release of apikey-tui needs "
            f"version {SCHEMA_VERSION}: {UPGRADE_HINT}"
        )
    raise SchemaVersionError(
        f"the database has schema version {found}, newer than this release of apikey-tui "
        f"understands ({SCHEMA_VERSION}): upgrade apikey-tui"
    )


def verifiers_from(conn: Connection) -> int | None:
    """The oldest verifier's schema version that still works beside this database (meta row
    'verifiers_from', schema version 5 on), or None when the database does not say."""
    value = conn.execute(
        select(_meta_table.c.value).where(_meta_table.c.key == "verifiers_from")
    ).scalar_one_or_none()
    return int(value) if value is not None and value.isdigit() else None


# The schema versions that brought what a verifier judges on behalf of the admins: limits (9)
# and network rules (10). A verifier older than one of them still starts on a newer database
# that names it in 'verifiers_from' and judges without it: a key kept to one network would work
# from anywhere. So a database that uses one raises 'verifiers_from' to its version (never
# lowers it): the write that stores the first limit or enforced rule, and `db upgrade` for what
# an earlier release stored. Shadow rules refuse nothing: they raise nothing.
LIMITS_FROM, NETWORKS_FROM = 9, 10
# What raises the floor to each of them, and the release that brought it (`db upgrade` says so).
FLOOR_NEEDS = {
    LIMITS_FROM: ("limits", "0.7.0"),
    NETWORKS_FROM: ("network rules in enforce mode", "0.8.0"),
}


def verifiers_needed(limits: str | None, networks: str | None) -> int:
    """The oldest verifier's schema version that judges these stored limits and rules (0: any)."""
    if networks is not None and not networks.startswith(f"{SHADOW} "):
        return NETWORKS_FROM  # unreadable rules too: they refuse every request
    return LIMITS_FROM if limits else 0


def require_verifiers(conn: Connection, version: int) -> None:
    """Raise 'verifiers_from' to version (a database whose row is missing or higher: as it is)."""
    conn.execute(
        _meta_table.update()
        .where(_meta_table.c.key == "verifiers_from")
        .where(cast(_meta_table.c.value, Integer) < version)
        .values(value=str(version))
    )


# Where a database holds what `verifiers_needed` judges: (table, column, the version it needs).
_USES = (
    ("apikey_tui_key", "limits", LIMITS_FROM),
    ("apikey_tui_owner_limit", "limits", LIMITS_FROM),
    ("apikey_tui_key", "networks", NETWORKS_FROM),
    ("apikey_tui_owner_network", "networks", NETWORKS_FROM),
)


def _require_for_data(conn: Connection) -> None:
    """`require_verifiers` for what the database holds (any release may have stored it)."""
    for name, held, version in _USES:
        value: ColumnClause[str] = column(held)
        used = value.is_not(None) & (value != "")
        if held == "networks":  # an unreadable text refuses everything: only shadow is free
            used = value.is_not(None) & value.not_like(f"{SHADOW} %")
        if conn.execute(select(value).select_from(table(name)).where(used).limit(1)).first():
            require_verifiers(conn, version)


_ASKED = "apikey_tui_verifiers_asked"  # conn.info: (the transaction, the floor asked in it)


def _on_write(_mapper: Any, conn: Connection, row: Any) -> None:
    """Before a key's or owner's row is written: raise the floor when its limits or network
    rules are set now (an unchanged row writes nothing more: serve-leaks' disable, say)."""
    attrs = inspect(row).attrs
    if not any(n in attrs and attrs[n].history.has_changes() for n in ("limits", "networks")):
        return
    needed = verifiers_needed(getattr(row, "limits", None), getattr(row, "networks", None))
    if not needed:
        return
    # Once a transaction: a batch giving 10,000 keys limits asks once, not 10,000 times. Kept on
    # the pooled connection with the transaction it was asked in (a rolled-back one is not
    # the next one: that asks again).
    transaction = conn.get_transaction()
    asked = conn.info.get(_ASKED)
    if asked is not None and asked[0] is transaction and asked[1] >= needed:
        return
    require_verifiers(conn, needed)
    conn.info[_ASKED] = (transaction, needed)


for _row in (KeyRow, OwnerRow, OwnerNetworkRow):
    event.listen(_row, "before_insert", _on_write)
    event.listen(_row, "before_update", _on_write)


def ensure(conn: Connection, *, create: bool, verifier: bool = False) -> None:
    """Create the tables at this release's version in an empty database (if create), or
    check that an existing database is at exactly this release's version.

    A verifier also accepts a newer database that names this release among the verifiers that
    keep working beside it (a newer schema that only added tables a verifier never reads).
    """
    found = found_version(conn)
    if found is not None:
        refuse_tables_in_many_schemas(conn)
    if verifier and found is not None and found > SCHEMA_VERSION:
        oldest = verifiers_from(conn)
        if oldest is not None and oldest <= SCHEMA_VERSION:
            return
    check(found, create=create)
    if found is None:
        from alembic import command

        command.upgrade(alembic_config(conn), revision_of(SCHEMA_VERSION))
        key_indexes.install(conn)


class Upgrade(NamedTuple):
    """What `upgrade` did: the version before (None: created) and after, and whether the
    database now has the filter's trigram index (`key_indexes`; not part of the version)."""

    before: int | None
    after: int
    searchable: bool
    # 'verifiers_from' after, when this upgrade raised it for what was stored already (None:
    # left as it was): older services that start from now on answer 503, the operator must hear.
    raised_floor: int | None = None


def upgrade(conn: Connection) -> Upgrade:
    """Bring the database to this release's version, and add the filter's index if missing.

    An empty database is created; a newer one is refused before anything is written, and
    so is a search_path that finds our tables in two schemas (it upgraded the first found).
    """
    refuse_tables_in_many_schemas(conn)
    found = found_version(conn)
    if found is not None and found > SCHEMA_VERSION:
        check(found, create=False)
    if conn.dialect.name == "postgresql":
        # A migration's ALTER (an index's CREATE too) queues for the table behind any open
        # transaction that read it, and every later read of it (each service's key lookups)
        # queues behind the ALTER: waiting for a session left open would hold them up as long.
        conn.execute(text(f"SET LOCAL lock_timeout = '{UPGRADE_LOCK_WAIT}s'"))
    try:
        if found != SCHEMA_VERSION:
            from alembic import command

            config = alembic_config(conn)
            if found is not None and not inspect(conn).has_table(VERSION_TABLE):
                command.stamp(config, revision_of(found))  # 0.1.0 kept no Alembic table
            command.upgrade(config, revision_of(SCHEMA_VERSION))
        floor = verifiers_from(conn)
        _require_for_data(conn)
        raised = verifiers_from(conn)
        raised = raised if raised != floor else None
        return Upgrade(found, SCHEMA_VERSION, key_indexes.install(conn), raised)
    except DBAPIError as exc:
        if not lock_timed_out(exc):
            raise
        raise StoreUnavailableError(
            "another session holds apikey-tui's tables (an admin app or script left open, a "
            f"long transaction: see pg_stat_activity); the upgrade waited {UPGRADE_LOCK_WAIT} s "
            "for it and changed nothing: end that session and run `apikey-tui db upgrade` again"
        ) from None


def head_revision() -> str | None:
    """The newest revision among the shipped migrations (a test holds it to SCHEMA_VERSION)."""
    return _scripts().get_current_head()


def alembic_config(conn: Connection | None = None) -> Config:
    """An Alembic configuration of the shipped migrations, run on this connection."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(LOCATION))
    config.set_main_option("path_separator", "os")
    if conn is not None:
        config.attributes["connection"] = conn
    return config


@cache
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


# --- least privilege for verifiers (PostgreSQL) -----------------------------------------------

# What a verifier reads: keys, their scopes, and what the version check reads. Its only write is
# last_used_at. Nothing here lets a compromised service plant a key, a hash or a fingerprint,
# change scopes, or hide its tracks in the audit trail.
VERIFIER_READS = (
    "apikey_tui_key",
    "apikey_tui_key_scope",
    "apikey_tui_owner_limit",  # owners (schema version 11; their limits since 9)
    "apikey_tui_owner_network",  # owners' network rules (schema version 10)
    "apikey_tui_change",
    _META,
    VERSION_TABLE,
)
VERIFIER_UPDATES = ("apikey_tui_key", ("last_used_at",))
# Its one append: usage counts (schema version 5), insert-only, never read back or changed, and
# each flush's mark (schema version 7), which makes a retried flush write nothing twice.
VERIFIER_INSERTS = ("apikey_tui_usage", "apikey_tui_usage_batch")
# Limits' counts and boot marker (schema version 8): a verifier reads and writes them whole
# (apikey_tui.limits.sql_store). Nothing else is in them: no key, no secret, no audit.
VERIFIER_COUNTS = ("apikey_tui_limit_count", "apikey_tui_limit_boot")
_ROLE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,62}")
# Names that GRANT reads as something else even when quoted ("public" is everyone).
_NOT_A_ROLE = {"public", "none", "current_user", "current_role", "session_user"}
_WRITES = ("INSERT", "DELETE", "TRUNCATE", "TRIGGER")  # UPDATE: column by column


def check_role_name(role: str) -> None:
    """Refuse a role name that is not a plain PostgreSQL identifier or that means another role."""
    if not _ROLE.fullmatch(role) or role.lower() in _NOT_A_ROLE or role.startswith("pg_"):
        raise InvalidInputError(
            f"role name {role!r} is not allowed: 1-63 letters, digits, '_' or '-', "
            "starting with a letter or '_' (not PUBLIC, a pg_ role or CURRENT_USER)"
        )


def verifier_grants(conn: Connection, role: str) -> list[str]:
    """The GRANT statements a verifier's PostgreSQL role needs on the connection's schema."""
    check_role_name(role)
    quote = conn.dialect.identifier_preparer.quote
    schema = _current_schema(conn)
    table_name = _qualified(conn, schema)
    key, columns = VERIFIER_UPDATES
    return [
        f"GRANT USAGE ON SCHEMA {quote(schema)} TO {quote(role)}",
        f"GRANT SELECT ON TABLE {', '.join(map(table_name, VERIFIER_READS))} TO {quote(role)}",
        f"GRANT UPDATE ({', '.join(map(quote, columns))}) ON TABLE {table_name(key)} "
        f"TO {quote(role)}",
        f"GRANT INSERT ON TABLE {', '.join(map(table_name, VERIFIER_INSERTS))} TO {quote(role)}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "
        f"{', '.join(map(table_name, VERIFIER_COUNTS))} TO {quote(role)}",
    ]


def role_exists(conn: Connection, role: str) -> bool:
    """Whether a PostgreSQL role of exactly this name exists."""
    query = text("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = :role")
    return conn.execute(query, {"role": role}).first() is not None


def excess_privileges(conn: Connection, role: str) -> list[str]:
    """Writes a role can make on apikey-tui's tables beyond a verifier's, one entry per table
    (ownership counts): each would let a compromised service plant keys or cover its tracks."""
    superuser = conn.execute(
        text("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = :role"), {"role": role}
    ).scalar_one_or_none()
    if superuser:
        return ["it is a superuser, which may do anything"]
    table_name = _qualified(conn, _current_schema(conn))
    key, allowed = VERIFIER_UPDATES
    found: list[str] = []

    def holds(function: str, on: str, what: str) -> bool:
        arguments = {"role": role, "table": table_name(on), "what": what}
        return bool(conn.execute(text(f"SELECT {function}"), arguments).scalar_one())

    ours = (t for t in inspect(conn).get_table_names() if t.startswith(TABLE_PREFIX))
    for name in sorted(t for t in ours if t not in VERIFIER_COUNTS):
        rights = [
            p
            for p in _WRITES
            if not (p == "INSERT" and name in VERIFIER_INSERTS)
            and holds("has_table_privilege(:role, :table, :what)", name, p)
        ]
        columns = [c["name"] for c in inspect(conn).get_columns(name)]
        updatable = [
            c
            for c in columns
            if not (name == key and c in allowed)
            and holds("has_column_privilege(:role, :table, :what, 'UPDATE')", name, c)
        ]
        if updatable:
            rights.append(f"UPDATE ({', '.join(updatable)})")
        if rights:
            found.append(f"{', '.join(rights)} on {name}")
    return found


def _current_schema(conn: Connection) -> str:
    schema: str | None = conn.execute(text("SELECT current_schema()")).scalar_one()
    if schema is None:  # the search_path names no schema that exists
        raise SchemaVersionError("the connection's search_path names no existing schema")
    return schema


def _qualified(conn: Connection, schema: str) -> Callable[[str], str]:
    quote = conn.dialect.identifier_preparer.quote
    return lambda name: f"{quote(schema)}.{quote(name)}"
