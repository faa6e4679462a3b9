"""The key filter's trigram index: same answers as a scan, few rows read, kept current.

Run on SQLite and the real PostgreSQL. A rare filter at a million keys used to scan every key
(half a second on SQLite, a second on PostgreSQL); the index finds the few matches instead.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import event, insert, text

from apikey_tui.cli import main
from apikey_tui.db import key_indexes
from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.store import SORTS, KeyInfo, KeyQuery, KeyStore, ordering, queries
from tests.conftest import ACTOR, CHEAP

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def add_keys(store: KeyStore, count: int, owner: str, prefix: str) -> None:
    """count keys named prefix-00000… (fake hashes: the filter never reads them)."""
    rows = [
        {
            "owner": owner,
            "name": f"{prefix}-{n:05d}",
            "public_id": f"ak{owner[:3]}{prefix[:3]}{n:08d}",
            "secret_hash": "not-a-hash",
            "created_at": NOW - timedelta(minutes=n),
        }
        for n in range(count)
    ]
    with store.engine.begin() as conn:
        conn.execute(insert(KeyRow), rows)
        key = KeyRow.__table__  # type: ignore[attr-defined]
        mine = key.c.name.startswith(f"{prefix}-")
        ids = conn.execute(key.select().where(key.c.owner == owner, mine)).all()
        scope = "project" if prefix != "odd" else "serving"
        conn.execute(insert(KeyScopeRow), [{"key_id": r.id, "scope": scope} for r in ids])


def drop_index(store: KeyStore) -> None:
    """Take the trigram and terms indexes away, as in a database made before they existed."""
    with store.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            for trigger in ("insert", "delete", "update"):
                conn.execute(text(f"DROP TRIGGER {key_indexes.SEARCH_TABLE}_{trigger}"))
            for trigger in key_indexes.SQLITE_TAG_TRIGGERS:
                conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
            for table in (key_indexes.SEARCH_TABLE, key_indexes.TERMS_TABLE):
                conn.execute(text(f"DROP TABLE {table}"))
        else:
            for index in key_indexes.INDEXES:
                conn.execute(text(f"DROP INDEX {index}"))
            for statement in key_indexes.PG_TERMS_DROP:
                conn.execute(text(statement))


def matches(key: KeyInfo, needle: str) -> bool:
    text_ = needle.strip().lower()
    fields = [key.owner, key.name, key.public_id]
    return any(text_ in f.lower() for f in fields) or any(text_ in s for s in key.scopes)


# LIKE's wildcards, FTS5's syntax (quotes, operators, prefixes, columns), a NUL, short text
NEEDLES = ["00042", "KEY-0004", "abc", "b-000", "odd-0", "ak", "x", "%", "_0", 'a"b', "serv", "zz"]
NEEDLES += ['"', "NEAR(key b)", "key*", "-key", "AND", "{name}: key", "key-0\x00001", "\\"]


def test_filter_answers_agree_with_a_python_filter_on_both_paths(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows, counts and positions of a filtered query equal Python's, index path or scan."""
    add_keys(store, 60, "alice", "key")
    add_keys(store, 25, "bob", "b")
    add_keys(store, 7, "carol", "odd")
    store.create_key("bob", "Deploy_Prod", ["serving"])
    everything = store.list_keys()
    with store.engine.connect() as conn:
        assert key_indexes.present(conn)  # a fresh database gets the index
    for sparse in (5, 10_000):  # common text scans; rare text reads the index's candidates
        monkeypatch.setattr(queries, "SPARSE", sparse)
        for owner in (None, "alice", "bob"):
            for needle in NEEDLES:
                for sort in ("name", "created"):
                    query = KeyQuery(owner, needle, sort)
                    expected = sorted(
                        (k for k in everything if owner in (None, k.owner) and matches(k, needle)),
                        key=lambda k: (k.name, k.owner) if sort == "name" else (k.created_at,),
                    )
                    label = (sparse, owner, needle, sort)
                    if sort == "created":
                        # ties in created_at across owners: compare the sets
                        got = store.key_window(query, 0, 500)
                        assert sorted(got, key=repr) == sorted(expected, key=repr), label
                    else:
                        assert store.key_window(query, 0, 500) == expected, label
                    assert store.count_keys(query) == len(expected), label
                    if expected and sort == "name":  # created: ties, positions not unique
                        last = expected[-1]
                        position = store.key_position(query, last.owner, last.name)
                        assert position == len(expected) - 1, label


