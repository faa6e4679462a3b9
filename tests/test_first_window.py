"""The first window read through sqlite3: the store's statements and rows, or None on any doubt."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from apikey_tui import SCHEMA_VERSION
from apikey_tui import store as store_package
from apikey_tui.config import mask_url, parse_database_url, plain_sqlite_path
from apikey_tui.db.schema import found_version
from apikey_tui.limits.model import parse_limit
from apikey_tui.networks import network_rules
from apikey_tui.store import KeyQuery, KeyStore
from apikey_tui.store.first_window import (
    ALL_WINDOW_SQL,
    OWNER_WINDOW_SQL,
    SCOPES_SQL,
    VERSION_SQL,
    first_window,
)
from apikey_tui.tui.first_rows import read_first_rows
from apikey_tui.tui.key_table import CHUNK
from tests.conftest import ACTOR, CHEAP, FakeClock


@pytest.fixture
def varied(sqlite_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """Keys of two owners in every state a row can carry: expiring, expired, disabled, leaked,
    rotated in grace and past it, used, with limits, networks, metadata and tags."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    store.create_key("alice", "plain", ["project"])
    store.create_key("alice", "soon", ["project", "serving"], expires=timedelta(days=3))
    store.create_key("alice", "expired", ["serving"], expires=timedelta(hours=1))
    store.create_key("alice", "off", ["project"])
    store.disable_key("alice", "off", "holiday")
    store.create_key("alice", "rotated", ["project"])
    store.rotate_key("alice", "rotated", grace=timedelta(hours=2))
    store.create_key("alice", "rotated-past", ["project"])
    store.rotate_key("alice", "rotated-past", grace=timedelta(minutes=5))
    store.create_key(
        "alice",
        "dressed",
        ["project", "serving"],
        limits=[parse_limit("10/s"), parse_limit("1000/1d")],
        networks=network_rules(["10.0.0.0/8"], ["10.9.0.0/16"]),
        meta=[("team", "pay"), ("tier", "gold")],
        tags=[("env", "prod")],
    )
    store.create_key("bob", "plain", ["project"])
    with store.engine.begin() as conn:  # a use, as the verifier records it
        conn.execute(
            text("UPDATE apikey_tui_key SET last_used_at = :at WHERE name = 'plain'"),
            {"at": (clock.now - timedelta(days=100)).strftime("%Y-%m-%d %H:%M:%S.%f")},
        )
    clock.now += timedelta(hours=1)  # 'expired' expires now; 'rotated-past' left its grace
    yield store
    store.close()


SET_VERSION = "UPDATE apikey_tui_alembic_version SET version_num = ?"


def _path(store: KeyStore) -> str:
    path = parse_database_url(str(store.engine.url)).database
    assert path is not None
    return path


