"""Tests of the scriptable CLI: output streams, JSON, exit codes and one-line errors."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

import apikey_tui
from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.store import Actor, KeyQuery, KeyStore
from tests.conftest import ACTOR, CHEAP
from tests.throwaway_postgres import ThrowawayPostgres


def run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_only_the_key_on_stdout(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """keys create prints the key alone on stdout and the once-only warning on stderr."""
    code, out, err = run(
        capsys, database_url, "keys", "create", "demo", "--scope", "project", "--scope", "serving"
    )
    assert code == 0
    keyformat.parse(out.strip())
    assert "shown once" in err and out.strip() not in err


def test_list_json_has_no_secret(capsys: pytest.CaptureFixture[str], database_url: str) -> None:
    """keys list --json lists the key's fields and no part of its secret."""
    _, out, _ = run(
        capsys,
        database_url,
        "--owner",
        "alice",
        "keys",
        "create",
        "demo",
        "--scope",
        "project,serving",
    )
    secret = keyformat.parse(out.strip()).secret
    code, listing, _ = run(capsys, database_url, "keys", "list", "--owner", "alice", "--json")
    assert code == 0
    [entry] = json.loads(listing)
    assert entry["name"] == "demo" and entry["scopes"] == ["project", "serving"]
    assert entry["last_used_at"] is None and secret[:16] not in listing


def test_create_json_carries_the_key_and_its_fields(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """keys create --json prints one JSON object with the key and its public fields."""
    code, out, _ = run(capsys, sqlite_url, "keys", "create", "demo", "--scope", "project", "--json")
    data = json.loads(out)
    assert code == 0 and keyformat.parse(data["key"]).public_id == data["public_id"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["keys", "create", "demo", "--scope", "project"], "already has a key named 'demo'"),
        (["keys", "delete", "ghost"], "has no key named 'ghost'"),
        (["keys", "recreate", "ghost"], "has no key named 'ghost'"),
        (["scopes", "remove", "project"], "still held by: alice/demo"),
    ],
)
def test_refusals_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str], message: str
) -> None:
    """Refused commands exit 1 with one line on stderr naming the reason, and write nothing."""
    run(capsys, sqlite_url, "--owner", "alice", "keys", "create", "demo", "--scope", "project")
    code, out, err = run(capsys, sqlite_url, "--owner", "alice", *args)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and message in err
    _, listing, _ = run(capsys, sqlite_url, "keys", "list", "--all", "--json")
    assert [k["name"] for k in json.loads(listing)] == ["demo"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["keys", "create", "other", "--scope", "nope"], "unknown scope 'nope'"),
        (
            ["keys", "create", "bad name", "--scope", "project"],
            "key name 'bad name' is not allowed",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str], message: str
) -> None:
    """Input the rules refuse, found by the store, is a usage error: exit 2, one line naming
    it, nothing written (README's exit codes)."""
    run(capsys, sqlite_url, "--owner", "alice", "keys", "create", "demo", "--scope", "project")
    code, out, err = run(capsys, sqlite_url, "--owner", "alice", *args)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err
    _, listing, _ = run(capsys, sqlite_url, "keys", "list", "--all", "--json")
    assert [k["name"] for k in json.loads(listing)] == ["demo"]


def test_same_name_for_another_owner_is_fine(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """Two owners may each have a key called 'demo'."""
    for owner in ("alice", "bob"):
        code, _, _ = run(
            capsys, sqlite_url, "--owner", owner, "keys", "create", "demo", "--scope", "project"
        )
        assert code == 0
    _, listing, _ = run(capsys, sqlite_url, "keys", "list", "--all")
    assert "alice" in listing and "bob" in listing


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], sqlite_url: str) -> None:
    """Unknown subcommands and bad option values are usage errors (exit 2)."""
    for args in (["keys", "bogus"], ["events", "--limit", "0"], ["keys"]):
        with pytest.raises(SystemExit) as info:
            main(["--database-url", sqlite_url, *args])
        assert info.value.code == 2
    capsys.readouterr()