def _sqlite_steps(store: KeyStore, query: KeyQuery, *, total: int | None = None) -> int:
    """SQLite virtual-machine steps (in hundreds) that reading query's first window takes."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    def hook(conn: Any, cursor: Any, statement: Any, *args: Any) -> None:
        raw = conn.connection.driver_connection
        assert isinstance(raw, sqlite3.Connection)
        raw.set_progress_handler(count, 100)

    event.listen(store.engine, "before_cursor_execute", hook)
    try:
        store.key_window(query, 0, 50, total=total)
    finally:
        event.remove(store.engine, "before_cursor_execute", hook)
    return steps


def test_a_rare_filter_reads_few_rows_on_sqlite(sqlite_url: str) -> None:
    """A filter matching 100 keys in 25,000 costs what it costs at 5,000, and a fifth of a
    scan's or less, in every sort (counted in SQLite's steps, not time)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        add_keys(store, 5000, "alice", "key")
        queries = [KeyQuery("alice", "key-042", sort) for sort in ("name", "created")]
        queries.append(KeyQuery(None, "key-042", "last_used"))
        small = [_sqlite_steps(store, q) for q in queries]
        add_keys(store, 20_000, "alice", "other")
        for query in queries:
            names = [k.name for k in store.key_window(query, 0, 50)]
            assert len(names) == 50 and all(n.startswith("key-042") for n in names)
        big = [_sqlite_steps(store, q) for q in queries]
        drop_index(store)
        scanning = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
        try:
            scanned = [_sqlite_steps(scanning, q) for q in queries]
        finally:
            scanning.close()
        for label, few, more, scan in zip(queries, small, big, scanned, strict=True):
            assert more < 2 * few + 20, (label, few, more)  # not a walk over the owner's keys
            assert more * 5 < scan, (label, more, scan)
    finally:
        store.close()


def test_every_order_reads_a_window_without_walking_the_table_on_sqlite(sqlite_url: str) -> None:
    """The first window of every indexed sort, both directions, one owner or all, costs the
    same work at 25,000 keys as at 5,000 (an index gives each order; counted in steps, not
    time). State, Expires and Scopes are computed at the read's moment: no index can give
    them, and they are measured in benchmarks/bench_table_sorts.py instead."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        add_keys(store, 5000, "alice", "key")
        queries = [
            KeyQuery(owner, "", sort, reverse)
            for owner in (None, "alice")
            for sort in SORTS
            for reverse in (False, True)
            if not ordering.computed(KeyQuery(owner, "", sort))
        ]
        assert len(queries) == 20  # name, owner, public id, created, last used
        small = [_sqlite_steps(store, q, total=5000) for q in queries]
        add_keys(store, 20_000, "alice", "other")
        big = [_sqlite_steps(store, q, total=25_000) for q in queries]
        for label, few, more in zip(queries, small, big, strict=True):
            assert more < 2 * few + 20, (label, few, more)
    finally:
        store.close()


def test_postgres_can_plan_a_rare_filter_through_the_trigram_index(postgres_url: str) -> None:
    """A rare filter's window query can be served by a pg_trgm index (the right operator class,
    reachable from the store's search path). Which plan wins depends on the table's size: at a
    million keys the planner picks the index by itself (benchmarks/bench_tui_scale.py)."""
    store = KeyStore.open(postgres_url, hasher=CHEAP, actor=ACTOR)
    statements: list[tuple[str, Any]] = []

    def hook(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "ORDER BY" in statement and "LIMIT" in statement:
            statements.append((statement, parameters))

    try:
        add_keys(store, 20_000, "alice", "key")
        with store.engine.begin() as conn:
            conn.execute(text("ANALYZE apikey_tui_key"))
        event.listen(store.engine, "before_cursor_execute", hook)
        assert [k.name for k in store.key_window(KeyQuery(None, "key-04242"), 0, 50)] == [
            "key-04242"
        ]
        event.remove(store.engine, "before_cursor_execute", hook)
        statement, parameters = statements[-1]
        with store.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            # at 20,000 keys a scan is cheap: rule scans out to see whether the index applies
            cursor.execute("SET enable_seqscan = off")
            cursor.execute("SET enable_indexscan = off")
            cursor.execute("EXPLAIN " + statement, parameters)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "_trgm" in plan, plan
    finally:
        store.close()


def test_sqlite_triggers_keep_the_index_true_to_the_keys(sqlite_url: str) -> None:
    """After create, recreate, rotate, delete and a verifier's use, the FTS5 index checks out."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "ci-deploy", ["serving"])
        store.create_key("alice", "grafana", ["project"])

        def public_id(name: str) -> str:
            return next(k.public_id for k in store.list_keys("alice") if k.name == name)

        first_id = public_id("ci-deploy")
        store.recreate_key("alice", "ci-deploy")
        second_id = public_id("ci-deploy")
        store.rotate_key("alice", "ci-deploy", grace=timedelta(hours=1))
        third_id = public_id("ci-deploy")
        store.delete_key("alice", "grafana")
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE apikey_tui_key SET last_used_at = CURRENT_TIMESTAMP"))
            # raises if the index and the table disagree
            check = "INSERT INTO apikey_tui_key_search(apikey_tui_key_search) VALUES (:command)"
            conn.execute(text(check), {"command": "integrity-check"})
            assert key_indexes.candidate_ids(conn, third_id, [], 10) == [1]
            for gone in (first_id, second_id, "grafana"):
                assert key_indexes.candidate_ids(conn, gone, [], 10) == [], gone
    finally:
        store.close()


