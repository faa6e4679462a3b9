"""What the owners and offboarding commands refuse, and how: an outside tester's findings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from apikey_tui.cli import main
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import check_owner
from apikey_tui.store import KeyStore
from apikey_tui.store.metadata import check_meta, check_tags
from tests.conftest import ACTOR, CHEAP


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[KeyStore]:
    """A store on a fresh SQLite file (these are CLI checks: one backend is enough)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    yield store
    store.close()


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["--database-url", url, *args])
    except SystemExit as exc:  # argparse's usage errors: exit 2 after the usage line
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_offboarding_refuses_a_transfer_to_the_person_leaving(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--transfer svc-a=dave` while offboarding dave is refused by the dry run and --apply
    (exit 2, nothing done), and by the store: the key never stays active under the leaver."""
    store = sqlite_store
    store.add_owner("dave", "person")
    store.add_owner("svc-a", "service", members=["dave", "erin"])
    store.create_key("svc-a", "s1", ["project"])
    code, out, err = _cli(capsys, sqlite_url, "offboard", "dave", "--transfer", "svc-a=dave",
                          "--json")  # fmt: skip
    assert code == 2 and "dave is the person being offboarded" in err
    assert json.loads(out)["plan"]["svc-a/s1"].startswith("refused: transfer to dave")
    code, _, err = _cli(capsys, sqlite_url, "offboard", "dave", "--apply", "--transfer",
                        "svc-a=dave")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "nothing was done" in err
    assert store.get_key("svc-a", "s1").owner == "svc-a"
    assert store.get_owner("svc-a").members == ("dave", "erin")
    seen = store.offboard_preview("dave")
    with pytest.raises(InvalidInputError, match="being offboarded"):
        store.offboard(seen, transfers={("svc-a", "s1"): "dave"})


def test_offboarding_refuses_a_destination_only_the_leaver_answers_for(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transfer to a team or service account whose only member is the person leaving is
    refused (it would answer to no one); once someone else is in it, it goes through."""
    store = sqlite_store
    store.add_owner("svc-b", "service", members=["dave"])
    store.create_key("dave", "d1", ["project"])
    code, _, err = _cli(capsys, sqlite_url, "offboard", "dave", "--apply", "--transfer",
                        "dave/d1=svc-b")  # fmt: skip
    assert code == 2 and "svc-b's only member is dave" in err
    assert store.get_key("dave", "d1").owner == "dave"
    store.change_members("svc-b", add=["erin"])
    code, _, err = _cli(capsys, sqlite_url, "offboard", "dave", "--apply", "--transfer",
                        "dave/d1=svc-b")  # fmt: skip
    assert code == 0 and store.get_key("svc-b", "d1").owner == "svc-b"


@pytest.mark.parametrize("kind", ["team", "service"])
def test_offboard_refuses_a_team_or_service_account(
    kind: str, sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`offboard payments` (a team or service account) is one line, exit 2, in the app's
    words, dry run and --apply alike; no key is disabled."""
    sqlite_store.add_owner("payments", kind, members=["alice"])
    sqlite_store.create_key("payments", "api", ["project"])
    for extra in ((), ("--apply",)):
        code, out, err = _cli(capsys, sqlite_url, "offboard", "payments", *extra)
        assert (code, out) == (2, "")
        assert (
            err
            == f"apikey-tui: payments is a {kind}: offboarding is for people; nothing was done\n"
        )
    assert not sqlite_store.get_key("payments", "api").disabled


def test_the_dry_run_shows_what_apply_would_refuse(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name clash, an unknown destination, two moves into one name: the dry run says so per
    key and exits 2, as --apply would refuse; a mistyped person is one line, exit 2."""
    store = sqlite_store
    store.add_owner("payments", "team", members=["bob"])
    store.create_key("payments", "ci", ["project"])
    store.create_key("alice", "ci", ["project"])
    store.create_key("alice", "web", ["project"])
    code, out, err = _cli(capsys, sqlite_url, "offboard", "alice", "--transfer",
                          "alice/ci=payments", "--json")  # fmt: skip
    plan = json.loads(out)["plan"]
    assert code == 2 and "payments already has a key named 'ci'" in plan["alice/ci"]
    assert plan["alice/web"] == "disable" and "--apply would refuse" in err
    code, out, err = _cli(capsys, sqlite_url, "offboard", "alice", "--transfer", "alice=nobody")
    assert code == 2 and out.count("refused: transfer to nobody: no owner 'nobody'") == 2
    store.add_owner("ops", "team", members=["bob"])
    store.create_key("bob", "ci", ["project"])
    store.add_owner("svc", "service", members=["alice", "bob"])
    store.create_key("svc", "ci", ["project"])
    code, out, _ = _cli(capsys, sqlite_url, "offboard", "alice", "--transfer", "alice/ci=ops",
                        "--transfer", "svc/ci=ops", "--json")  # fmt: skip
    plan = json.loads(out)["plan"]
    assert code == 2 and plan["alice/ci"] == "transfer to ops"
    assert "ops already has a key named 'ci'" in plan["svc/ci"]
    code, out, err = _cli(capsys, sqlite_url, "offboard", "alcie")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "no owner 'alcie'" in err
    assert not store.get_key("alice", "ci").disabled


def test_repeated_or_contradictory_arguments_are_usage_errors(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """One key in two --transfer, a member both added and removed, a metadata or tag name
    twice: one line, exit 2, nothing done (never last-wins)."""
    store = sqlite_store
    store.add_owner("ops", "team", members=["bob"])
    store.add_owner("erin", "person")
    store.create_key("dave", "d1", ["project"])
    store.add_owner("svc-x", "service", members=["carol"])
    for args in (
        ("offboard", "dave", "--transfer", "dave/d1=ops", "--transfer", "dave/d1=erin"),
        ("offboard", "dave", "--transfer", "dave=ops", "--transfer", "dave/d1=ops", "--apply"),
        ("owners", "members", "svc-x", "--add", "carol", "--remove", "carol"),
        ("keys", "set-meta", "d1", "--owner", "dave", "x=1", "x=2"),
        ("keys", "set-tags", "d1", "--owner", "dave", "env=1", "env=2"),
    ):
        code, out, err = _cli(capsys, sqlite_url, *args)
        assert (code, out, err.count("\n")) == (2, "", 1), args
    key = store.get_key("dave", "d1")
    assert (key.owner, key.disabled, key.meta, key.tags) == ("dave", False, (), ())
    assert store.get_owner("svc-x").members == ("carol",)
    with pytest.raises(InvalidInputError, match="given twice"):
        check_tags([("env", "1"), ("env", "2")])  # the app's tags box reads pairs through it


def test_bad_input_is_exit_2_whichever_layer_finds_it(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Input the rules refuse is a usage error (exit 2, one line), as README's table says,
    whether argparse (the usage line too) or the store found it."""
    sqlite_store.create_key("alice", "k", ["project"])
    for args in (
        ("keys", "set-meta", "k", "--owner", "alice", "1x=y"),
        ("keys", "set-tags", "k", "--owner", "alice", "Env=x"),
        ("keys", "create", "k2", "--owner", "alice", "--scope", "project", "--tag", "Env=x"),
        ("offboard", "alice", "--reason", "\x1b[31m", "--apply"),
        ("keys", "set-meta", "k", "--owner", "alice", "none", "x=1"),
        ("owners", "set-limits", "alice", "10/s", "10/s"),
        ("keys", "transfer", "k", "--owner", "alice", "--to", "nobody"),
    ):
        code, out, err = _cli(capsys, sqlite_url, *args)
        assert (code, out) == (2, ""), args
        assert err.count("\n") == 1 or err.startswith("usage:"), args
    key = sqlite_store.get_key("alice", "k")
    assert (key.disabled, key.meta, key.tags) == (False, (), ())


def test_events_table_names_the_owner_of_owner_events(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`events` shows which owner an owner.* event is about, not an empty column."""
    sqlite_store.add_owner("payments", "team", members=["alice"])
    sqlite_store.change_members("payments", remove=["alice"])
    code, out, _ = _cli(capsys, sqlite_url, "events")
    rows = [line for line in out.splitlines() if "owner.members" in line]
    assert code == 0 and len(rows) == 1 and " payments " in rows[0]
    assert "KEY/OWNER/SCOPE" in out.splitlines()[0]


def test_owners_add_makes_a_fresh_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`owners add` is a first command, as `keys create` is: on a missing SQLite file in a
    folder that exists it makes the database and says so."""
    url = f"sqlite:///{tmp_path / 'new.db'}"
    code, _, err = _cli(capsys, url, "owners", "add", "payments", "--kind", "team")
    assert code == 0 and "created a new database" in err and "Added team payments" in err
    code, _, err = _cli(capsys, f"sqlite:///{tmp_path / 'no' / 'new.db'}", "owners", "add", "x",
                        "--kind", "team")  # fmt: skip
    assert code == 1 and "no folder" in err


def test_messages_say_the_rules_that_apply(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The owner rule names its first character, a tag value's says ASCII, a no-break space in
    metadata is refused as the docs say, and shadow networks are not "used from shadow"."""
    with pytest.raises(InvalidInputError, match="starting with a letter, digit or '_'"):
        check_owner("@x")
    with pytest.raises(InvalidInputError, match="ASCII letters"):
        check_tags([("env", "é")])
    with pytest.raises(InvalidInputError, match="non-plain space"):
        check_meta([("plan", "gold\u00a0plan")])
    assert check_meta([("plan", "gold plan")]) == (("plan", "gold plan"),)
    sqlite_store.add_owner("payments", "team")
    code, _, err = _cli(capsys, sqlite_url, "owners", "set-networks", "payments",
                        "--allow-from", "10.0.0.0/8", "--mode", "shadow")  # fmt: skip
    assert code == 0 and "used from shadow" not in err
    assert "may still be used from anywhere: shadow mode only logs" in err


def test_owner_limits_for_a_name_that_was_no_owner_say_so(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`owners set-limits ghost 10/s` (a typo?) says ghost was no owner; a known one does not."""
    sqlite_store.add_owner("payments", "team")
    code, out, err = _cli(capsys, sqlite_url, "owners", "set-limits", "ghost", "10/s", "--json")
    assert code == 0 and json.loads(out)["new"] is True and "ghost was no owner" in err
    code, out, err = _cli(capsys, sqlite_url, "owners", "set-limits", "payments", "10/s", "--json")
    assert code == 0 and json.loads(out)["new"] is False and "was no owner" not in err


def test_adding_an_owner_that_exists_is_refused_like_a_duplicate_key(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`owners add` of a taken name exits 1 (refused), as a duplicate key or scope does."""
    assert _cli(capsys, sqlite_url, "owners", "add", "payments", "--kind", "team")[0] == 0
    code, out, err = _cli(capsys, sqlite_url, "owners", "add", "payments", "--kind", "team")
    assert (code, out) == (1, "") and err.count("\n") == 1 and "payments exists" in err
    assert _cli(capsys, sqlite_url, "keys", "create", "k", "--scope", "project")[0] == 0
    assert _cli(capsys, sqlite_url, "keys", "create", "k", "--scope", "project")[0] == 1


def test_setting_a_keys_limits_to_what_it_has_says_unchanged(
    sqlite_url: str, sqlite_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys set-limits ci none` on a key with no limits says they are unchanged (it said 'now
    has the limits none (were none)'); a real change still names both."""
    sqlite_store.create_key("alice", "ci", ["project"])
    code, _, err = _cli(capsys, sqlite_url, "--owner", "alice", "keys", "set-limits", "ci", "none")
    assert code == 0 and "keeps the limits none (unchanged)" in err, err
    code, _, err = _cli(capsys, sqlite_url, "--owner", "alice", "keys", "set-limits", "ci", "10/s")
    assert code == 0 and "now has the limits 10/s (were none)" in err, err
