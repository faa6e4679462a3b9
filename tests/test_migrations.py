"""Databases made by apikey-tui 0.1.0 (tests/fixtures/make_v1.py) upgraded in place with Alembic.

Each test runs on the SQLite file and on the PostgreSQL dump, loaded into the test's own schema.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.db import ensure_schema, key_indexes, make_engine, upgrade_schema
from apikey_tui.db.migrations import VERSION_TABLE, is_ours
from apikey_tui.db.models import SCHEMA_VERSION, Base
from apikey_tui.db.schema import alembic_config
from apikey_tui.errors import InvalidKeyError, SchemaVersionError, VerifierUnavailableError
from apikey_tui.hashing import fingerprint
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, every_fingerprint

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_SCHEMA = "apikey_tui_v1_fixture"  # the schema make_v1.py dumped


@dataclass(frozen=True)
class OldDatabase:
    """A database made by 0.1.0, and what make_v1.py recorded about its keys."""

    url: str
    story: dict[str, Any]

    def keys(self, state: str) -> list[dict[str, Any]]:
        """The fixture's keys in one state: live, deleted or recreated."""
        return [k for k in self.story["keys"] if k["state"] == state]


def load_postgres_dump(url: str) -> None:
    """Load v1.postgres.sql into the (empty, existing) schema that url's search_path names."""
    schema = re.search(r"search_path%3D(\w+)", url)
    assert schema is not None
    statements = [
        line.replace(FIXTURE_SCHEMA, schema.group(1))
        for line in (FIXTURES / "v1.postgres.sql").read_text().splitlines()
        # psql's meta-commands (\restrict) and the schema itself, which the test already made
        if not line.startswith("\\") and line != f"CREATE SCHEMA {FIXTURE_SCHEMA};"
    ]
    libpq = url.replace("postgresql+psycopg://", "postgresql://").split("?")[0]
    with psycopg.connect(libpq) as conn:
        conn.execute("\n".join(statements).encode())


@pytest.fixture(params=["sqlite", "postgresql"])
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> OldDatabase:
    """A copy of the 0.1.0 SQLite file, or the 0.1.0 PostgreSQL dump in a fresh schema."""
    if request.param == "sqlite":
        path = tmp_path / "keys.db"
        shutil.copyfile(FIXTURES / "v1.sqlite", path)
        path.chmod(0o600)
        url, story_file = f"sqlite:///{path}", "v1.sqlite.json"
    else:
        url, story_file = request.getfixturevalue("postgres_url"), "v1.postgres.json"
        load_postgres_dump(url)
    return OldDatabase(url, json.loads((FIXTURES / story_file).read_text()))


@pytest.fixture
def verifier_of(old_database: OldDatabase) -> Iterator[list[Verifier]]:
    """Verifiers made in a test, closed after it."""
    made: list[Verifier] = []
    yield made
    for verifier in made:
        verifier.close()


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(query))]
    finally:
        engine.dispose()


def _shape(conn: Connection) -> dict[str, Any]:
    """Every apikey-tui table's columns, keys, constraints and indexes, as reflected.

    The filter's trigram index is left out: it is not part of any schema version."""
    found = inspect(conn)
    shape: dict[str, Any] = {}
    for name in sorted(found.get_table_names()):
        if not name.startswith("apikey_tui_") or name == "apikey_tui_alembic_version":
            continue
        if name.startswith(key_indexes.SEARCH_TABLE):  # the FTS5 table and its shadow tables
            continue
        shape[name] = {
            "columns": [
                (c["name"], repr(c["type"]), c["nullable"], c.get("default"))
                for c in found.get_columns(name)
            ],
            "primary_key": found.get_pk_constraint(name)["constrained_columns"],
            "foreign_keys": sorted(
                (f["constrained_columns"], f["referred_table"], f["options"].get("ondelete"))
                for f in found.get_foreign_keys(name)
            ),
            "unique": sorted(
                (u["name"] or "", u["column_names"]) for u in found.get_unique_constraints(name)
            ),
            "indexes": sorted(
                (i["name"] or "", i["column_names"], i["unique"])
                for i in found.get_indexes(name)
                if i["name"] not in key_indexes.INDEXES
            ),
        }
    return shape


