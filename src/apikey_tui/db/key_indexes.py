"""The indexes behind the key table's filter and sorts: installing them, asking them for ids.

A filter matches text anywhere in a key's owner, name or public id (`KeyQuery`). Without an
index that is a scan of every key: half a second at a million keys, even when two keys match.
With a trigram index the database finds the few matching keys in about a millisecond.

These indexes are accelerators, not part of the schema version: a release that does not know
them reads and writes the same tables (on SQLite the triggers below keep the trigram index
current whoever writes), so installing them needs no lockstep upgrade of services. A fresh
database gets them at creation; `apikey-tui db upgrade` adds them to an existing one. Where the
trigram index cannot be made (a SQLite without FTS5's trigram tokenizer, a PostgreSQL role that
may not create the pg_trgm extension) the filter still works, by scanning.

- SQLite: an FTS5 table (tokenizer `trigram`, external content: it stores the index, not a
  second copy of the keys) kept current by three triggers, and one more such table over tags
  (a `tag:` term of the filter). The verifier's only write, last_used_at, fires none of them.
- PostgreSQL: GIN indexes of pg_trgm over owner, name, public id and tags (a `tag:` term).
- Both: B-tree indexes for the scope column and for the orders no schema index gives (every
  owner's keys by name; by last use). The verifier's last-use write updates the last-use index,
  once per key per flush of its usage writer.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.exc import DBAPIError

SEARCH_TABLE = "apikey_tui_key_search"  # SQLite
# A trigram index finds substrings of three characters or more; shorter text is scanned for.
SHORTEST = 3

# Plain B-tree indexes: the scope column (keys holding a scope, also for the scope catalog's
# counts and refused removals), name first (every owner's keys by name), and last use (the
# order the table shows: never used first, ascending).
_BTREES = (
    "CREATE INDEX IF NOT EXISTS ix_apikey_tui_key_scope_scope "
    "ON apikey_tui_key_scope (scope, key_id)",
    "CREATE INDEX IF NOT EXISTS ix_apikey_tui_key_name_owner ON apikey_tui_key (name, owner)",
    "CREATE INDEX IF NOT EXISTS ix_apikey_tui_key_last_used "
    "ON apikey_tui_key (last_used_at {nulls}, owner, name)",
)
# External content: the FTS5 table stores the index, not a second copy of the keys, and a row
# leaves the index by repeating exactly what was indexed.
_SQLITE = (
    "CREATE VIRTUAL TABLE apikey_tui_key_search USING fts5(owner, name, public_id, "
    "content='apikey_tui_key', content_rowid='id', tokenize='trigram')",
    "CREATE TRIGGER apikey_tui_key_search_insert AFTER INSERT ON apikey_tui_key BEGIN "
    "INSERT INTO apikey_tui_key_search(rowid, owner, name, public_id) "
    "VALUES (new.id, new.owner, new.name, new.public_id); END",
    "CREATE TRIGGER apikey_tui_key_search_delete AFTER DELETE ON apikey_tui_key BEGIN "
    "INSERT INTO apikey_tui_key_search(apikey_tui_key_search, rowid, owner, name, public_id) "
    "VALUES ('delete', old.id, old.owner, old.name, old.public_id); END",
    "CREATE TRIGGER apikey_tui_key_search_update "
    "AFTER UPDATE OF owner, name, public_id ON apikey_tui_key BEGIN "
    "INSERT INTO apikey_tui_key_search(apikey_tui_key_search, rowid, owner, name, public_id) "
    "VALUES ('delete', old.id, old.owner, old.name, old.public_id); "
    "INSERT INTO apikey_tui_key_search(rowid, owner, name, public_id) "
    "VALUES (new.id, new.owner, new.name, new.public_id); END",
    "INSERT INTO apikey_tui_key_search(apikey_tui_key_search) VALUES ('rebuild')",
)
# Tags get a table of their own: a database given the table above by an earlier release gains
# it beside that one (its name starts with SEARCH_TABLE: no schema's, `db.migrations`).
TAGS_TABLE = "apikey_tui_key_search_tags"
_SQLITE_TAGS = (
    "CREATE VIRTUAL TABLE apikey_tui_key_search_tags USING fts5(tags, "
    "content='apikey_tui_key', content_rowid='id', tokenize='trigram')",
    "CREATE TRIGGER apikey_tui_key_search_tags_insert AFTER INSERT ON apikey_tui_key BEGIN "
    "INSERT INTO apikey_tui_key_search_tags(rowid, tags) VALUES (new.id, new.tags); END",
    "CREATE TRIGGER apikey_tui_key_search_tags_delete AFTER DELETE ON apikey_tui_key BEGIN "
    "INSERT INTO apikey_tui_key_search_tags(apikey_tui_key_search_tags, rowid, tags) "
    "VALUES ('delete', old.id, old.tags); END",
    "CREATE TRIGGER apikey_tui_key_search_tags_update AFTER UPDATE OF tags ON apikey_tui_key "
    "BEGIN INSERT INTO apikey_tui_key_search_tags(apikey_tui_key_search_tags, rowid, tags) "
    "VALUES ('delete', old.id, old.tags); "
    "INSERT INTO apikey_tui_key_search_tags(rowid, tags) VALUES (new.id, new.tags); END",
    "INSERT INTO apikey_tui_key_search_tags(apikey_tui_key_search_tags) VALUES ('rebuild')",
)
# Tags last (see _PG_PROBE): a database given the first three by an earlier release gains it.
_PG_INDEXED = ("owner", "name", "public_id", "tags")
_PG_PROBE = "ix_apikey_tui_key_tags_trgm"  # the last one made: present means all are
# Every index this module makes (apart from SQLite's FTS5 table): not part of the schema.
INDEXES = (
    "ix_apikey_tui_key_scope_scope",
    "ix_apikey_tui_key_name_owner",
    "ix_apikey_tui_key_last_used",
    *(f"ix_apikey_tui_key_{c}_trgm" for c in _PG_INDEXED),
)


def present(conn: Connection, table: str = SEARCH_TABLE) -> bool:
    """Whether the database has the trigram index (one catalog lookup); on SQLite, table."""
    if conn.dialect.name == "sqlite":
        found = conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
            {"name": table},
        ).first()
        return found is not None
    index = conn.execute(text("SELECT to_regclass(:name)"), {"name": _PG_PROBE}).scalar()
    return index is not None


def install(conn: Connection) -> bool:
    """Add the index if it is missing (inside the caller's transaction); whether it is there.

    Where the database cannot make it, nothing is changed and the answer is False.
    """
    # SQLite puts NULL first in an ascending index already; PostgreSQL must be told.
    nulls = "" if conn.dialect.name == "sqlite" else "NULLS FIRST"
    for statement in _BTREES:
        conn.execute(text(statement.format(nulls=nulls)))
    sqlite = conn.dialect.name == "sqlite"
    if present(conn) and (not sqlite or present(conn, TAGS_TABLE)):
        return True
    # A savepoint: a refused CREATE would otherwise abort the caller's whole transaction.
    try:
        with conn.begin_nested():
            if sqlite:
                if not present(conn):
                    for statement in _SQLITE:
                        conn.execute(text(statement))
                if not present(conn, TAGS_TABLE):
                    for statement in _SQLITE_TAGS:
                        conn.execute(text(statement))
            else:
                conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
                # The operator class lives where the extension was made, which need not be on
                # this connection's search path (one extension per database, many schemas).
                home = conn.execute(
                    text(
                        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                        "ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
                    )
                ).scalar_one()
                opclass = f'"{home}".gin_trgm_ops'
                for column in _PG_INDEXED:  # tags last: see _PG_PROBE
                    index = f"ix_apikey_tui_key_{column}_trgm"  # in INDEXES
                    using = f"gin ({column} {opclass})"
                    conn.execute(
                        text(f"CREATE INDEX IF NOT EXISTS {index} ON apikey_tui_key USING {using}")
                    )
    except DBAPIError:
        return False
    return True


def candidate_ids(
    conn: Connection, needle: str, scopes: Sequence[str], limit: int
) -> list[int] | None:
    """SQLite: ids of the keys that may match needle, if fewer than limit; else None (scan).

    A superset of the matches (any owner, Unicode case folded): the caller still applies its
    exact terms to these ids. Keys holding one of scopes (the catalog's names that contain
    needle) count. PostgreSQL needs no such step: its planner uses the GIN indexes itself.
    """
    if len(needle) < SHORTEST:
        return None
    # A phrase of the trigram tokenizer matches as a substring of any column, ignoring case;
    # a double quote inside the phrase is written twice.
    phrase = '"' + needle.replace('"', '""') + '"'
    ids = set(
        conn.execute(
            text(
                "SELECT rowid FROM apikey_tui_key_search "
                "WHERE apikey_tui_key_search MATCH :phrase LIMIT :n"
            ),
            {"phrase": phrase, "n": limit},
        ).scalars()
    )
    if scopes and len(ids) < limit:
        held = text("SELECT key_id FROM apikey_tui_key_scope WHERE scope IN :scopes LIMIT :n")
        ids.update(
            conn.execute(
                held.bindparams(bindparam("scopes", expanding=True)),
                {"scopes": list(scopes), "n": limit},
            ).scalars()
        )
    return sorted(ids) if len(ids) < limit else None


def tagged_ids(conn: Connection, words: Sequence[str], limit: int) -> list[int] | None:
    """SQLite: ids of the keys whose tags may hold one of words, if fewer than limit; else
    None (scan). A superset, as `candidate_ids`: the caller's exact tag terms still decide."""
    if not words or any(len(word) < SHORTEST for word in words) or not present(conn, TAGS_TABLE):
        return None
    ids: set[int] = set()
    for word in words:
        phrase = '"' + word.replace('"', '""') + '"'
        ids.update(
            conn.execute(
                text(
                    "SELECT rowid FROM apikey_tui_key_search_tags "
                    "WHERE apikey_tui_key_search_tags MATCH :phrase LIMIT :n"
                ),
                {"phrase": phrase, "n": limit},
            ).scalars()
        )
        if len(ids) >= limit:
            return None
    return sorted(ids)
