"""Tests that every database failure becomes one typed, one-line error: CLI exit 1, verifier 503."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from apikey_tui.cli import main
from apikey_tui.db import (
    FOREIGN_KEY,
    POSTGRES_CONNECT_TIMEOUT_S,
    POSTGRES_POOL_TIMEOUT_S,
    POSTGRES_TCP_USER_TIMEOUT_MS,
    UNIQUE,
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


# --- an unusable database: the CLI, the verifier and the store each refuse it in their way ------


def _damaged_sqlite(tmp_path: Path, start: int) -> tuple[str, str]:
    """A SQLite database holding a key, then overwritten with garbage from start on: all of it
    (0), or every page after the first (the header and the catalog stay readable)."""
    path = tmp_path / "keys.db"
    url = f"sqlite:///{path}"
    key = _key_in(url)  # closing the store checkpoints the WAL into the file
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(start)
        file.write(b"\xa5" * (size - start))
    return url, key


@contextmanager
def _unprivileged(postgres_url: str, *, usage: bool) -> Iterator[tuple[str, str]]:
    """A LOGIN role made for this test that may not read apikey-tui's tables (it may not even
    use their schema, or it may use the schema only), a key in those tables, dropped after."""
    key = _key_in(postgres_url)
    role = f"apikey_test_{uuid.uuid4().hex[:12]}"
    schema = postgres_url.rpartition("search_path%3D")[2]
    with psycopg.connect(_libpq(POSTGRES_URL), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        if usage:
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    try:
        yield postgres_url.replace("://postgres@", f"://{role}@", 1), key
    finally:
        with psycopg.connect(_libpq(POSTGRES_URL), autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # revokes the grant on the schema
            conn.execute(f"DROP ROLE {role}")


@dataclass(frozen=True)
class Unusable:
    """A database the tools may not use, a key in it, and how the store and the CLI say so."""

    url: str
    key: str
    error: type[StoreUnavailableError]
    says: str


DAMAGED = "damaged or is not a SQLite database"
DENIED = "the database role lacks a privilege apikey-tui needs"


@pytest.fixture(
    params=["damaged-whole-file", "damaged-after-first-page", "no-usage-on-schema", "usage-only"]
)
def unusable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Unusable]:
    """A damaged SQLite file, or a PostgreSQL role without the privileges it needs."""
    case: str = request.param
    if case.startswith("damaged"):
        url, key = _damaged_sqlite(tmp_path, 0 if case == "damaged-whole-file" else 4096)
        yield Unusable(url, key, DatabaseCorruptError, DAMAGED)
        return
    postgres_url: str = request.getfixturevalue("postgres_url")
    with _unprivileged(postgres_url, usage=case == "usage-only") as (url, key):
        yield Unusable(url, key, DatabasePermissionError, DENIED)


def test_an_unusable_database_is_one_line_in_the_cli(
    capsys: pytest.CaptureFixture[str], unusable: Unusable
) -> None:
    """The CLI prints one line naming why the database is unusable, and exits 1."""
    assert unusable.says in _one_line_refusal(capsys, unusable.url)


def test_an_unusable_database_makes_the_verifier_answer_503(unusable: Unusable) -> None:
    """A verifier on an unusable database refuses with 503, never a raw driver error (500)."""
    verifier = Verifier.from_url(unusable.url)
    try:
        with pytest.raises(VerifierUnavailableError) as info:
            verifier.verify("ApiKey " + unusable.key)
        assert info.value.status == 503
    finally:
        verifier.close()


def test_an_unusable_database_is_a_typed_store_error(unusable: Unusable) -> None:
    """Opening the store raises DatabaseCorruptError or DatabasePermissionError, as the case is."""
    with pytest.raises(unusable.error):
        KeyStore.open(unusable.url).close()


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


@pytest.mark.parametrize("kind", [UNIQUE, FOREIGN_KEY])
def test_a_conflict_the_caller_expects_becomes_the_callers_error(
    database_url: str, kind: str
) -> None:
    """A unique or foreign-key failure becomes the error its caller gave, told apart by code."""
    engine = make_engine(database_url)
    expected = {kind: lambda: DuplicateKeyNameError("alice", kind)}
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
            conn.execute(text("CREATE TABLE child (id INTEGER UNIQUE REFERENCES parent (id))"))
            conn.execute(text("INSERT INTO parent VALUES (1)"))
            conn.execute(text("INSERT INTO child VALUES (1)"))
        clash = "INSERT INTO child VALUES (1)" if kind == UNIQUE else "INSERT INTO child VALUES (2)"
        with pytest.raises(DuplicateKeyNameError, match=kind), database_errors(engine, expected):
            with engine.begin() as conn:
                conn.execute(text(clash))
        other = {UNIQUE: FOREIGN_KEY, FOREIGN_KEY: UNIQUE}[kind]
        with pytest.raises(StoreUnavailableError, match="refused a change"):
            with database_errors(engine, {other: expected[kind]}), engine.begin() as conn:
                conn.execute(text(clash))
    finally:
        engine.dispose()


def test_duplicate_key_name_is_still_the_stores_own_error(database_url: str) -> None:
    """The mapper turns the store's expected unique failure into DuplicateKeyNameError."""
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