def test_revision_0001_is_exactly_the_schema_0_1_0_made(
    old_database: OldDatabase, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Migration 0001 on an empty database builds the very tables 0.1.0's create_all built."""
    if old_database.url.startswith("sqlite"):
        empty_url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        postgres_server: str = request.getfixturevalue("postgres_server")
        empty_url = old_database.url.replace("search_path%3D", "search_path%3De_")
        schema = empty_url.rsplit("%3D", 1)[1]
        _psql(postgres_server, f"CREATE SCHEMA {schema}")
    old, empty = make_engine(old_database.url), make_engine(empty_url)
    try:
        with empty.begin() as conn:
            command.upgrade(alembic_config(conn), "0001")
        with old.connect() as made_by_0_1_0, empty.connect() as made_by_0001:
            assert _shape(made_by_0001) == _shape(made_by_0_1_0)
            assert made_by_0001.execute(text("SELECT * FROM apikey_tui_meta")).all() == [
                ("schema_version", "1")
            ]
    finally:
        old.dispose()
        empty.dispose()
        if not empty_url.startswith("sqlite"):
            _psql(postgres_server, f"DROP SCHEMA {schema} CASCADE")


def _psql(server: str, statement: str) -> None:
    with psycopg.connect(server.replace("postgresql+psycopg://", "postgresql://")) as conn:
        conn.execute(statement.encode())


def test_upgrade_keeps_every_key_working_and_every_old_key_refused(
    old_database: OldDatabase,
    verifier_of: list[Verifier],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After `db upgrade` live keys verify with their scopes; deleted and recreated stay refused.
    It says to restart the services: a running 0.1.0 verifier would accept disabled keys."""
    code, _, err = _cli(capsys, old_database.url, "db", "upgrade")
    assert code == 0 and f"Upgraded the database from schema version 1 to {SCHEMA_VERSION}." in err
    assert "Restart every service now" in err and "disabled and expired keys" in err
    verifier = Verifier.from_url(old_database.url)
    verifier_of.append(verifier)
    for key in old_database.keys("live"):
        caller = verifier.verify("ApiKey " + key["key"], key["scopes"])
        assert (caller.owner, caller.key_name, sorted(caller.scopes)) == (
            key["owner"],
            key["name"],
            key["scopes"],
        )
    for key in old_database.keys("deleted") + old_database.keys("recreated"):
        with pytest.raises(InvalidKeyError):
            verifier.verify("ApiKey " + key["key"])
    assert _rows(
        old_database.url, "SELECT value FROM apikey_tui_meta WHERE key = 'schema_version'"
    ) == [("11",)]


def test_upgrade_says_an_older_verifier_started_after_it_may_answer_unrestricted(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade` does not promise that every older release started after it answers 503:
    from 0.4 on one keeps answering (verifiers_from), enforcing no limits or network rules it
    does not know, and the operator must hear that."""
    code, _, err = _cli(capsys, old_database.url, "db", "upgrade")
    assert code == 0
    assert "An older release started after the upgrade answers 503." not in err
    assert "network rules" in err and "limits" in err


@contextmanager
def _held(url: str, statement: bytes) -> Iterator[None]:
    """`statement` run in a transaction another session keeps open while the block runs, and
    ended after 30 s in any case: code that waits for it fails a test instead of hanging it."""
    import threading

    holder = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))
    holder.execute(statement)
    release = threading.Timer(30, holder.rollback)
    release.start()
    try:
        yield
    finally:
        release.cancel()
        holder.rollback()
        holder.close()