def test_a_key_not_found_under_the_login_name_hints_at_owner(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """A key missing under the assumed owner (the login name) is refused with a hint at --owner;
    with --owner given, the line stays as it was."""
    assert (
        run(capsys, sqlite_url, "--owner", "bob", "keys", "create", "k", "--scope", "project")[0]
        == 0
    )
    code, _, err = run(capsys, sqlite_url, "keys", "show", "k")
    assert code == 1 and "give --owner OWNER" in err and len(err.splitlines()) == 1
    code, _, err = run(capsys, sqlite_url, "--owner", "carol", "keys", "show", "k")
    assert code == 1 and err == "apikey-tui: carol has no key named 'k'\n"


def test_recreate_of_a_disabled_key_says_it_stays_disabled(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """Recreating a disabled (or leaked) key says the new secret is refused until `keys enable`."""
    me = ("--owner", "alice", "keys")
    assert run(capsys, sqlite_url, *me, "create", "demo", "--scope", "project")[0] == 0
    assert run(capsys, sqlite_url, *me, "disable", "demo", "--reason", "leaked in a paste")[0] == 0
    code, new, err = run(capsys, sqlite_url, *me, "recreate", "demo")
    assert code == 0 and new
    assert "still disabled" in err and "apikey-tui keys enable demo --owner alice" in err


def test_recreate_delete_scopes_and_events(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """Recreate prints a new key, delete removes it, and every change shows in events."""
    _, old, _ = run(
        capsys, sqlite_url, "--owner", "alice", "keys", "create", "demo", "--scope", "project"
    )
    code, new, err = run(capsys, sqlite_url, "--owner", "alice", "keys", "recreate", "demo")
    assert code == 0 and new != old and "old key stopped working" in err
    assert run(capsys, sqlite_url, "--owner", "alice", "keys", "delete", "demo")[0] == 0
    assert run(capsys, sqlite_url, "scopes", "add", "billing", "--description", "Bills")[0] == 0
    code, scopes, _ = run(capsys, sqlite_url, "scopes", "list", "--json")
    assert {"name": "billing", "description": "Bills"} in json.loads(scopes)
    code, events, _ = run(capsys, sqlite_url, "events", "--json")
    actions = [e["action"] for e in json.loads(events)]
    assert actions == ["scope.add", "key.delete", "key.recreate", "key.create"]
    assert all(e["actor"] for e in json.loads(events))
    for key in (old, new):
        assert keyformat.parse(key.strip()).secret[:16] not in events


def test_database_down_exits_1_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """A database that cannot be reached gives exit 1 and one line, never a traceback."""
    code, _, err = run(capsys, "postgresql://postgres:pw@127.0.0.1:9/test", "keys", "list")
    assert code == 1 and "database unavailable" in err and "Traceback" not in err
    assert ":pw@" not in err


def test_installed_command_and_module_work_end_to_end(tmp_path: Path) -> None:
    """The installed `apikey-tui` script creates a key and the database file never holds it."""
    command = shutil.which("apikey-tui", path=os.path.dirname(sys.executable))
    assert command is not None, "the package's console script is not installed"
    env = {**os.environ, "APIKEY_TUI_DATABASE_URL": f"sqlite:///{tmp_path / 'k.db'}"}
    created = subprocess.run(
        [command, "keys", "create", "demo", "--scope", "project", "--scope", "serving"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    key = created.stdout.strip()
    listing = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "keys", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert json.loads(listing.stdout)[0]["public_id"] == keyformat.parse(key).public_id
    data = b"".join(p.read_bytes() for p in tmp_path.glob("k.db*"))
    secret = keyformat.parse(key).secret
    assert key.encode() not in data and secret[:12].encode() not in data


@pytest.mark.parametrize(
    "url",
    [
        "mysql://admin:pw@db.example/keys",
        "http://db.example/keys",
        "postgresql://admin:pw@db.example:notaport/keys",
        "postgresql://admin:pw@db.example:99999/keys",
        "postgresql+asyncpg://admin:pw@db.example/keys",
        "sqlite://keys.db",
        "",
    ],
)
def test_unusable_database_url_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """A URL that is not SQLite or PostgreSQL, or has a bad port, exits 2 with one line."""
    code, out, err = run(capsys, url, "keys", "list")
    assert (code, out) == (2, "")
    assert err.startswith("apikey-tui: ") and err.count("\n") == 1, err
    assert "pw" not in err


def test_unusable_url_from_the_environment_gives_no_traceback(tmp_path: Path) -> None:
    """The installed command with a MySQL URL in the environment prints one line, exit 2."""
    env = {**os.environ, "APIKEY_TUI_DATABASE_URL": "mysql://admin@db.example/keys"}
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "keys", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "sqlite:///PATH or postgresql://" in done.stderr


def test_frozen_postgres_gives_one_line_exit_1(throwaway_postgres: ThrowawayPostgres) -> None:
    """Against a PostgreSQL that stopped answering (SIGSTOP), `keys list` gives up with one
    line and exit 1 instead of hanging (the subprocess timeout is only a generous backstop)."""
    KeyStore.open(throwaway_postgres.url, hasher=CHEAP, actor=ACTOR).close()
    throwaway_postgres.freeze()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "apikey_tui", "keys", "list", "--all"],
            capture_output=True,
            text=True,
            env={**os.environ, "APIKEY_TUI_DATABASE_URL": throwaway_postgres.url},
            timeout=120,
        )
    finally:
        throwaway_postgres.thaw()
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "database unavailable" in done.stderr


@pytest.mark.parametrize("owner", ["", "bad owner", "\x1b[31mroot"])
def test_empty_or_invalid_owner_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, owner: str
) -> None:
    """`keys delete ci --owner ""` (or an invalid owner) exits 2 with one line, deleting nothing."""
    assert run(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")[0] == 0
    with pytest.raises(SystemExit) as info:
        main(["--database-url", sqlite_url, "keys", "delete", "ci", "--owner", owner])
    out, err = capsys.readouterr()
    assert (info.value.code, out) == (2, "")
    assert err.count("\n") == 1 and "owner" in err and "\x1b" not in err
    assert run(capsys, sqlite_url, "keys", "show", "ci", "--json")[0] == 0


def test_app_refuses_an_empty_owner_before_opening(sqlite_url: str) -> None:
    """The app's own `--owner ""` is a usage error (exit 2, one line) before anything opens."""
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", sqlite_url, "--owner", ""],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and "owner is required" in done.stderr


EVIL = "\x1b]0;pwned\x07\x1b[2J\u202e"


def test_output_escapes_control_characters_from_the_database(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """An owner, actor or address holding escape sequences is printed escaped, never raw."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=Actor(f"ops{EVIL}", f"10.0.0.1{EVIL}"))
    try:
        store.create_key("alice", "demo", ["project"])
        with store.engine.begin() as conn:  # a database written by something other than us
            conn.execute(sa.text("UPDATE apikey_tui_key SET owner = :o"), {"o": f"bob{EVIL}"})
    finally:
        store.close()
    outputs = [
        run(capsys, sqlite_url, "keys", "list", "--all"),
        run(capsys, sqlite_url, "events"),
        run(capsys, sqlite_url, "scopes", "remove", "project"),  # names the keys holding it
    ]
    assert [code for code, _, _ in outputs] == [0, 0, 1]
    for _, out, err in outputs:
        assert not any(c in out + err for c in "\x1b\x07\u202e")
    assert "bob\\x1b]0;pwned\\x07" in outputs[0][1] and "ops\\x1b" in outputs[1][1]
    assert "\\u202e" in outputs[2][2]


@pytest.mark.parametrize("login", ["\x1b[31mroot", "a" * 65])
def test_unusable_login_name_acts_as_uid(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    database_url: str,
    login: str,
) -> None:
    """A $LOGNAME that is not a valid owner name is replaced by uid-<uid> as owner and actor."""
    monkeypatch.setenv("LOGNAME", login)
    monkeypatch.setenv("USER", login)
    code, _, err = run(capsys, database_url, "keys", "create", "ci", "--scope", "project")
    assert code == 0, err
    _, out, _ = run(capsys, database_url, "events", "--json")
    [event] = json.loads(out)
    assert event["actor"] == event["owner"] == f"uid-{os.getuid()}"


@pytest.mark.parametrize(
    "args",
    [
        ["events", "--limit", "9223372036854775808"],
        ["events", "--limit", "10001"],
        ["keys", "create", "ci"],
        ["keys", "set-scopes", "ci"],
    ],
)
def test_out_of_range_limit_and_missing_scope_are_usage_errors(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str]
) -> None:
    """A huge --limit or a key command without --scope exits 2 with one line, doing nothing."""
    assert run(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")[0] == 0
    with pytest.raises(SystemExit) as info:
        main(["--database-url", sqlite_url, *args])
    out, err = capsys.readouterr()
    assert (info.value.code, out) == (2, "") and err.count("\n") == 1, err
    _, listing, _ = run(capsys, sqlite_url, "keys", "show", "ci", "--json")
    assert json.loads(listing)["scopes"] == ["project"]


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "create", "x", "--scope", "serving", "--expires", "-5d"],
        ["keys", "list", "--expiring", "-5d"],
        ["keys", "list", "--unused", "-5d"],
        ["keys", "rotate", "x", "--grace", "-5d"],
        ["keys", "set-expiry", "x", "-5d"],
        ["policy", "set", "max-lifetime", "-5d"],
    ],
)
def test_negative_duration_is_a_usage_error_naming_valid_ones(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str]
) -> None:
    """A negative duration ('-5d') exits 2 with one line showing what a valid one looks like."""
    with pytest.raises(SystemExit) as info:
        main(["--database-url", sqlite_url, *args])
    out, err = capsys.readouterr()
    assert (info.value.code, out) == (2, "") and err.count("\n") == 1, err
    assert "'-5d' is not allowed" in err and "90d" in err, err


def test_non_utf8_argument_is_a_usage_error(tmp_path: Path) -> None:
    """An argument that is not UTF-8 (surrogateescape'd argv) gives one line and exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "keys", "show", b"ci\xff"],
        capture_output=True,
        env={**os.environ, "APIKEY_TUI_DATABASE_URL": f"sqlite:///{tmp_path / 'k.db'}"},
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == b"apikey-tui: an argument is not valid UTF-8 text\n"


def test_reader_closing_the_pipe_ends_quietly(tmp_path: Path) -> None:
    """`keys list | head` style: a reader that closes the pipe early gets no traceback."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "demo", ["project"])
    finally:
        store.close()
    child = subprocess.Popen(
        [sys.executable, "-m", "apikey_tui", "keys", "list", "--all"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "APIKEY_TUI_DATABASE_URL": url},
    )
    assert child.stdout is not None
    child.stdout.close()  # before the child has even imported its modules: its write fails
    _, err = child.communicate(timeout=60)
    assert (child.returncode, err) == (141, b"")


def test_app_without_a_terminal_says_so_and_exits_2(sqlite_url: str) -> None:
    """The app with stdin from /dev/null and stdout a pipe says it needs a terminal, exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", sqlite_url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,  # only a backstop: before the fix the app waited until killed
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and "needs a terminal" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "list"],
        ["keys", "show", "ci"],
        ["scopes", "list"],
        ["events"],
        ["keys", "usage", "ci"],
        ["keys", "rightsize", "--all", "--apply", "--yes"],
    ],
)
def test_read_only_commands_never_create_a_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    """A read-only command on a missing SQLite file says so in one line (exit 1), creating none."""
    url = f"sqlite:///{tmp_path / 'typo' / 'keys.db'}"
    code, out, err = run(capsys, url, *args)
    assert (code, out) == (1, "")
    assert err == (
        f"apikey-tui: no database at {tmp_path / 'typo' / 'keys.db'}; check the path, or "
        "create it with 'apikey-tui keys create NAME --scope SCOPE' or 'apikey-tui db upgrade'\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_write_creates_a_new_database_only_in_a_folder_that_exists_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """keys create at a path in a missing folder is refused in one line, creating nothing; in
    an existing folder it creates the database and says so on stderr (stdout: only the key)."""
    typo = tmp_path / "typo" / "keys.db"
    code, out, err = run(capsys, f"sqlite:///{typo}", "keys", "create", "a", "--scope", "project")
    assert (code, out) == (1, "")
    assert err == (
        f"apikey-tui: no folder {typo.parent} for a new database at {typo}; check the path, "
        "or create the folder first\n"
    )
    assert list(tmp_path.iterdir()) == []
    new = tmp_path / "keys.db"
    code, out, err = run(capsys, f"sqlite:///{new}", "keys", "create", "a", "--scope", "project")
    assert code == 0 and new.exists()
    keyformat.parse(out.strip())
    assert err.startswith(f"apikey-tui: created a new database at {new}\n")
    code, out, err = run(capsys, f"sqlite:///{new}", "keys", "create", "b", "--scope", "project")
    assert code == 0 and "created a new database" not in err


def _as_if_in_a_terminal(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Pretend stdin and stdout are a terminal and record the app's runs instead of drawing."""
    from apikey_tui.tui.app import ApiKeysApp

    ran: list[str] = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(ApiKeysApp, "run", lambda self: ran.append(self.database_label))
    return ran


def test_the_app_never_creates_a_database_at_a_path_given_to_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The app on a missing SQLite path (flag or environment) says so in one line, exit 1."""
    ran = _as_if_in_a_terminal(monkeypatch)
    missing = tmp_path / "typo" / "keys.db"
    code, out, err = run(capsys, f"sqlite:///{missing}")
    assert (code, out, ran) == (1, "", [])
    assert err.startswith(f"apikey-tui: no database at {missing}; ") and err.count("\n") == 1
    monkeypatch.setenv("APIKEY_TUI_DATABASE_URL", f"sqlite:///{missing}")
    assert main([]) == 1
    assert list(tmp_path.iterdir()) == []


def test_the_app_creates_the_default_database_on_a_first_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With no URL given, the first run creates the default SQLite file and opens the app on it."""
    ran = _as_if_in_a_terminal(monkeypatch)
    monkeypatch.delenv("APIKEY_TUI_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert main([]) == 0
    assert (tmp_path / "apikey-tui" / "keys.db").exists() and len(ran) == 1


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
@pytest.mark.parametrize("args", [[], ["keys", "create", "k", "--scope", "project"], ["events"]])
def test_an_in_memory_database_is_refused(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    args: list[str],
) -> None:
    """sqlite:// and sqlite:///:memory: are a usage error (exit 2, one line): keys would be lost."""
    ran = _as_if_in_a_terminal(monkeypatch)
    code, out, err = run(capsys, url, *args)
    assert (code, out, ran) == (2, "", [])
    assert "in-memory SQLite database" in err and err.count("\n") == 1


def test_a_filter_that_matches_nothing_says_so_on_stderr(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """keys list --filter with no match says no key matches, instead of inviting a first key."""
    assert run(capsys, sqlite_url, "keys", "create", "alpha", "--scope", "project")[0] == 0
    code, out, err = run(capsys, sqlite_url, "keys", "list", "--filter", "zzz")
    assert code == 0 and out == "" and "No keys match 'zzz'" in err


def test_a_filter_with_a_control_character_is_escaped_once(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """An unmatched filter holding ESC is named with ESC escaped once (\\x1b), not twice."""
    assert run(capsys, sqlite_url, "keys", "create", "alpha", "--scope", "project")[0] == 0
    code, out, err = run(capsys, sqlite_url, "keys", "list", "--filter", "\x1b[2J")
    assert code == 0 and out == "" and "\x1b" not in err
    assert err == "No keys match '\\x1b[2J'.\n"


@pytest.mark.parametrize("text", ["billing", "BILL", "deploy", "alice", "serv", "o", "zzz"])
def test_the_cli_filter_and_the_apps_filter_find_the_same_keys(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, text: str
) -> None:
    """keys list --filter finds the keys the app's filter finds, a scope name's match included."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    store.add_scope("billing")
    store.create_key("alice", "ci-deploy", ["billing"])
    store.create_key("alice", "laptop", ["project"])
    store.create_key("bob", "deploy-prod", ["serving"])
    in_app = {(k.owner, k.name) for k in store.key_window(KeyQuery(None, text), 0, 100)}
    store.close()
    code, out, _ = run(capsys, sqlite_url, "keys", "list", "--all", "--filter", text, "--json")
    assert code == 0
    assert {(k["owner"], k["name"]) for k in json.loads(out)} == in_app


def test_an_unforeseen_error_is_one_line_without_its_message(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception no command expects ends in one line naming its type and place, exit 1:
    never a traceback, never its message (which could quote a secret)."""
    assert run(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")[0] == 0

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("akSECRET.plaintext-would-be-here")

    monkeypatch.setattr(KeyStore, "get_key", broken)
    code, out, err = run(capsys, sqlite_url, "keys", "show", "ci")
    assert (code, out) == (1, "") and err.count("\n") == 1, err
    assert "RuntimeError" in err and "test_cli.py" in err
    assert "SECRET" not in err and "Traceback" not in err


def test_version_is_the_installed_release() -> None:
    """`apikey-tui --version` prints the installed package's version, which is the package's
    own __version__ and at least 0.3 (the release of schema version 3: expiry, disable), and
    the database schema it writes."""
    installed = importlib.metadata.version("apikey-tui")
    command = shutil.which("apikey-tui", path=os.path.dirname(sys.executable))
    assert command is not None, "the package's console script is not installed"
    done = subprocess.run(
        [command, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == f"apikey-tui {installed} (database schema {apikey_tui.SCHEMA_VERSION})\n"
    assert apikey_tui.__version__ == installed, "stale install: run pip install -e . again"
    assert tuple(int(part) for part in installed.split(".")[:2]) >= (0, 3)


def test_a_parser_built_for_a_command_line_helps_as_the_full_one() -> None:
    """Every command's --help, from a parser built only for its words, equals the full parser's."""
    from apikey_tui.cli import build_parser, subcommands

    full = dict(subcommands(build_parser()))
    for words, parser in full.items():
        lazy = dict(subcommands(build_parser(words.split())))[words]
        assert lazy.format_help() == parser.format_help(), words