def test_a_rare_tag_reads_few_rows_on_sqlite(sqlite_url: str) -> None:
    """A tag term matching 3 keys or none in 20,000, alone or with other terms, reads a tenth
    of a scan's steps or less (the keys' terms index names them), and finds the same keys."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        add_keys(store, 20_000, "alice", "key")
        for n in range(3):
            store.create_key("bob", f"rare-{n}", ["project"], tags=[("env", "rare"), ("n", str(n))])
        texts = ["tag:env=rare", "tag:env=rare scope:project", "tag:n=1 tag:n=2", "tag:zzz=q"]
        queries = [KeyQuery(owner, t) for t in texts for owner in (None, "bob")]
        indexed = [_sqlite_steps(store, q) for q in queries]
        found = [[k.name for k in store.key_window(q, 0, 50)] for q in queries]
        assert found[0] == found[1] == found[2] == found[3] == ["rare-0", "rare-1", "rare-2"]
        assert found[4] == found[5] == ["rare-1", "rare-2"] and found[6] == found[7] == []
        drop_index(store)
        scanning = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
        try:
            assert [[k.name for k in scanning.key_window(q, 0, 50)] for q in queries] == found
            scanned = [_sqlite_steps(scanning, q) for q in queries]
        finally:
            scanning.close()
        for query, few, scan in zip(queries, indexed, scanned, strict=True):
            if query.owner is None:  # bob's three keys are few through the owner index too
                assert few * 10 < scan, (query, few, scan)
    finally:
        store.close()


def test_triggers_keep_the_terms_index_true_to_the_keys(database_url: str) -> None:
    """After tagging at creation, retagging, clearing, changing scopes and deleting, the keys'
    terms index names exactly the keys holding a tag or scope, on both backends."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "a", ["project"], tags=[("env", "prod")])
        store.create_key("alice", "b", ["project"], tags=[("env", "prod")])
        store.create_key("alice", "c", ["project"])
        keys = {k.name: k for k in store.list_keys("alice")}
        store.set_tags_of_keys([keys["a"]], [("env", "dev")])
        store.set_tags_of_keys([keys["c"]], [("env", "prod")])
        store.set_tags_of_keys([keys["b"]], [])
        store.set_scopes_of_keys([keys["b"]], ["serving"])
        store.delete_key("alice", "c")
        with store.engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                check = (
                    "INSERT INTO apikey_tui_key_search_terms(apikey_tui_key_search_terms) "
                    "VALUES ('integrity-check')"
                )
                conn.execute(text(check))  # raises if the index and its rows disagree
            ids: dict[str, int] = dict(
                conn.execute(text("SELECT name, id FROM apikey_tui_key")).all()
            )
            a, b = ids["a"], ids["b"]

            def found(*fields: list[str], limit: int = 10) -> list[int] | None:
                return key_indexes.term_ids(conn, list(fields), limit)

            assert found(["tag:env=dev"]) == [a]
            assert found(["tag:env"]) == [a]
            assert found(["tag:env=prod"]) == []
            assert found(["scope:serving"]) == [b]
            assert found(["scope:project"]) == [a]
            assert found(["scope:project", "scope:serving"]) == [a, b]
            assert found(["scope:serving"], ["tag:env=dev"]) == []
            assert found(["scope:project"], ["tag:env=dev", "tag:x=y"]) == [a]
            assert found(["scope:project", "scope:serving"], limit=2) is None  # not fewer
            assert found(["tag:env=a b"]) == []  # no tag holds a space
    finally:
        store.close()


