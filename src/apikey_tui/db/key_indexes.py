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
  second copy of the keys) kept current by three triggers. The verifier's only write,
  last_used_at, fires none of them.
- PostgreSQL: GIN indexes of pg_trgm over owner, name and public id.
- Both: the keys' terms (`TERMS_TABLE`), one row per key listing its tags and scopes as words
  (`tag:env=prod`, `scope:serving`) under an inverted index (FTS5 on SQLite, GIN on
  PostgreSQL), kept current by triggers on the key and key-scope tables. It answers the
  filter's `tag:` and `scope:` terms together: an inverted index intersects its lists of keys
  in C, so two common terms that no key holds together (`scope:serving tag:env=dev`) are found
  to match nothing in about 30 ms at a million keys, where walking the keys in the window's
  order reads every key (350 ms on SQLite, 500 ms on PostgreSQL).
- Both: B-tree indexes for the scope column and for the orders no schema index gives (every
  owner's keys by name; by last use). The verifier's last-use write updates the last-use index,
  once per key per flush of its usage writer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import (
    Connection,
    Integer,
    Select,
    Text,
    bindparam,
    column,
    func,
    select,
    table,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError

from apikey_tui.db.driver_errors import lock_timed_out

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
# 0.9.0's trigram table over tags, which the terms table replaces (`install` drops it).
TAGS_TABLE = "apikey_tui_key_search_tags"
# The keys' terms: its name starts with SEARCH_TABLE, so it is no schema's (`db.migrations`).
TERMS_TABLE = "apikey_tui_key_search_terms"
# A term's word is a tag's or a scope's name and value, which hold only these characters
# (`store.metadata`, `names`): the tokenizer keeps each word whole, so a tag is one token.
_WORD = re.compile(r"[A-Za-z0-9=:_./@+-]+")
# SQLite: a key's words, 'tag:env=prod tag:team=t1 scope:project scope:serving'; a key's row
# is rewritten whole when its tags or scopes change (a key's words are few).
_SQLITE_REFRESH = (
    "DELETE FROM apikey_tui_key_search_terms WHERE rowid = {id}; "
    "INSERT INTO apikey_tui_key_search_terms(rowid, terms) SELECT k.id, "
    "coalesce('tag:' || replace(k.tags, ' ', ' tag:'), '') || coalesce((SELECT ' ' || "
    "group_concat('scope:' || s.scope, ' ') FROM apikey_tui_key_scope s WHERE s.key_id = k.id), "
    "'') FROM apikey_tui_key k WHERE {where}; "
)
# A regular FTS5 table (it keeps its own copy of the words: a row leaves by its rowid alone),
# detail=none: the index lists the keys per word, no positions, the smallest FTS5 makes.
_SQLITE_TERMS = (
    "CREATE VIRTUAL TABLE apikey_tui_key_search_terms USING fts5(terms, detail=none, "
    "columnsize=0, tokenize=\"ascii tokenchars '=:_./@+-'\")",
    "CREATE TRIGGER apikey_tui_key_search_terms_key_insert AFTER INSERT ON apikey_tui_key "
    "BEGIN {new.id} END",
    "CREATE TRIGGER apikey_tui_key_search_terms_key_tags AFTER UPDATE OF tags ON apikey_tui_key "
    "BEGIN {new.id} END",
    "CREATE TRIGGER apikey_tui_key_search_terms_key_delete AFTER DELETE ON apikey_tui_key "
    "BEGIN DELETE FROM apikey_tui_key_search_terms WHERE rowid = old.id; END",
    "CREATE TRIGGER apikey_tui_key_search_terms_scope_insert AFTER INSERT ON apikey_tui_key_scope "
    "BEGIN {new.key_id} END",
    "CREATE TRIGGER apikey_tui_key_search_terms_scope_delete AFTER DELETE ON apikey_tui_key_scope "
    "BEGIN {old.key_id} END",
    "CREATE TRIGGER apikey_tui_key_search_terms_scope_update AFTER UPDATE ON apikey_tui_key_scope "
    "BEGIN {old.key_id} {new.key_id} END",
    # Every key's words (the refresh above of every key, with nothing to delete first).
    "{all}",
)
# Every SQLite trigger that names the key table's tags column (a downgrade past schema 11
# drops them first: SQLite will not drop a column a trigger names).
SQLITE_TAG_TRIGGERS = (
    *(f"{TAGS_TABLE}_{t}" for t in ("insert", "delete", "update")),
    *(f"{TERMS_TABLE}_{t}" for t in ("key_insert", "key_tags", "key_delete")),
    *(f"{TERMS_TABLE}_{t}" for t in ("scope_insert", "scope_delete", "scope_update")),
)
# PostgreSQL: a key's words are its tags whole and by name alone ('tag:env', for a term of any
# value: a GIN index over an array finds whole elements only) and its scopes.
_PG_WORDS = (
    "array(SELECT 'tag:' || t FROM unnest(string_to_array(k.tags, ' ')) AS t) || "
    "array(SELECT 'tag:' || split_part(t, '=', 1) "
    "FROM unnest(string_to_array(k.tags, ' ')) AS t) || "
    "array(SELECT 'scope:' || s.scope FROM apikey_tui_key_scope s WHERE s.key_id = k.id)"
)
_PG_TERMS = (
    "CREATE TABLE IF NOT EXISTS apikey_tui_key_search_terms "
    "(key_id integer PRIMARY KEY, terms text[] NOT NULL)",
    # search_path fixed at creation: the function finds this schema's tables whoever writes.
    # No sequential scans in it: its statements read one key's rows by key, but plpgsql keeps
    # the plans it makes first, and a new database's terms table was analyzed empty (made
    # below), where a scan is the cheapest plan: each key then scanned every earlier key's
    # terms, and a million keys loaded in one transaction took hours.
    "CREATE OR REPLACE FUNCTION apikey_tui_key_search_terms_refresh() RETURNS trigger "
    "LANGUAGE plpgsql SET search_path FROM CURRENT SET enable_seqscan = off "
    "AS $$ DECLARE changed integer; BEGIN "
    "IF TG_TABLE_NAME = 'apikey_tui_key' THEN "
    "IF TG_OP = 'DELETE' THEN changed := OLD.id; ELSE changed := NEW.id; END IF; "
    "ELSIF TG_OP = 'DELETE' THEN changed := OLD.key_id; ELSE changed := NEW.key_id; END IF; "
    "DELETE FROM apikey_tui_key_search_terms WHERE key_id = changed; "
    "INSERT INTO apikey_tui_key_search_terms (key_id, terms) SELECT k.id, {words} "
    "FROM apikey_tui_key k WHERE k.id = changed; RETURN NULL; END $$",
    "CREATE OR REPLACE TRIGGER apikey_tui_key_search_terms_key "
    "AFTER INSERT OR DELETE OR UPDATE OF tags ON apikey_tui_key "
    "FOR EACH ROW EXECUTE FUNCTION apikey_tui_key_search_terms_refresh()",
    "CREATE OR REPLACE TRIGGER apikey_tui_key_search_terms_scope "
    "AFTER INSERT OR DELETE OR UPDATE ON apikey_tui_key_scope "
    "FOR EACH ROW EXECUTE FUNCTION apikey_tui_key_search_terms_refresh()",
    "TRUNCATE apikey_tui_key_search_terms",
    "INSERT INTO apikey_tui_key_search_terms (key_id, terms) "
    "SELECT k.id, {words} FROM apikey_tui_key k",
    "CREATE INDEX IF NOT EXISTS ix_apikey_tui_key_search_terms "
    "ON apikey_tui_key_search_terms USING gin (terms)",
    "ANALYZE apikey_tui_key_search_terms",
)
# What takes the terms away on PostgreSQL (a downgrade past schema 11: the function reads tags).
PG_TERMS_DROP = (
    "DROP TABLE IF EXISTS apikey_tui_key_search_terms",
    "DROP FUNCTION IF EXISTS apikey_tui_key_search_terms_refresh() CASCADE",
)
# PostgreSQL: how many of the first keys stored a probe looks at before asking the GIN index
# (it stops at COMMON of them holding the terms), and how many make the terms common (1 in
# 500: a window of 100 keys in the first 50,000 of its order, on average).
SAMPLE = 10_000
COMMON = 20
_PG_TERMS_TABLE = table(
    "apikey_tui_key_search_terms", column("key_id", Integer), column("terms", ARRAY(Text))
)
_PG_INDEXED = ("owner", "name", "public_id")
_PG_PROBE = "ix_apikey_tui_key_search_terms"  # the last one made: present means all are
# Every index this module makes (apart from SQLite's FTS5 tables): not part of the schema.
INDEXES = (
    "ix_apikey_tui_key_scope_scope",
    "ix_apikey_tui_key_name_owner",
    "ix_apikey_tui_key_last_used",
    *(f"ix_apikey_tui_key_{c}_trgm" for c in _PG_INDEXED),
)


def _sqlite_terms(statement: str) -> str:
    """One of _SQLITE_TERMS with its placeholders: a refresh of the key a trigger names, or
    of every key."""
    for row in ("new.id", "new.key_id", "old.key_id"):
        refresh = _SQLITE_REFRESH.replace("{id}", row).replace("{where}", f"k.id = {row}")
        statement = statement.replace("{" + row + "}", refresh)
    every = _SQLITE_REFRESH.split("; ", 1)[1].replace("{where}", "1 = 1").rstrip("; ")
    return statement.replace("{all}", every)


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
    if present(conn) and (not sqlite or present(conn, TERMS_TABLE)):
        return True
    # A savepoint: a refused CREATE would otherwise abort the caller's whole transaction.
    try:
        with conn.begin_nested():
            if sqlite:
                if not present(conn):
                    for statement in _SQLITE:
                        conn.execute(text(statement))
                # 0.9.0's tags table: the terms table answers its `tag:` terms now.
                for trigger in SQLITE_TAG_TRIGGERS[:3]:
                    conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
                conn.execute(text(f"DROP TABLE IF EXISTS {TAGS_TABLE}"))
                if not present(conn, TERMS_TABLE):
                    for statement in _SQLITE_TERMS:  # as written: its colons are no parameters
                        conn.exec_driver_sql(_sqlite_terms(statement))
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
                for column in _PG_INDEXED:
                    index = f"ix_apikey_tui_key_{column}_trgm"  # in INDEXES
                    using = f"gin ({column} {opclass})"
                    conn.execute(
                        text(f"CREATE INDEX IF NOT EXISTS {index} ON apikey_tui_key USING {using}")
                    )
                # 0.9.0's trigram index over tags: the terms table answers `tag:` terms now.
                conn.execute(text("DROP INDEX IF EXISTS ix_apikey_tui_key_tags_trgm"))
                for statement in _PG_TERMS:  # the terms' index last: see _PG_PROBE
                    conn.exec_driver_sql(statement.replace("{words}", _PG_WORDS))
    except DBAPIError as exc:
        if lock_timed_out(exc):  # not a database that cannot hold it: one busy now (`upgrade`)
            raise
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


def term_ids(conn: Connection, fields: Sequence[Sequence[str]], limit: int) -> list[int] | None:
    """Ids of the keys holding a word of every field (its alternatives: 'tag:env=prod',
    'tag:env' for any value, 'scope:serving'), if fewer than limit; else None (too common to
    list, or no terms table: the caller's exact terms decide alone).

    A superset on SQLite (its tokenizer folds case): the caller still applies its exact terms.
    """
    if not fields:
        return None
    if any(not _WORD.fullmatch(w) for words in fields for w in words):
        return []  # no tag or scope holds such a word
    if conn.dialect.name == "sqlite":
        if not present(conn, TERMS_TABLE):
            return None
        # A word in double quotes is one token; a tag of any value is the prefix 'tag:env=' *.
        query = " AND ".join(
            "(" + " OR ".join(_any_value(w) or f'"{w}"' for w in words) + ")" for words in fields
        )
        statement = text(
            "SELECT rowid FROM apikey_tui_key_search_terms "
            "WHERE apikey_tui_key_search_terms MATCH :query LIMIT :n"
        )
        ids = list(conn.execute(statement, {"query": query, "n": limit}).scalars())
    else:
        if not present(conn):
            return None
        # A GIN index answers with a bitmap of every key holding the words (60 ms for a third
        # of a million), however few are wanted. The first keys stored tell common terms cheaply
        # (a few ms): met there often enough, the window's order meets a screenful soon too.
        first = select(_PG_TERMS_TABLE.c.terms).limit(SAMPLE).subquery()
        seen = select(first.c.terms).where(
            *(first.c.terms.overlap(list(words)) for words in fields)
        )
        met = select(func.count()).select_from(seen.limit(COMMON).subquery())
        if conn.execute(met).scalar_one() >= COMMON:
            return None
        # Off the sequential scan: the planner takes the words as independent, so for two
        # common ones that never meet it expects the first rows soon and would read the whole
        # table to learn that none match.
        off = "SELECT current_setting('enable_seqscan'), set_config('enable_seqscan', 'off', true)"
        was = conn.execute(text(off)).scalar_one()
        probe = holding(fields).limit(limit)
        ids = list(conn.execute(probe).scalars())
        conn.execute(text("SELECT set_config('enable_seqscan', :was, true)"), {"was": was})
    return sorted(ids) if len(ids) < limit else None


def holding(fields: Sequence[Sequence[str]]) -> Select[tuple[int]]:
    """PostgreSQL: a query of the ids of the keys holding a word of every field (`term_ids`),
    which the planner may answer from the terms' GIN index: every field one condition on it
    (any of its words: &&), all of them together in one scan of it."""
    wanted = [_PG_TERMS_TABLE.c.terms.overlap(list(words)) for words in fields]
    return select(_PG_TERMS_TABLE.c.key_id).where(*wanted)


def _any_value(word: str) -> str | None:
    """SQLite: the prefix query of a tag term of any value ('tag:env'), else None."""
    name, sep, rest = word.partition(":")
    return f'"{word}=" *' if name == "tag" and sep and "=" not in rest else None