@contextmanager
def small_file_system(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB tmpfs mounted under tmp_path (the suite runs as root, as CI does)."""
    place = tmp_path / "mounted"
    place.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(place)], check=True)
    try:
        yield place
    finally:
        subprocess.run(["umount", "-l", str(place)], check=True)


def _cli_error(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_a_full_disk_and_a_read_only_file_system_are_named_as_such(tmp_path: Path) -> None:
    """On a full disk the CLI says the disk is full (SQLite said 'disk I/O error'), and on a
    read-only mount that the file system is read-only (SQLite said the file is malformed)."""
    with small_file_system(tmp_path) as place:
        url = f"sqlite:///{place / 'keys.db'}"
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        for n in range(3):
            store.create_key("alice", f"k{n}", ["project"])
        store.close()
        for suffix in ("-wal", "-shm"):
            (place / f"keys.db{suffix}").unlink(missing_ok=True)
        filler = place / "filler"
        with open(filler, "wb", buffering=0) as out:
            try:
                while True:
                    out.write(b"\0" * 4096)
            except OSError:
                pass
        full = _cli_error(url, "keys", "disable", "k1", "--owner", "alice")
        assert "the disk holding the database is full" in full and "I/O" not in full.split(":")[1]
        filler.unlink()
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        store.create_key("alice", "late", ["project"])  # leaves a -wal behind, as a service does
        store.close()
        subprocess.run(["mount", "-o", "remount,ro", str(place)], check=True)
        read_only = _cli_error(url, "keys", "disable", "k1", "--owner", "alice")
        assert "the file system holding the database is read-only" in read_only
        assert "damaged" not in read_only


@pytest.mark.parametrize("gone", ["deleted", "moved"])
def test_a_write_after_the_sqlite_file_went_away_is_refused(tmp_path: Path, gone: str) -> None:
    """A key made after the open SQLite file was deleted or moved is refused, never stored where
    no one can read it (the app once showed such a key as created)."""
    path = tmp_path / "keys.db"
    store = KeyStore.open(f"sqlite:///{path}", hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "before", ["project"])
        for suffix in ("", "-wal", "-shm"):
            place = path.with_name(f"keys.db{suffix}")
            if gone == "deleted":
                place.unlink(missing_ok=True)
            elif place.exists():
                place.rename(tmp_path / f"elsewhere.db{suffix}")
        with pytest.raises(StoreUnavailableError, match="moved or deleted"):
            store.create_key("alice", "after", ["project"])
    finally:
        store.close()
    if gone == "moved":  # nothing was written to the file in its new place either
        moved = KeyStore.open(f"sqlite:///{tmp_path / 'elsewhere.db'}", hasher=CHEAP, actor=ACTOR)
        try:
            assert [k.name for k in moved.list_keys("alice")] == ["before"]
        finally:
            moved.close()