def test_two_common_terms_that_never_meet_read_few_rows_on_sqlite(sqlite_url: str) -> None:
    """`scope:serving tag:env=dev` where half the keys hold each and none both reads a tenth
    of a walk's steps or less (the terms index intersects them), and finds the same keys."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        add_keys(store, 10_000, "alice", "key")  # scope project
        add_keys(store, 10_000, "alice", "odd")  # scope serving
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE apikey_tui_key SET tags = 'env=dev' WHERE name LIKE 'key-%'"))
        store.create_key("bob", "both", ["serving"], tags=[("env", "dev")])
        queries = [KeyQuery(owner, "scope:serving tag:env=dev") for owner in (None, "alice")]
        queries.append(KeyQuery(None, "tag:env=dev scope:serving scope:none"))
        indexed = [_sqlite_steps(store, q) for q in queries]
        found = [[k.name for k in store.key_window(q, 0, 50)] for q in queries]
        assert found == [["both"], [], ["both"]]
        drop_index(store)
        scanning = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
        try:
            assert [[k.name for k in scanning.key_window(q, 0, 50)] for q in queries] == found
            scanned = [_sqlite_steps(scanning, q) for q in queries]
        finally:
            scanning.close()
        for query, few, walk in zip(queries, indexed, scanned, strict=True):
            assert few * 10 < walk, (query, few, walk)
    finally:
        store.close()


def test_postgres_finds_terms_through_the_terms_gin_index(postgres_url: str) -> None:
    """The terms probe of two common scope and tag terms is planned through the terms table's
    GIN index (EXPLAIN names it), and the window it narrows finds the one key holding both;
    terms common together give the same keys and count read through the terms by key id."""
    store = KeyStore.open(postgres_url, hasher=CHEAP, actor=ACTOR)
    statements: list[tuple[str, Any]] = []

    def hook(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if "apikey_tui_key_search_terms" in statement and "&&" in statement:
            statements.append((statement, parameters))

    try:
        add_keys(store, 5000, "alice", "key")
        add_keys(store, 5000, "alice", "odd")
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE apikey_tui_key SET tags = 'env=dev' WHERE name LIKE 'key-%'"))
            conn.execute(text("ANALYZE"))
        store.create_key("bob", "both", ["serving"], tags=[("env", "dev")])
        event.listen(store.engine, "before_cursor_execute", hook)
        query = KeyQuery(None, "scope:serving tag:env=dev")
        assert [k.name for k in store.key_window(query, 0, 50)] == ["both"]
        event.remove(store.engine, "before_cursor_execute", hook)
        statement, parameters = statements[-1]
        with store.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            cursor.execute("SET enable_seqscan = off")  # as the probe does
            cursor.execute("EXPLAIN " + statement, parameters)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "ix_apikey_tui_key_search_terms" in plan, plan
        # Common together: the window and the count read the terms by key id, exactly.
        common = KeyQuery(None, "tag:env=dev scope:project")
        names = [k.name for k in store.key_window(common, 0, 50)]
        assert names == [f"key-{n:05d}" for n in range(50)]
        assert store.count_keys(common) == 5000
        assert store.count_keys(KeyQuery(None, "tag:env scope:serving")) == 1
    finally:
        store.close()


def test_db_upgrade_adds_the_index_to_a_database_without_it(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade` on a current database lacking the index makes it and says so in --json."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    try:
        add_keys(store, 30, "alice", "key")
        drop_index(store)
        with store.engine.connect() as conn:
            assert not key_indexes.present(conn)
        capsys.readouterr()
        assert main(["--database-url", database_url, "db", "upgrade", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["filter_index"] is True
        with store.engine.connect() as conn:
            assert key_indexes.present(conn)
            if conn.dialect.name == "sqlite":  # made from the keys already there
                assert len(key_indexes.candidate_ids(conn, "key-0001", [], 50) or []) == 10
    finally:
        store.close()


@pytest.fixture
def database_without_pg_trgm(postgres_server: str) -> Iterator[str]:
    """A fresh PostgreSQL database with no pg_trgm, and a role that owns a schema but may not
    create extensions in it: the URL of that role."""
    name, role = f"nt_{uuid.uuid4().hex[:10]}", f"r_{uuid.uuid4().hex[:10]}"
    admin = postgres_server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
    home = admin.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(home, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    try:
        url = postgres_server.rsplit("/", 1)[0].replace("postgres@", f"{role}@")
        yield f"{url}/{name}?options=-csearch_path%3D{role}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
            conn.execute(f"DROP ROLE {role}")


def test_without_pg_trgm_the_filter_scans_and_db_upgrade_says_so(
    database_without_pg_trgm: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role that may not create pg_trgm gets a working database, a scanning filter, a note."""
    url = database_without_pg_trgm
    capsys.readouterr()
    assert main(["--database-url", url, "db", "upgrade", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["filter_index"] is False
    assert "scans every key" in captured.err and "Traceback" not in captured.err
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "ci-deploy", ["serving"])
        with store.engine.connect() as conn:
            assert not key_indexes.present(conn)
        assert [k.name for k in store.key_window(KeyQuery(None, "DEPLOY"), 0, 5)] == ["ci-deploy"]
    finally:
        store.close()


def test_tag_terms_match_whole_tags_whatever_their_characters(database_url: str) -> None:
    """A tag term matches a whole tag (or a tag's name, any value), never a part of one, and
    reads . + : / @ _ - in values as themselves, on both backends."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    try:
        tags = {
            "a": [("env", "prod"), ("v", "1.2")],
            "b": [("env", "production"), ("v", "1x2")],
            "c": [("renv", "prod"), ("url", "a+b:c/d@e_f-g")],
            "d": [("aaa_b", "x")],
        }
        for name, pairs in tags.items():
            store.create_key("alice", name, ["project"], tags=pairs)
        expected = {
            "tag:env=prod": ["a"],
            "tag:env=pro": [],
            "tag:nv=prod": [],
            "tag:env": ["a", "b"],
            "tag:v=1.2": ["a"],
            "tag:url=a+b:c/d@e_f-g": ["c"],
            "tag:url=a+b": [],
            "tag:aaa_b=x": ["d"],
            "tag:aaa.b=x": [],
            "tag:env=prod tag:renv=prod": ["a", "c"],
        }
        for text_, names in expected.items():
            found = [k.name for k in store.key_window(KeyQuery(None, text_), 0, 50)]
            assert found == names, text_
    finally:
        store.close()


def test_a_bulk_load_on_a_new_postgres_database_reads_the_terms_by_key(postgres_url: str) -> None:
    """Keys loaded in one transaction into a new database keep the terms by key id, never by
    scanning the terms table: its trigger's statements were planned while the table was empty
    (analyzed when the index was made), so each key scanned every earlier key's terms and a
    million keys took hours (bench_scale's fill). Counted in the transaction's own statistics:
    a handful of scans however many keys (3 for 10 keys and for 1,000 here), not two a key."""
    store = KeyStore.open(postgres_url, hasher=CHEAP, actor=ACTOR)
    try:
        rows = [
            {"owner": "bulk", "name": f"k-{n:04d}", "public_id": f"akbulk{n:012d}",
             "secret_hash": "not-a-hash", "created_at": NOW}
            for n in range(300)
        ]  # fmt: skip
        with store.engine.begin() as conn:
            conn.execute(insert(KeyRow), rows)
            key = KeyRow.__table__  # type: ignore[attr-defined]
            ids = conn.execute(key.select().where(key.c.owner == "bulk")).all()
            conn.execute(insert(KeyScopeRow), [{"key_id": r.id, "scope": "project"} for r in ids])
            scans = conn.execute(
                text(
                    "SELECT seq_scan FROM pg_stat_xact_user_tables"
                    " WHERE relname = :t AND schemaname = current_schema()"
                ),
                {"t": key_indexes.TERMS_TABLE},
            ).scalar_one()
        assert scans < 30, scans  # a few plans' first runs; was two per key (603)
        assert store.count_keys(KeyQuery(None, "scope:project")) == 300
    finally:
        store.close()
