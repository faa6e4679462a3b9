"""Tests that every database failure becomes one typed, one-line error: CLI exit 1, verifier 503."""

from __future__ import annotations

import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from apikey_tui.cli import main
from apikey_tui.db import (
    POSTGRES_CONNECT_TIMEOUT_S,
    POSTGRES_POOL_TIMEOUT_S,
    POSTGRES_TCP_USER_TIMEOUT_MS,
    database_errors,
    make_engine,
)
from apikey_tui.errors import (
    DatabaseCorruptError,
    DatabasePermissionError,
    DatabaseUrlError,
    DuplicateKeyNameError,
    KeyNotFoundError,
    StoreUnavailableError,
    VerifierUnavailableError,
)
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, POSTGRES_URL

SECRETISH = "zq7secretvalue4xk"  # stands for a hash or a key that a message must never carry


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _one_line_refusal(capsys: pytest.CaptureFixture[str], url: str) -> str:
    """Run `keys list` on url; assert exit 1 and exactly one line on stderr; return that line."""
    code = main(["--database-url", url, "keys", "list"])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "")
    assert err.startswith("apikey-tui: ") and err.count("\n") == 1, err
    return err


def _key_in(url: str) -> str:
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    try:
        return store.create_key("alice", "demo", ["project"]).plaintext
    finally:
        store.close()


# --- a damaged SQLite file --------------------------------------------------------------------


@pytest.fixture(params=["whole-file", "after-first-page"])
def damaged_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """A SQLite database holding a key, then overwritten with garbage: all of it, or every page
    after the first (the header and the catalog stay readable, the tables do not)."""
    path = tmp_path / "keys.db"
    url = f"sqlite:///{path}"
    key = _key_in(url)  # closing the store checkpoints the WAL into the file
    size = path.stat().st_size
    start = 0 if request.param == "whole-file" else 4096
    with path.open("r+b") as file:
        file.seek(start)
        file.write(b"\xa5" * (size - start))
    return url, key


def test_damaged_sqlite_file_is_one_line_in_the_cli(
    capsys: pytest.CaptureFixture[str], damaged_sqlite: tuple[str, str]
) -> None:
    """A SQLite file full of garbage makes the CLI print one line naming the damage and exit 1."""
    url, _ = damaged_sqlite
    err = _one_line_refusal(capsys, url)
    assert "damaged or is not a SQLite database" in err


def test_damaged_sqlite_file_makes_the_verifier_answer_503(
    damaged_sqlite: tuple[str, str],
) -> None:
    """A verifier on a damaged SQLite file refuses with 503, never a raw DatabaseError (500)."""
    url, key = damaged_sqlite
    verifier = Verifier.from_url(url)
    try:
        with pytest.raises(VerifierUnavailableError) as info:
            verifier.verify("ApiKey " + key)
        assert info.value.status == 503
    finally:
        verifier.close()


def test_damaged_sqlite_file_is_a_database_corrupt_error(
    damaged_sqlite: tuple[str, str],
) -> None:
    """Opening a damaged SQLite file raises DatabaseCorruptError, a StoreUnavailableError."""
    url, _ = damaged_sqlite
    with pytest.raises(DatabaseCorruptError):
        KeyStore.open(url).close()


# --- a PostgreSQL role without the privileges it needs ----------------------------------------


