"""Tests of engine settings, schema creation by the migrations and the schema version check."""

from __future__ import annotations

import sqlite3
import stat
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlmodel import SQLModel

from apikey_tui.db import WRITE, ensure_schema, make_engine, schema
from apikey_tui.db.migrations import VERSION_TABLE, is_ours, revision_of
from apikey_tui.db.models import SCHEMA_VERSION, Base
from apikey_tui.db.schema import alembic_config, head_revision
from apikey_tui.errors import SchemaVersionError, StoreUnavailableError


def test_sqlite_file_is_created_owner_only(tmp_path: Path) -> None:
    """A new SQLite file and its new folder are readable by the owner alone."""
    path = tmp_path / "new" / "keys.db"
    make_engine(f"sqlite:///{path}").dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_sqlite_runs_in_wal_with_full_sync_and_busy_timeout(sqlite_url: str) -> None:
    """A checked SQLite database is in WAL; every connection has FULL sync, timeout, FKs."""
    engine = make_engine(sqlite_url)
    ensure_schema(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_tables_live_on_the_package_metadata_only() -> None:
    """SQLModel's global metadata holds none of our tables, so services' create_all skips them."""
    assert "apikey_tui_key" in Base.metadata.tables
    assert not any(name.startswith("apikey_tui") for name in SQLModel.metadata.tables)


def test_fresh_database_gets_default_scopes_and_version(database_url: str) -> None:
    """A fresh database is built by the migrations: version 9, 'project' and 'serving' scopes."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    ensure_schema(engine)  # opening twice is harmless
    with engine.connect() as conn:
        version = conn.execute(
            text("SELECT value FROM apikey_tui_meta WHERE key = 'schema_version'")
        ).scalar()
        revision = conn.execute(text("SELECT version_num FROM apikey_tui_alembic_version")).all()
        scopes = conn.execute(text("SELECT name FROM apikey_tui_scope ORDER BY name")).scalars()
        assert (version, revision, list(scopes)) == ("11", [("0011",)], ["project", "serving"])
    engine.dispose()


def test_shipped_migrations_end_at_this_releases_schema_version() -> None:
    """The newest shipped Alembic revision is the schema version the models describe."""
    assert head_revision() == revision_of(SCHEMA_VERSION) == "0011"


def test_migrations_build_exactly_the_models(database_url: str) -> None:
    """Alembic's autogenerate finds no difference between a fresh database and the models."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"include_name": is_ours, "version_table": VERSION_TABLE}
        )
        assert compare_metadata(context, Base.metadata) == []
    engine.dispose()


@pytest.mark.parametrize(
    ("revision", "message"),
    [
        ("0012", r"schema version 12, newer than this release .*\(11\): upgrade apikey-tui"),
        ("f00dcafe", r"revision 'f00dcafe', which this release .* does not know"),
    ],
)
def test_newer_schema_version_is_refused(database_url: str, revision: str, message: str) -> None:
    """A database stamped by a newer release is refused by admins and verifiers alike."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE apikey_tui_alembic_version SET version_num = :r"), {"r": revision}
        )
    for create in (True, False):
        with pytest.raises(SchemaVersionError, match=message):
            ensure_schema(engine, create=create)
    engine.dispose()


def test_a_schema_4_verifier_works_beside_a_schema_5_database(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verifier of version 4 accepts the usage schema (it names 4 as still working); admins
    of version 4 and verifiers older than that are refused."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 4)
    ensure_schema(engine, create=False, verifier=True)
    with pytest.raises(SchemaVersionError, match="newer than this release"):
        ensure_schema(engine, create=False)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 3)
    with pytest.raises(SchemaVersionError, match="newer than this release"):
        ensure_schema(engine, create=False, verifier=True)
    engine.dispose()


def test_a_newer_sqlite_database_is_refused_before_its_journal_mode_changes(
    tmp_path: Path,
) -> None:
    """Opening a newer release's SQLite file (store, CLI) refuses it and leaves it in its mode."""
    path = tmp_path / "newer.db"
    engine = make_engine(f"sqlite:///{path}")
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_alembic_version SET version_num = '0099'"))
    engine.dispose()
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA journal_mode=DELETE")
    before = path.read_bytes()
    for create in (True, False):
        engine = make_engine(f"sqlite:///{path}", create=create)
        with pytest.raises(SchemaVersionError, match="newer than this release"):
            ensure_schema(engine, create=create)
        engine.dispose()
    assert path.read_bytes() == before
    assert not Path(f"{path}-wal").exists()
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_older_schema_is_refused_with_the_upgrade_command(database_url: str) -> None:
    """A version-1 database is neither used nor upgraded by opening it: it names `db upgrade`."""
    engine = make_engine(database_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
    for create in (True, False):
        with pytest.raises(SchemaVersionError, match=r"version 1; .* `apikey-tui db upgrade`"):
            ensure_schema(engine, create=create)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM apikey_tui_alembic_version")).all() == [
            ("0001",)
        ]
    engine.dispose()


@pytest.mark.parametrize(
    "emptied",
    [
        ["DROP TABLE apikey_tui_alembic_version", "DELETE FROM apikey_tui_meta"],
        ["DELETE FROM apikey_tui_alembic_version"],
    ],
)
def test_tables_without_a_version_are_refused(database_url: str, emptied: list[str]) -> None:
    """apikey-tui tables without a revision or version row are refused, never guessed at."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    with engine.begin() as conn:
        for statement in emptied:
            conn.execute(text(statement))
    for create in (True, False):
        with pytest.raises(SchemaVersionError, match="but no schema version"):
            ensure_schema(engine, create=create)
    engine.dispose()


def test_verifier_check_does_not_queue_for_the_sqlite_write_lock(sqlite_url: str) -> None:
    """ensure_schema(create=False) only reads: it passes while an admin holds the write lock."""
    admin = make_engine(sqlite_url)
    ensure_schema(admin)
    service = make_engine(sqlite_url, create=False)
    with admin.execution_options(**WRITE).begin() as writing:
        writing.execute(text("UPDATE apikey_tui_scope SET description = 'busy'"))
        ensure_schema(service, create=False)  # would wait out the busy timeout, then fail
    service.dispose()
    admin.dispose()


def test_concurrent_openers_create_the_schema_once(postgres_url: str) -> None:
    """Four PostgreSQL clients opening an empty database at once queue on the schema lock."""
    engines = [make_engine(postgres_url) for _ in range(4)]
    with ThreadPoolExecutor(len(engines)) as pool:
        list(pool.map(ensure_schema, engines))
    with engines[0].connect() as conn:
        assert conn.execute(text("SELECT version_num FROM apikey_tui_alembic_version")).all() == [
            ("0011",)
        ]
        assert conn.execute(text("SELECT count(*) FROM apikey_tui_scope")).scalar() == 2
    for engine in engines:
        engine.dispose()


def test_missing_schema_is_not_created_when_asked_not_to(database_url: str) -> None:
    """With create=False an empty database is reported, not silently initialised."""
    engine = make_engine(database_url)
    with pytest.raises(SchemaVersionError, match="no apikey-tui tables"):
        ensure_schema(engine, create=False)
    engine.dispose()


def test_unreachable_postgres_is_a_one_line_error() -> None:
    """A closed port gives StoreUnavailableError with the masked URL and the reason."""
    engine = make_engine("postgresql://admin:pw@127.0.0.1:9/test")
    with pytest.raises(StoreUnavailableError) as info:
        ensure_schema(engine)
    message = str(info.value)
    assert "\n" not in message and "pw" not in message.replace("postgresql", "")
    assert "127.0.0.1:9" in message
