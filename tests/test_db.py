"""Tests of engine settings, schema creation and the schema version check."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import SQLModel

from apikey_tui.db import ensure_schema, make_engine
from apikey_tui.errors import SchemaVersionError, StoreUnavailableError
from apikey_tui.models import Base


def test_sqlite_file_is_created_owner_only(tmp_path: Path) -> None:
    """A new SQLite file and its new folder are readable by the owner alone."""
    path = tmp_path / "new" / "keys.db"
    make_engine(f"sqlite:///{path}").dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_sqlite_runs_in_wal_with_full_sync_and_busy_timeout(sqlite_url: str) -> None:
    """Every SQLite connection uses WAL, synchronous=FULL, a busy timeout and foreign keys."""
    engine = make_engine(sqlite_url)
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
    """A fresh database gets the schema version and the 'project' and 'serving' scopes."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    ensure_schema(engine)  # opening twice is harmless
    with engine.connect() as conn:
        version = conn.execute(text("SELECT value FROM apikey_tui_meta")).scalar()
        scopes = conn.execute(text("SELECT name FROM apikey_tui_scope ORDER BY name")).scalars()
        assert (version, list(scopes)) == ("1", ["project", "serving"])
    engine.dispose()


def test_unknown_schema_version_is_refused(database_url: str) -> None:
    """A database from a newer release is refused with a message that says to upgrade."""
    engine = make_engine(database_url)
    ensure_schema(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_meta SET value = '99'"))
    with pytest.raises(SchemaVersionError, match=r"version '99'.*upgrade"):
        ensure_schema(engine)
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
