"""The real CLI with stdout it cannot write (/dev/full, closed): a new secret that cannot be
delivered leaves no key behind, and nothing ends in a traceback."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.errors import KeyNotFoundError
from apikey_tui.store import CreatedKey, KeyStore
from tests.conftest import ACTOR, CHEAP, TEST_LOGIN


@pytest.fixture
def ostore(database_url: str) -> Iterator[KeyStore]:
    """A store on a fresh database (SQLite, then PostgreSQL), to prepare and inspect it."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    yield key_store
    key_store.close()


def _closed_stdout() -> None:
    os.close(1)  # in the child, after its stdout was set up: it starts with fd 1 closed


# Where the child's stdout goes: a file that refuses every write, or nothing at all.
SINKS: dict[str, tuple[str, Callable[[], None] | None]] = {
    "dev-full": ("/dev/full", None),
    "closed": (os.devnull, _closed_stdout),
}


# The child runs without libfaketime (CI runs time-dependent tests under `faketime`): its preload
# opens a shared-memory file at the lowest free descriptor, which with stdout closed is fd 1, so
# the child would have a stdout after all and write the key into the parent's fake clock.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and "FAKETIME" not in k}


def _cli(url: str, sink: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the installed command with stdout going to the sink; stderr is captured."""
    path, preexec = SINKS[sink]
    with open(path, "w") as out:
        return subprocess.run(
            [sys.executable, "-m", "apikey_tui", "--database-url", url, "--owner", "alice", *args],
            stdout=out,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec,
            env=CHILD_ENV,
            text=True,
            timeout=120,
        )


def _captured(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", url, "--owner", "alice", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        env=CHILD_ENV,
        text=True,
        timeout=120,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def _verifies(store: KeyStore, created: CreatedKey) -> bool:
    parts = keyformat.parse(created.plaintext)
    found = store.credential(parts.public_id)
    return found is not None and store.hasher.verify(found.secret_hash, parts.secret)


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_a_key_created_where_it_cannot_be_written_does_not_exist(
    ostore: KeyStore, database_url: str, sink: str, json_out: bool
) -> None:
    """keys create to /dev/full or a closed stdout leaves no key and no event; a retry works."""
    extra = ["--json"] if json_out else []
    done = _cli(database_url, sink, "keys", "create", "ci", "--scope", "project", *extra)
    err = _one_line(done)
    assert "could not write" in err and "not created" in err
    with pytest.raises(KeyNotFoundError):
        ostore.get_key("alice", "ci")
    assert [e.action for e in ostore.events()] == []  # the attempt left nothing to audit
    again = _captured(database_url, "keys", "create", "ci", "--scope", "project", *extra)
    assert again.returncode == 0, again.stderr
    key = json.loads(again.stdout)["key"] if json_out else again.stdout.strip()
    assert keyformat.parse(key).public_id == ostore.get_key("alice", "ci").public_id


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize(
    "args", [["recreate"], ["rotate", "--grace", "1h"]], ids=["recreate", "rotate"]
)
def test_a_new_secret_that_cannot_be_written_leaves_the_key_as_it_was(
    ostore: KeyStore, database_url: str, sink: str, args: list[str]
) -> None:
    """recreate/rotate to /dev/full or a closed stdout change nothing: the old secret still
    works alone, nothing is audited, and a retry works."""
    created = ostore.create_key("alice", "ci", ["project"])
    before = ostore.get_key("alice", "ci")
    done = _cli(database_url, sink, "keys", args[0], "ci", *args[1:])
    err = _one_line(done)
    assert "could not write" in err and "unchanged" in err
    assert ostore.get_key("alice", "ci") == before  # same id, no grace, no new expiry
    assert _verifies(ostore, created)
    assert [e.action for e in ostore.events()] == ["key.create"]
    again = _captured(database_url, "keys", args[0], "ci", *args[1:])
    assert again.returncode == 0, again.stderr
    assert (
        keyformat.parse(again.stdout.strip()).public_id == ostore.get_key("alice", "ci").public_id
    )


@pytest.mark.parametrize("sink", SINKS)
def test_a_listing_that_cannot_be_written_is_one_line(
    ostore: KeyStore, database_url: str, sink: str
) -> None:
    """keys list to /dev/full or a closed stdout says so in one line, exit 1, no traceback."""
    ostore.create_key("alice", "ci", ["project"])
    assert "could not write" in _one_line(_cli(database_url, sink, "keys", "list"))


# Commands whose output another module writes (the usage commands, scan): the same one path.
OTHER_WRITERS = {
    "usage": ["keys", "usage", "ci"],
    "rightsize": ["keys", "rightsize", "--all", "--json"],
    "near-limits": ["keys", "near-limits", "--all", "--json"],
    "compact": ["db", "compact", "--json"],
    "scan": ["scan", "--offline", "--json", os.devnull],
}


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("command", OTHER_WRITERS)
def test_every_command_that_cannot_write_its_output_says_so_in_one_line(
    ostore: KeyStore, database_url: str, sink: str, command: str
) -> None:
    """keys usage, keys rightsize, db compact and scan to /dev/full or a closed stdout say so
    in one line, exit 1 (not an 'internal error', not a usage error)."""
    ostore.create_key("alice", "ci", ["project"])
    line = _one_line(_cli(database_url, sink, *OTHER_WRITERS[command]))
    assert "could not write to stdout" in line


def _closed_stderr() -> None:
    os.close(2)


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "dev-full"])
def test_stderr_that_cannot_be_written_leaves_stdout_the_key_alone(
    sqlite_url: str, closed: bool
) -> None:
    """With stderr closed or /dev/full, keys create still exits 0 with only the key on stdout
    (Python's print to a missing stderr would write the notes to stdout)."""
    with open(os.devnull if closed else "/dev/full", "w") as err:
        done = subprocess.run(
            [sys.executable, "-m", "apikey_tui", "--database-url", sqlite_url, "keys", "create",
             "ci", "--scope", "project"],
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            preexec_fn=_closed_stderr if closed else None,
            env=CHILD_ENV,
            text=True,
            timeout=120,
        )  # fmt: skip
    assert done.returncode == 0
    assert done.stdout.count("\n") == 1 and keyformat.parse(done.stdout.strip())


def test_a_commit_failing_after_the_key_was_written_says_to_discard_it(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the database fails at the commit, after the key went to stdout, the one line says
    that key was not stored, and no key exists."""

    def failing_commit(self: Session) -> None:
        raise OperationalError("COMMIT", {}, sqlite3.OperationalError("disk I/O error"))

    KeyStore.open(sqlite_url).close()  # the database exists: only the key's commit fails
    monkeypatch.setattr(Session, "commit", failing_commit)
    code = main(["--database-url", sqlite_url, "keys", "create", "ci", "--scope", "project"])
    out, err = capsys.readouterr()
    assert code == 1 and keyformat.parse(out.strip())
    assert err.count("\n") == 1 and "not stored: discard it" in err, err
    monkeypatch.undo()
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    try:
        with pytest.raises(KeyNotFoundError):
            store.get_key(TEST_LOGIN, "ci")
    finally:
        store.close()


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["keys", "create", "--help"]])
def test_help_and_version_that_cannot_be_written_are_one_line(
    sqlite_url: str, sink: str, args: list[str]
) -> None:
    """--help and --version to /dev/full or a closed stdout exit 1 with one line (argparse
    swallowed the write error, so they exited 0 having printed nothing)."""
    assert "could not write to stdout" in _one_line(_cli(sqlite_url, sink, *args))