def test_the_statements_are_the_ones_the_store_executes(varied: KeyStore) -> None:
    """The window, scopes and version statements are, to the character and the parameters,
    what queries.key_window and schema.found_version execute on SQLite."""
    executed: list[tuple[str, Any]] = []

    def seen(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("SELECT"):
            executed.append((statement, parameters))

    event.listen(varied.engine, "before_cursor_execute", seen)
    try:
        with varied.engine.connect() as conn:
            found_version(conn)
        assert (VERSION_SQL, ()) in executed
        for owner, window, parameters in (
            ("alice", OWNER_WINDOW_SQL, ("alice", CHUNK, 0)),
            (None, ALL_WINDOW_SQL, (CHUNK, 0)),
        ):
            executed.clear()
            keys = varied.key_window(KeyQuery(owner), 0, CHUNK)
            assert executed[0] == (window, parameters)
            ids = executed[1][1]
            assert len(ids) == len(keys)
            assert executed[1][0] == SCOPES_SQL.format(", ".join("?" * len(ids)))
    finally:
        event.remove(varied.engine, "before_cursor_execute", seen)


def test_the_rows_are_the_stores_rows(varied: KeyStore, clock: FakeClock) -> None:
    """Every key, in every state and with every kind of value, reads the same as the store reads
    it: one owner's window and every owner's, and a window shorter than the keys."""
    path = _path(varied)
    for owner in ("alice", "bob", "nobody", None):
        expected = varied.key_window(KeyQuery(owner), 0, CHUNK)
        assert first_window(path, owner, CHUNK, clock.now) == expected, owner
    assert first_window(path, "alice", 3, clock.now) == varied.key_window(KeyQuery("alice"), 0, 3)
    rotated = {k.name: k for k in varied.key_window(KeyQuery("alice"), 0, CHUNK)}
    assert rotated["rotated"].old_public_id and not rotated["rotated-past"].old_public_id


def test_any_doubt_declines(varied: KeyStore, clock: FakeClock, tmp_path: Path) -> None:
    """Another schema version, a time SQLAlchemy would not read as naive UTC text, a file that
    is no database, a missing one: None, and a missing file stays missing."""
    path = _path(varied)
    assert first_window(path, "alice", CHUNK, clock.now) is not None
    raw = sqlite3.connect(path)
    try:
        for other in ("0001", "9999"):  # older, newer
            raw.execute(SET_VERSION, (other,))
            raw.commit()
            assert first_window(path, "alice", CHUNK, clock.now) is None
        raw.execute(SET_VERSION, (f"{SCHEMA_VERSION:04d}",))
        raw.execute(
            "UPDATE apikey_tui_key SET created_at = '2026-01-01 00:00:00+02:00' WHERE id = 1"
        )
        raw.commit()
        assert first_window(path, "alice", CHUNK, clock.now) is None
        raw.execute("UPDATE apikey_tui_key SET created_at = 12345 WHERE id = 1")
        raw.commit()
        assert first_window(path, "alice", CHUNK, clock.now) is None
        assert first_window(path, "bob", CHUNK, clock.now) is not None  # only the doubtful row
    finally:
        raw.close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    assert first_window(str(junk), "alice", CHUNK, clock.now) is None
    missing = tmp_path / "missing" / "keys.db"
    for where in (missing, tmp_path / "absent.db"):
        assert first_window(str(where), "alice", CHUNK, clock.now) is None
        assert read_first_rows(f"sqlite:///{where}", "alice", CHUNK) is None
        assert not where.exists()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:////tmp/keys.db",
        "sqlite:///relative/keys.db",
        "sqlite:///keys.db",
        "sqlite:////tmp/with space/keys.db",
        "sqlite:////tmp/ünïcode/keys.db",
        "sqlite:////tmp/a:b/keys.db",
        "sqlite:////tmp/keys.db?mode=ro",
        "sqlite:////tmp/%41/keys.db",
        "sqlite:////tmp/x#y.db",
        "sqlite:////tmp/user@host.db",
        "sqlite:///:memory:",
        "sqlite://",
        "sqlite:///",
        "sqlite+pysqlite:////tmp/keys.db",
        "SQLITE:////tmp/keys.db",
        "postgresql://u:p@localhost/db",
        "sqlite:////tmp/tab\there.db",
        "sqlite:////tmp/keys.db ",
        "sqlite:////tmp/a+b~c_d-e.f/keys.db",
        "sqlite:////tmp//double/keys.db",
    ],
)
def test_a_plain_sqlite_url_is_read_as_sqlalchemy_reads_it(url: str) -> None:
    """plain_sqlite_path either declines a URL or names the file parse_database_url names, and
    the URL is then its own label (mask_url leaves it as it is: it holds no secret)."""
    path = plain_sqlite_path(url)
    if path is None:
        return
    assert parse_database_url(url).database == path
    assert mask_url(url) == url


def test_the_label_of_a_plain_url_is_the_stores(varied: KeyStore) -> None:
    """The first screen names the database as the store's label does."""
    url = f"sqlite:///{_path(varied)}"
    first = read_first_rows(url, "alice", CHUNK)
    assert first is not None and first.label == varied.label


def test_the_store_package_names_each_value_it_exports(tmp_path: Path) -> None:
    """Every name apikey_tui.store exports resolves, lazily, to its module's own object."""
    homes = store_package._HOMES
    assert sorted(homes) == sorted(store_package.__all__)
    for name, home in homes.items():
        module = __import__(f"apikey_tui.store.{home}", fromlist=[name])
        assert getattr(store_package, name) is getattr(module, name)


_START = """
import sys
from apikey_tui.cli import main  # what `python -m apikey_tui` imports
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.first_rows import read_first_rows
first = read_first_rows(sys.argv[1], "alice", 100)
assert first is not None and [k.name for k in first.rows][:2] == ["dressed", "expired"], first
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"sqlalchemy", "sqlmodel", "pydantic"})
print(",".join(heavy) or "none")
"""


def test_the_first_rows_come_without_sqlalchemy_sqlmodel_or_pydantic(varied: KeyStore) -> None:
    """The CLI, the app and its first rows import none of SQLAlchemy, SQLModel and pydantic:
    those come after the first paint."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    url = f"sqlite:///{_path(varied)}"
    done = subprocess.run(
        [sys.executable, "-c", _START, url], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "none"
