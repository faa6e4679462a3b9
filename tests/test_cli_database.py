"""Which commands may make a database: a mistyped SQLite path never becomes one by mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from apikey_tui.cli import main

# Each command that opens a database and must find it, with arguments it would take on one
# that held a key named 'ci'. (serve-leaks is left out: it would need signed key files and
# then serve; it opens its store the same way as scan.)
MUST_EXIST = {
    "keys list": ["keys", "list"],
    "keys show": ["keys", "show", "ci"],
    "keys delete": ["keys", "delete", "ci", "--yes"],
    "keys recreate": ["keys", "recreate", "ci", "--yes"],
    "keys set-scopes": ["keys", "set-scopes", "ci", "--scope", "project"],
    "keys set-limits": ["keys", "set-limits", "ci", "10/s"],
    "owners set-limits": ["owners", "set-limits", "svc-batch", "100/m"],
    "owners show": ["owners", "show", "svc-batch"],
    "owners list": ["owners", "list"],
    "owners change": ["owners", "change", "payments", "--description", "x"],
    "owners members": ["owners", "members", "payments", "--add", "alice"],
    "owners remove": ["owners", "remove", "payments"],
    "keys transfer": ["keys", "transfer", "ci", "--to", "payments"],
    "keys set-meta": ["keys", "set-meta", "ci", "plan=gold"],
    "keys set-tags": ["keys", "set-tags", "ci", "env=prod"],
    "offboard": ["offboard", "alice"],
    "keys set-networks": ["keys", "set-networks", "ci", "--allow-from", "10.0.0.0/8"],
    "keys networks": ["keys", "networks", "ci", "--propose"],
    "owners set-networks": ["owners", "set-networks", "svc-batch", "none"],
    "keys rotate": ["keys", "rotate", "ci", "--grace", "1h", "--yes"],
    "keys set-expiry": ["keys", "set-expiry", "ci", "90d"],
    "keys disable": ["keys", "disable", "ci"],
    "keys enable": ["keys", "enable", "ci"],
    "keys usage": ["keys", "usage", "ci"],
    "keys rightsize": ["keys", "rightsize", "--all"],
    "keys near-limits": ["keys", "near-limits", "--all"],
    "policy show": ["policy", "show"],
    "policy set": ["policy", "set", "max-lifetime", "365d"],
    "scopes list": ["scopes", "list"],
    "scopes add": ["scopes", "add", "billing"],
    "scopes describe": ["scopes", "describe", "project", "x"],
    "scopes remove": ["scopes", "remove", "project"],
    "events": ["events"],
    "db compact": ["db", "compact"],
    "db grant-verifier": ["db", "grant-verifier", "svc_reader"],
    "scan": ["scan", "/dev/null"],
}


@pytest.mark.parametrize("words", MUST_EXIST)
def test_a_mistyped_path_never_becomes_a_database(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, words: str
) -> None:
    """On a SQLite path that does not exist (in a folder that does), every command but
    `keys create` and `db upgrade` says so in one line, fails, and creates no file."""
    missing = tmp_path / "keys.db"
    code = main(["--database-url", f"sqlite:///{missing}", *MUST_EXIST[words]])
    out, err = capsys.readouterr()
    assert not missing.exists()
    # scan's exit 1 means 'found', near-limits' 'one is near': their refusals say 2
    assert (code, out) == (2 if words in ("scan", "keys near-limits") else 1, "")
    assert err == (
        f"apikey-tui: no database at {missing}; check the path, or create it with "
        "'apikey-tui keys create NAME --scope SCOPE' or 'apikey-tui db upgrade'\n"
    )


def test_every_command_says_how_it_opens_the_database() -> None:
    """The records give each command its database rule: only `keys create` and `owners add`
    may make a SQLite file, and every command that must find one is tried above (serve-leaks
    aside)."""
    from apikey_tui.cli import records
    from apikey_tui.cli.commands import leaves

    rules = {command.words: command.database for command in leaves()}
    assert [words for words, rule in rules.items() if rule == records.MAY_CREATE] == [
        "keys create",
        "owners add",
    ]
    must_exist = {words for words, rule in rules.items() if rule == records.MUST_EXIST}
    assert must_exist == {*MUST_EXIST, "serve-leaks"}
    assert rules[""] == records.DEFAULT_ONLY and rules["db upgrade"] == records.MAKES