@pytest.fixture(params=["no-usage-on-schema", "usage-only"])
def unprivileged(request: pytest.FixtureRequest, postgres_url: str) -> Iterator[tuple[str, str]]:
    """A LOGIN role made for this test that may not read apikey-tui's tables (it may not even
    use their schema, or it may use the schema only), a key in those tables, dropped after."""
    key = _key_in(postgres_url)
    role = f"apikey_test_{uuid.uuid4().hex[:12]}"
    schema = postgres_url.rpartition("search_path%3D")[2]
    with psycopg.connect(_libpq(POSTGRES_URL), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        if request.param == "usage-only":
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    try:
        yield postgres_url.replace("://postgres@", f"://{role}@", 1), key
    finally:
        with psycopg.connect(_libpq(POSTGRES_URL), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # revokes the grant on the schema
            conn.execute(f"DROP ROLE {role}")


def test_role_without_privileges_is_one_line_in_the_cli(
    capsys: pytest.CaptureFixture[str], unprivileged: tuple[str, str]
) -> None:
    """A role that may not read the tables makes the CLI print one line and exit 1."""
    url, _ = unprivileged
    err = _one_line_refusal(capsys, url)
    assert "the database role lacks a privilege apikey-tui needs" in err


def test_role_without_privileges_makes_the_verifier_answer_503(
    unprivileged: tuple[str, str],
) -> None:
    """A verifier whose role may not read the tables refuses with 503, never ProgrammingError."""
    url, key = unprivileged
    verifier = Verifier.from_url(url)
    try:
        with pytest.raises(VerifierUnavailableError) as info:
            verifier.verify("ApiKey " + key)
        assert info.value.status == 503
    finally:
        verifier.close()


def test_role_without_privileges_is_a_database_permission_error(
    unprivileged: tuple[str, str],
) -> None:
    """Opening the store as a role without privileges raises DatabasePermissionError."""
    url, _ = unprivileged
    with pytest.raises(DatabasePermissionError):
        KeyStore.open(url).close()


# --- database_errors itself ---------------------------------------------------------------------


def test_constraint_failure_that_reaches_database_errors_is_mapped(database_url: str) -> None:
    """An IntegrityError the store did not expect becomes StoreUnavailableError without values."""
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE probe (value VARCHAR(40) UNIQUE)"))
            conn.execute(text("INSERT INTO probe VALUES (:v)"), {"v": SECRETISH})
        with pytest.raises(StoreUnavailableError) as info, database_errors(engine):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO probe VALUES (:v)"), {"v": SECRETISH})
        message = str(info.value)
        assert "refused a change" in message and "\n" not in message
        assert SECRETISH not in message
    finally:
        engine.dispose()


def test_duplicate_key_name_is_still_the_stores_own_error(database_url: str) -> None:
    """The store turns its expected IntegrityError into DuplicateKeyNameError before mapping."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "demo", ["project"])
        with pytest.raises(DuplicateKeyNameError):
            store.create_key("alice", "demo", ["project"])
    finally:
        store.close()


def test_data_exception_never_echoes_the_value(postgres_url: str) -> None:
    """A PostgreSQL data exception names its kind, never the value it quotes."""
    engine = make_engine(postgres_url)
    try:
        with pytest.raises(StoreUnavailableError) as info, database_errors(engine):
            with engine.connect() as conn:
                conn.execute(text("SELECT CAST(:v AS integer)"), {"v": SECRETISH})
        message = str(info.value)
        assert "refused a value" in message and "InvalidTextRepresentation" in message
        assert SECRETISH not in message
    finally:
        engine.dispose()


def test_raw_psycopg_error_from_a_raw_connection_is_mapped(postgres_url: str) -> None:
    """A psycopg error that escapes a raw DBAPI connection becomes StoreUnavailableError."""
    engine = make_engine(postgres_url)
    try:
        raw = engine.raw_connection()
        try:
            with pytest.raises(StoreUnavailableError, match="database error") as info:
                with database_errors(engine):
                    raw.cursor().execute("SELECT * FROM no_such_table")
            assert "no_such_table" in str(info.value)
        finally:
            raw.close()
    finally:
        engine.dispose()


def test_raw_sqlite_error_is_mapped_and_a_read_only_file_is_a_permission_error(
    sqlite_url: str,
) -> None:
    """A raw sqlite3 error escaping a raw connection is mapped; a read-only write is a
    DatabasePermissionError."""
    engine = make_engine(sqlite_url)
    try:
        path = engine.url.database
        assert path is not None
        read_only = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True)
        try:
            with pytest.raises(DatabasePermissionError, match="may not write"):
                with database_errors(engine):
                    read_only.execute("CREATE TABLE t (x)")
            with pytest.raises(StoreUnavailableError, match="no such table"):
                with database_errors(engine):
                    read_only.execute("SELECT * FROM nowhere")
        finally:
            read_only.close()
    finally:
        engine.dispose()


def test_other_exceptions_pass_through_unchanged(sqlite_url: str) -> None:
    """database_errors maps database errors only: the package's own and plain errors pass."""
    engine = make_engine(sqlite_url)
    try:
        with pytest.raises(KeyNotFoundError), database_errors(engine):
            raise KeyNotFoundError("alice", "demo")
        with pytest.raises(ZeroDivisionError), database_errors(engine):
            _ = 1 / 0
    finally:
        engine.dispose()


# --- engine settings and URLs -------------------------------------------------------------------


def test_postgres_engine_bounds_connecting_and_waiting_for_the_pool(postgres_url: str) -> None:
    """PostgreSQL connections carry the documented timeouts and keepalives; a full pool gives up
    after POSTGRES_POOL_TIMEOUT_S with a one-line 'database unavailable'."""
    engine = make_engine(postgres_url)
    held = []
    try:
        raw = engine.raw_connection()
        params = raw.driver_connection.info.get_parameters()  # type: ignore[union-attr]
        raw.close()
        assert params["connect_timeout"] == str(POSTGRES_CONNECT_TIMEOUT_S)
        assert params["tcp_user_timeout"] == str(POSTGRES_TCP_USER_TIMEOUT_MS)
        assert params["keepalives"] == "1"
        assert engine.pool.timeout() == POSTGRES_POOL_TIMEOUT_S  # type: ignore[attr-defined]
        held = [engine.connect() for _ in range(engine.pool.size() + 10)]  # type: ignore[attr-defined]
        with pytest.raises(StoreUnavailableError, match="database unavailable"):
            with database_errors(engine):
                engine.connect()
    finally:
        for conn in held:
            conn.close()
        engine.dispose()


def test_settings_in_the_url_win_over_the_defaults(postgres_url: str) -> None:
    """A connect_timeout in the URL's query is used instead of POSTGRES_CONNECT_TIMEOUT_S."""
    engine = make_engine(f"{postgres_url}&connect_timeout=7")
    try:
        raw = engine.raw_connection()
        params = raw.driver_connection.info.get_parameters()  # type: ignore[union-attr]
        raw.close()
        assert params["connect_timeout"] == "7"
    finally:
        engine.dispose()


def test_unsupported_url_is_refused_before_a_file_is_made(tmp_path: Path) -> None:
    """make_engine refuses an unknown driver with DatabaseUrlError and creates no SQLite file."""
    path = tmp_path / "keys.db"
    with pytest.raises(DatabaseUrlError, match="not supported"):
        make_engine(f"sqlite+nodriver:///{path}")
    assert not path.exists()


def test_verifier_refuses_an_unsupported_url_at_start_up() -> None:
    """Verifier.from_url on a MySQL URL raises DatabaseUrlError, not a driver import error."""
    with pytest.raises(DatabaseUrlError, match="sqlite:///PATH or postgresql://"):
        Verifier.from_url("mysql://svc@db/keys")


def test_missing_psycopg_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg installed a PostgreSQL URL says which extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    with pytest.raises(DatabaseUrlError, match=r"apikey-tui\[postgres\]"):
        make_engine("postgresql://svc@127.0.0.1/keys")