def test_upgrade_blocked_by_another_session_gives_up_and_can_be_run_again(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On PostgreSQL a `db upgrade` that another session's open transaction on the key table
    holds up gives up with one line saying so, having changed nothing, instead of waiting (and
    queueing every service's read of the keys behind it) for as long as that session lasts;
    run again once it ended, it upgrades."""
    load_postgres_dump(postgres_url)
    # An open transaction's share lock on the key table.
    with _held(postgres_url, b"SELECT count(*) FROM apikey_tui_key"):
        code, _, err = _cli(capsys, postgres_url, "db", "upgrade")
    assert code == 1 and "apikey-tui db upgrade" in err and "session" in err
    assert len(err.strip().splitlines()) == 1
    assert _rows(postgres_url, "SELECT value FROM apikey_tui_meta WHERE key = "
                 "'schema_version'") == [("1",)]  # fmt: skip
    code, _, err = _cli(capsys, postgres_url, "db", "upgrade")
    assert code == 0 and f"from schema version 1 to {SCHEMA_VERSION}." in err
    # Run again at this version it only adds missing indexes, which wait for writers: the same.
    with _held(postgres_url, b"UPDATE apikey_tui_key SET last_used_at = last_used_at"):
        code, _, err = _cli(capsys, postgres_url, "db", "upgrade")
    assert code == 1 and "another session holds" in err


def test_upgrade_keeps_events_and_usage_and_fingerprints_only_new_keys(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events and last-used times survive; old keys have no fingerprint, new keys do."""
    events_query = "SELECT id, at, action, owner, key_name, public_id, detail FROM apikey_tui_event"
    events_before = _rows(old_database.url, events_query)
    used_query = "SELECT public_id, last_used_at FROM apikey_tui_key ORDER BY public_id"
    used_before = _rows(old_database.url, used_query)
    assert len(events_before) == old_database.story["events"]
    assert main(["--database-url", old_database.url, "db", "upgrade"]) == 0
    assert _rows(old_database.url, events_query) == events_before
    assert _rows(old_database.url, used_query) == used_before
    store = KeyStore.open(old_database.url, hasher=CHEAP, actor=ACTOR)
    try:
        new = keyformat.parse(store.create_key("alice", "after-upgrade", ["project"]).plaintext)
        fingerprints = every_fingerprint(store)
        assert store.events(limit=1)[0].action == "key.create"
    finally:
        store.close()
    assert fingerprints.pop(new.public_id) == fingerprint(new.public_id, new.secret)
    assert sorted(fingerprints.values(), key=str) == [None] * len(old_database.keys("live"))


def test_second_upgrade_says_it_is_already_done(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """Running `db upgrade` on an upgraded database changes nothing and says so."""
    assert _cli(capsys, old_database.url, "db", "upgrade")[0] == 0
    code, out, err = _cli(capsys, old_database.url, "db", "upgrade", "--json")
    assert code == 0 and f"already at schema version {SCHEMA_VERSION}" in err
    assert json.loads(out) == {
        "from_version": SCHEMA_VERSION,
        "to_version": SCHEMA_VERSION,
        "filter_index": True,
        "raised_verifiers_from": None,
    }


def test_admin_commands_refuse_an_old_database_with_one_line(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """keys and scopes commands on a 0.1.0 database say to run `db upgrade`, and change nothing."""
    for args in (["keys", "list", "--all"], ["keys", "create", "x", "--scope", "project"]):
        code, out, err = _cli(capsys, old_database.url, *args)
        assert (code, out) == (1, "")
        assert err.count("\n") == 1 and "run `apikey-tui db upgrade`" in err
        assert "schema version 1" in err
    assert _rows(old_database.url, "SELECT value FROM apikey_tui_meta") == [("1",)]
    engine = make_engine(old_database.url, create=False)
    try:
        with engine.connect() as conn:
            assert not inspect(conn).has_table("apikey_tui_alembic_version")
    finally:
        engine.dispose()


def test_verifier_on_an_old_database_answers_503_and_logs_one_line(
    old_database: OldDatabase,
    verifier_of: list[Verifier],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A verifier never upgrades: on a 0.1.0 database it is unavailable, saying why once."""
    verifier = Verifier.from_url(old_database.url)
    verifier_of.append(verifier)
    [live, *_] = old_database.keys("live")
    with caplog.at_level(logging.WARNING), pytest.raises(VerifierUnavailableError) as info:
        verifier.verify("ApiKey " + live["key"])
    assert info.value.status == 503
    [line] = [r.getMessage() for r in caplog.records if "db upgrade" in r.getMessage()]
    assert "schema version 1" in line and "\n" not in line
    engine = make_engine(old_database.url, create=False)
    with pytest.raises(SchemaVersionError, match="db upgrade"):
        ensure_schema(engine, create=False)
    engine.dispose()
    assert _rows(old_database.url, "SELECT value FROM apikey_tui_meta") == [("1",)]


def test_a_services_own_alembic_history_is_never_touched(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service's alembic_version table and its own tables survive our upgrade unchanged."""
    engine = make_engine(old_database.url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('svc_0042')"))
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, item VARCHAR(20))"))
        conn.execute(text("INSERT INTO orders VALUES (1, 'tea')"))
    engine.dispose()
    assert _cli(capsys, old_database.url, "db", "upgrade")[0] == 0
    assert _rows(old_database.url, "SELECT * FROM alembic_version") == [("svc_0042",)]
    assert _rows(old_database.url, "SELECT * FROM orders") == [(1, "tea")]
    assert _rows(old_database.url, "SELECT * FROM apikey_tui_alembic_version") == [("0011",)]


def test_upgrade_refuses_a_database_from_a_newer_release(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade` on a database stamped with an unknown revision refuses and writes nothing."""
    assert main(["--database-url", old_database.url, "db", "upgrade"]) == 0
    engine = make_engine(old_database.url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_alembic_version SET version_num = '0012'"))
    engine.dispose()
    capsys.readouterr()
    code, _, err = _cli(capsys, old_database.url, "db", "upgrade")
    assert code == 1 and "newer than this release" in err and err.count("\n") == 1
    assert _rows(old_database.url, "SELECT * FROM apikey_tui_alembic_version") == [("0012",)]


def test_downgrade_to_0001_gives_back_the_0_1_0_schema(old_database: OldDatabase) -> None:
    """Undoing 0002 leaves the 0.1.0 schema, version 1, keys and scopes; upgrading again works."""
    engine = make_engine(old_database.url)
    try:
        with engine.connect() as conn:
            before = _shape(conn)
        upgrade_schema(engine)
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0001")
        with engine.connect() as conn:
            assert _shape(conn) == before
            assert conn.execute(text("SELECT value FROM apikey_tui_meta")).all() == [("1",)]
            assert conn.execute(text("SELECT count(*) FROM apikey_tui_key_scope")).scalar() == 7
        assert upgrade_schema(engine)[:2] == (
            1,
            SCHEMA_VERSION,
        )  # and up again, from Alembic's own 0001
    finally:
        engine.dispose()


def test_concurrent_upgrades_on_postgres_upgrade_once(postgres_url: str) -> None:
    """Two `db upgrade`s racing on one PostgreSQL database: one upgrades, the other finds it."""
    load_postgres_dump(postgres_url)
    engines = [make_engine(postgres_url) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            results = sorted((r[:2] for r in pool.map(upgrade_schema, engines)), key=str)
    finally:
        for engine in engines:
            engine.dispose()
    assert results == [(1, SCHEMA_VERSION), (SCHEMA_VERSION, SCHEMA_VERSION)]


def test_upgraded_fixture_matches_the_models(old_database: OldDatabase) -> None:
    """A 0.1.0 database upgraded to version 3 has exactly the tables a fresh one has."""
    engine = make_engine(old_database.url)
    try:
        assert upgrade_schema(engine)[:2] == (1, SCHEMA_VERSION)
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"include_name": is_ours, "version_table": VERSION_TABLE}
            )
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_upgraded_keys_do_not_expire_are_enabled_and_can_rotate_with_grace(
    old_database: OldDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.1.0 keys come out of 1 -> 3 with no expiry and enabled; one rotated keeps its grace."""
    assert _cli(capsys, old_database.url, "db", "upgrade")[0] == 0
    code, out, _ = _cli(capsys, old_database.url, "keys", "list", "--all", "--json")
    listed = json.loads(out)
    assert code == 0 and len(listed) == len(old_database.keys("live"))
    assert {(k["expires_at"], k["disabled"], k["old_public_id"]) for k in listed} == {
        (None, False, None)
    }
    store = KeyStore.open(old_database.url, actor=ACTOR, create=False)  # the real hash profile
    try:
        [laptop] = [k for k in old_database.keys("live") if k["name"] == "laptop"]
        old = keyformat.parse(laptop["key"])
        store.rotate_key("alice", "laptop", grace=timedelta(hours=1))
        credential = store.credential(old.public_id)
        assert credential is not None and credential.fingerprint is None  # made by 0.1.0
        assert store.hasher.verify(credential.secret_hash, old.secret)
        assert credential.expires_at is not None and not credential.disabled
    finally:
        store.close()


def test_downgrade_0003_to_0002_refuses_while_a_key_is_disabled_then_works(
    old_database: OldDatabase,
) -> None:
    """Undoing 0003 is refused while a key is disabled (it would work again), then keeps keys."""
    engine = make_engine(old_database.url)
    upgrade_schema(engine)
    store = KeyStore.open(old_database.url, hasher=CHEAP, actor=ACTOR, create=False)
    try:
        with engine.connect() as conn:
            version_3 = _shape(conn)
        store.disable_key("ci-bot", "deploy", "test")
        store.set_lifetime_policy(timedelta(days=30))
        with pytest.raises(RuntimeError, match="disabled or expire"), engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0002")
        assert _rows(old_database.url, "SELECT value FROM apikey_tui_meta WHERE key = "
                     "'schema_version'") == [("11",)]  # fmt: skip
        store.enable_key("ci-bot", "deploy")
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0002")
        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("apikey_tui_key")}
            assert "fingerprint" in columns and "expires_at" not in columns
            assert "old_public_id" not in columns
            assert conn.execute(text("SELECT * FROM apikey_tui_meta")).all() == [
                ("schema_version", "2")
            ]
            assert conn.execute(text("SELECT count(*) FROM apikey_tui_key_scope")).scalar() == 7
        assert upgrade_schema(engine)[:2] == (2, SCHEMA_VERSION)
        with engine.connect() as conn:
            assert _shape(conn) == version_3
    finally:
        store.close()
        engine.dispose()


def test_0006_swaps_the_usage_minute_index_and_keeps_every_count(
    old_database: OldDatabase,
) -> None:
    """Down to 0005 and up again: the usage rows stay, and only the usage table's second index
    changes, from (minute) to (minute, kind, public_id, requests)."""
    engine = make_engine(old_database.url)
    rows = [("akone", 100, 1, 0, "project", 3), ("aktwo", 200, 60, 1, "admin", 2)]
    query = "SELECT public_id, minute, span, kind, scope, requests FROM apikey_tui_usage"

    def usage_indexes(conn: Connection) -> list[tuple[str, list[str]]]:
        return sorted(
            (i["name"] or "", [c or "" for c in i["column_names"]])
            for i in inspect(conn).get_indexes("apikey_tui_usage")
        )

    try:
        upgrade_schema(engine)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " VALUES (:p, :m, :s, :k, :c, :r)"
                ),
                [dict(zip("pmskcr", row, strict=True)) for row in rows],
            )
            command.downgrade(alembic_config(conn), "0005")
        with engine.connect() as conn:
            assert usage_indexes(conn) == [
                ("ix_apikey_tui_usage_key", ["public_id", "minute"]),
                ("ix_apikey_tui_usage_minute", ["minute"]),
            ]
            assert sorted(tuple(r) for r in conn.execute(text(query))) == rows
        assert upgrade_schema(engine)[:2] == (5, SCHEMA_VERSION)
        with engine.connect() as conn:
            assert usage_indexes(conn) == [
                ("ix_apikey_tui_usage_key", ["public_id", "minute"]),
                ("ix_apikey_tui_usage_window", ["minute", "kind", "public_id", "requests"]),
            ]
            assert sorted(tuple(r) for r in conn.execute(text(query))) == rows
    finally:
        engine.dispose()


def test_0007_gives_each_key_the_ids_it_had_so_its_usage_survives(
    old_database: OldDatabase,
) -> None:
    """Upgrading lists a key recreated under 0.1.0 with its earlier id (from its key.recreate
    event), so usage under that id is the key's, shown as an old secret; down to 0006 and up
    again gives the same list and keeps every count."""
    [stolen] = old_database.keys("recreated")
    old_id = keyformat.parse(stolen["key"]).public_id
    engine = make_engine(old_database.url)
    query = "SELECT p.public_id, k.owner, k.name FROM apikey_tui_previous_id p JOIN apikey_tui_key k ON k.id = p.key_id"  # noqa: E501
    store = None
    try:
        upgrade_schema(engine)
        with engine.connect() as conn:
            listed = [tuple(r) for r in conn.execute(text(query))]
        assert listed == [(old_id, stolen["owner"], stolen["name"])]
        store = KeyStore.open(old_database.url, hasher=CHEAP, actor=ACTOR, create=False)
        minute = int(store.clock().timestamp()) // 60
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " VALUES (:p, :m, 1, 0, 'project', 20), (:p, :m, 1, 1, 'admin', 5)"
                ),
                {"p": old_id, "m": minute},
            )
            command.downgrade(alembic_config(conn), "0006")
        with engine.connect() as conn:
            assert not inspect(conn).has_table("apikey_tui_previous_id")
            assert not inspect(conn).has_table("apikey_tui_usage_batch")
        assert upgrade_schema(engine)[:2] == (6, SCHEMA_VERSION)
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.execute(text(query))] == listed
        report = store.key_usage(stolen["owner"], stolen["name"])
        assert (report.requests, [(f.missing, f.requests) for f in report.forbidden]) == (
            20,
            [(("admin",), 5)],
        )
        assert [(s.public_id, s.old, s.requests, s.forbidden) for s in report.old_secrets] == [
            (old_id, True, 20, 5)
        ]
    finally:
        if store is not None:
            store.close()
        engine.dispose()


def test_0010_adds_network_rules_that_verifiers_enforce_and_downgrade_drops(
    old_database: OldDatabase,
) -> None:
    """From schema 9, 0010 adds the key's networks column and the owners' table; rules set then
    are enforced by a verifier; down to 0009 drops them (and usage by network), up again works."""
    from apikey_tui.errors import NetworkNotAllowedError
    from apikey_tui.networks import network_rules

    engine = make_engine(old_database.url)
    store = None
    [live] = old_database.keys("live")[:1]
    try:
        upgrade_schema(engine)
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0009")
        with engine.connect() as conn:
            assert "networks" not in {
                c["name"] for c in inspect(conn).get_columns("apikey_tui_key")
            }
            assert not inspect(conn).has_table("apikey_tui_owner_network")
        assert upgrade_schema(engine)[:2] == (9, SCHEMA_VERSION)
        store = KeyStore.open(old_database.url, hasher=CHEAP, actor=ACTOR, create=False)
        info = store.get_key(live["owner"], live["name"])
        assert info.networks is None
        store.set_networks_of_keys([info], network_rules(["10.0.0.0/8"]))
        store.set_owner_networks(live["owner"], network_rules(["10.1.0.0/16"]))
        verifier = Verifier.from_url(old_database.url, hasher=CHEAP)
        try:
            assert verifier.verify(f"ApiKey {live['key']}", (), "10.1.2.3").owner == live["owner"]
            with pytest.raises(NetworkNotAllowedError):
                verifier.verify(f"ApiKey {live['key']}", (), "10.2.0.1")
        finally:
            verifier.close()
        # Shadow rules refuse nothing, so going back may drop them (enforced ones: below).
        store.set_networks_of_keys([info], network_rules(["10.0.0.0/8"], mode="shadow"))
        store.set_owner_networks(live["owner"], network_rules(["10.1.0.0/16"], mode="shadow"))
        minute = int(store.clock().timestamp()) // 60
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                    " VALUES ('akx', :m, 1, 0, '', 3), ('akx', :m, 1, 6, '10.1.2.0/24', 1)"
                ),
                {"m": minute},
            )
            command.downgrade(alembic_config(conn), "0009")
        with engine.connect() as conn:
            kinds = conn.execute(text("SELECT kind FROM apikey_tui_usage WHERE public_id = 'akx'"))
            assert [k for (k,) in kinds] == [0]
        assert upgrade_schema(engine)[:2] == (9, SCHEMA_VERSION)
        assert store.get_key(live["owner"], live["name"]).networks is None
        assert store.owner_networks(live["owner"]) is None
    finally:
        if store is not None:
            store.close()
        engine.dispose()


def test_downgrade_0010_to_0009_refuses_while_a_key_or_owner_enforces_networks(
    old_database: OldDatabase,
) -> None:
    """Undoing 0010 is refused while a key's or an owner's network rules refuse requests (the
    key would work from anywhere again), and works once those rules are lifted."""
    from apikey_tui.networks import network_rules

    engine = make_engine(old_database.url)
    [live] = old_database.keys("live")[:1]
    upgrade_schema(engine)
    store = KeyStore.open(old_database.url, hasher=CHEAP, actor=ACTOR, create=False)
    try:
        info = store.get_key(live["owner"], live["name"])
        store.set_networks_of_keys([info], network_rules([], ["127.0.0.0/8"]))
        with pytest.raises(RuntimeError, match="1 key"), engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0009")
        store.set_networks_of_keys([info], None)
        store.set_owner_networks(live["owner"], network_rules(["10.0.0.0/8"]))
        with pytest.raises(RuntimeError, match="1 owner"), engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0009")
        assert _rows(old_database.url, "SELECT value FROM apikey_tui_meta WHERE key = "
                     "'schema_version'") == [(str(SCHEMA_VERSION),)]  # fmt: skip
        store.set_owner_networks(live["owner"], None)
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0009")
        assert _rows(old_database.url, "SELECT value FROM apikey_tui_meta WHERE key = "
                     "'schema_version'") == [("9",)]  # fmt: skip
    finally:
        store.close()
        engine.dispose()


def test_0011_makes_every_owner_a_person_and_keeps_pools_and_creators(
    old_database: OldDatabase,
) -> None:
    """From schema 10, upgrading makes each key's owner and each owner with network rules a
    person, keeps an owner's pool (a person too), gives each key its creator from the trail;
    down to 0010 keeps the pool and the owners' network rules."""
    engine = make_engine(old_database.url)
    owners_query = "SELECT owner, kind, limits FROM apikey_tui_owner_limit ORDER BY owner"
    creators_query = (
        "SELECT k.name, k.created_by, (SELECT e.actor FROM apikey_tui_event e WHERE "
        "e.action = 'key.create' AND e.owner = k.owner AND e.key_name = k.name "
        "ORDER BY e.id DESC LIMIT 1) FROM apikey_tui_key k ORDER BY k.name"
    )
    fence_query = "SELECT owner, networks FROM apikey_tui_owner_network"
    try:
        upgrade_schema(engine)
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0010")
            conn.execute(
                text("INSERT INTO apikey_tui_owner_limit (owner, limits) VALUES ('pool', '10/s')")
            )
            conn.execute(
                text(
                    "INSERT INTO apikey_tui_owner_network (owner, networks) "
                    "VALUES ('fenced', 'enforce +10.0.0.0/8')"
                )
            )
            key_owners = sorted(
                {r[0] for r in conn.execute(text("SELECT owner FROM apikey_tui_key"))}
            )
        assert key_owners and "fenced" not in key_owners
        assert upgrade_schema(engine)[:2] == (10, SCHEMA_VERSION)
        expected = sorted(
            [(o, "person", None) for o in key_owners]
            + [("pool", "person", "10/s"), ("fenced", "person", None)]
        )
        assert _rows(old_database.url, owners_query) == expected
        creators = _rows(old_database.url, creators_query)
        assert creators and all(made == actor for _, made, actor in creators)
        assert any(made is not None for _, made, _ in creators)
        assert _rows(old_database.url, "SELECT * FROM apikey_tui_owner_member") == []
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), "0010")
        with engine.connect() as conn:
            assert not inspect(conn).has_table("apikey_tui_owner_member")
            assert [
                tuple(r) for r in conn.execute(text("SELECT * FROM apikey_tui_owner_limit"))
            ] == [("pool", "10/s")]
        assert _rows(old_database.url, fence_query) == [("fenced", "enforce +10.0.0.0/8")]
        assert upgrade_schema(engine)[:2] == (10, SCHEMA_VERSION)
    finally:
        engine.dispose()
