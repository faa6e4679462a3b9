"""Tests of CommitWatch: it notices every commit by another connection, and nothing else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from apikey_tui.verifier.sqlite_watch import CommitWatch, watch_for


def _database(path: Path, wal: bool) -> sqlite3.Connection:
    writer = sqlite3.connect(path, isolation_level=None)
    if wal:
        writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("CREATE TABLE t (x)")
    return writer


def test_wal_database_is_watched_through_the_mapped_header(tmp_path: Path) -> None:
    """In WAL mode the watch maps the -shm header, and each commit changes the token."""
    writer = _database(tmp_path / "k.db", wal=True)
    watch = CommitWatch(str(tmp_path / "k.db"))
    assert watch.mapped
    tokens = [watch.token(), watch.token()]
    for n in range(3):
        writer.execute("INSERT INTO t VALUES (?)", (n,))
        tokens.append(watch.token())
    assert tokens[0] == tokens[1]  # nothing committed: same token
    assert len(set(tokens[1:])) == 4  # every commit: a new token
    writer.execute("SELECT count(*) FROM t").fetchone()
    assert watch.token() == tokens[-1]  # reads change nothing
    writer.close()


def test_rollback_journal_database_falls_back_to_data_version(tmp_path: Path) -> None:
    """Without WAL the watch asks PRAGMA data_version, which also moves on each commit."""
    writer = _database(tmp_path / "k.db", wal=False)
    watch = CommitWatch(str(tmp_path / "k.db"))
    assert not watch.mapped
    before = watch.token()
    writer.execute("INSERT INTO t VALUES (1)")
    assert watch.token() != before
    writer.close()


def test_checkpoints_and_wal_resets_still_show_commits(tmp_path: Path) -> None:
    """After a checkpoint resets the WAL, the next commit still changes the token."""
    writer = _database(tmp_path / "k.db", wal=True)
    watch = CommitWatch(str(tmp_path / "k.db"))
    writer.execute("INSERT INTO t VALUES (1)")
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    after_checkpoint = watch.token()
    writer.execute("INSERT INTO t VALUES (2)")
    assert watch.token() != after_checkpoint
    writer.close()


def test_one_watch_per_file_per_process(tmp_path: Path) -> None:
    """watch_for hands out one watch per database file, so no descriptor is opened twice."""
    writer = _database(tmp_path / "k.db", wal=True)
    assert watch_for(str(tmp_path / "k.db")) is watch_for(str(tmp_path / "." / "k.db"))
    writer.close()
