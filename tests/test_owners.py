"""Owners of three kinds, transfer and offboarding: the store, the verifier and the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from apikey_tui.cli import main
from apikey_tui.errors import (
    DuplicateOwnerError,
    InvalidInputError,
    InvalidKeyError,
    KeyStateError,
)
from apikey_tui.store import KeyStore
from apikey_tui.store.offboarding import MADE, OWNS, RESPONSIBLE
from apikey_tui.store.types import Actor, KeyQuery
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, eventually


def header(key: str) -> str:
    return f"ApiKey {key}"


@pytest.fixture
def verifier(database_url: str, store: KeyStore) -> Iterator[Verifier]:
    """A verifier on the store's database."""
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    yield checker
    checker.close()


def as_actor(database_url: str, user: str) -> KeyStore:
    """A store on the same database acting as another admin (the creator of keys)."""
    return KeyStore.open(database_url, hasher=CHEAP, actor=Actor(user), create=False)


def test_owners_have_kinds_members_and_rules(store: KeyStore) -> None:
    """Teams and service accounts have people as members; a person has none; every change is
    in the audit trail."""
    team = store.add_owner("payments", "team", members=["alice", "bob"], description="pay")
    assert (team.kind, team.members) == ("team", ("alice", "bob"))
    store.add_owner("svc-bill", "service", members=["alice"], meta=[("tier", "gold")])
    with pytest.raises(InvalidInputError, match="only teams and service accounts"):
        store.add_owner("carol", "person", members=["bob"])
    with pytest.raises(InvalidInputError, match="members are people"):
        store.change_members("payments", add=["svc-bill"])
    with pytest.raises(DuplicateOwnerError, match="exists"):
        store.add_owner("payments", "team")
    with pytest.raises(KeyStateError, match="member of"):
        store.change_owner("alice", kind="team")
    info = store.change_members("payments", add=["carol"], remove=["bob"])
    assert info.members == ("alice", "carol")
    assert store.get_owner("alice").member_of == ("payments", "svc-bill")
    listed = {o.name: o for o in store.list_owners()}
    assert listed["svc-bill"].meta == (("tier", "gold"),)
    assert {o.name for o in store.list_owners("team")} == {"payments"}
    actions = [e.action for e in store.events(20) if e.owner in ("payments", "svc-bill")]
    assert actions.count("owner.add") == 2 and "owner.members" in actions


def test_a_key_made_for_a_new_owner_makes_a_person_and_records_its_creator(
    store: KeyStore,
) -> None:
    """`keys create --owner X` for an unknown X makes X a person; the key names its creator."""
    made = store.create_key("dave", "k", ["project"])
    assert made.info.created_by == ACTOR.user
    assert store.get_owner("dave").kind == "person"
    assert store.get_owner("dave").keys == 1


def test_transfer_keeps_the_secret_id_usage_and_history_and_is_undone(
    store: KeyStore, verifier: Verifier
) -> None:
    """A transferred key keeps its secret and public id (the client keeps working, now as the
    new owner), its history and usage; a name the new owner has is refused; undo moves it
    back."""
    store.add_owner("payments", "team")
    key = store.create_key("alice", "ci", ["project"])
    store.create_key("payments", "taken", ["project"])
    assert verifier.verify(header(key.plaintext), ["project"]).owner == "alice"
    done = store.transfer_keys([key.info], "payments")
    after = done.after[0]
    assert (after.owner, after.public_id) == ("payments", key.info.public_id)
    assert eventually(lambda: verifier.verify(header(key.plaintext)).owner == "payments")
    history = [e.action for e in store.key_detail("payments", "ci").events]
    assert history[:1] == ["key.transfer"] and "key.create" in history
    other = store.create_key("alice", "taken", ["project"])
    with pytest.raises(InvalidInputError, match="already has a key named 'taken'"):
        store.transfer_keys([other.info], "payments")
    with pytest.raises(InvalidInputError, match="no owner"):
        store.transfer_keys([other.info], "nobody")
    store.undo(done)
    assert store.get_key("alice", "ci").public_id == key.info.public_id
    assert eventually(lambda: verifier.verify(header(key.plaintext)).owner == "alice")


def test_offboarding_previews_then_applies_in_one_batch_that_undo_reverses(
    database_url: str, store: KeyStore
) -> None:
    """The preview lists keys alice owns, made, or answers for through a service account, and
    her teams; applying disables her own, transfers as asked, keeps the rest, ends her
    memberships; undo puts everything back."""
    store.add_owner("payments", "team", members=["alice", "bob"])
    store.add_owner("svc-bill", "service", members=["alice"])
    alice = as_actor(database_url, "alice")
    try:
        own = alice.create_key("alice", "laptop", ["project"])
        team = alice.create_key("payments", "deploy", ["project"])
    finally:
        alice.close()
    bill = store.create_key("svc-bill", "nightly", ["project"])
    store.create_key("bob", "unrelated", ["project"])
    seen = store.offboard_preview("alice")
    why = {(h.key.owner, h.key.name): h.why for h in seen.keys}
    assert why == {
        ("alice", "laptop"): (OWNS, MADE),
        ("payments", "deploy"): (MADE,),
        ("svc-bill", "nightly"): (RESPONSIBLE,),
    }
    assert [(m.owner, m.others) for m in seen.memberships] == [
        ("payments", ("bob",)),
        ("svc-bill", ()),
    ]
    batch = store.offboard(seen, transfers={("svc-bill", "nightly"): "payments"})
    assert store.get_key("alice", "laptop").disabled_reason == "offboarded: alice"
    assert store.get_key("payments", "nightly").public_id == bill.info.public_id
    assert not store.get_key("payments", "deploy").disabled
    assert store.get_owner("alice").member_of == ()
    assert len({e.detail[:18] for e in store.events(10) if e.detail.startswith("batch")}) == 1
    store.undo(batch)
    assert not store.get_key("alice", "laptop").disabled
    assert store.get_key("svc-bill", "nightly").public_id == bill.info.public_id
    assert store.get_owner("alice").member_of == ("payments", "svc-bill")
    assert store.get_key("payments", "deploy").public_id == team.info.public_id
    assert own.info.public_id == store.get_key("alice", "laptop").public_id


def test_a_teams_keys_keep_working_when_their_creator_is_offboarded_and_removed(
    database_url: str, store: KeyStore, verifier: Verifier
) -> None:
    """alice makes the team's key, is offboarded and then removed as an owner: 0 of 200
    requests with the team's key are refused."""
    store.add_owner("payments", "team", members=["alice", "bob"])
    alice = as_actor(database_url, "alice")
    try:
        team = alice.create_key("payments", "deploy", ["project"])
    finally:
        alice.close()
    assert verifier.verify(header(team.plaintext), ["project"]).owner == "payments"
    store.offboard(store.offboard_preview("alice"))
    store.remove_owner("alice")
    refused = 0
    for _ in range(200):
        try:
            verifier.verify(header(team.plaintext), ["project"])
        except InvalidKeyError:
            refused += 1
    assert refused == 0
    assert store.get_key("payments", "deploy").created_by == "alice"


def test_remove_refuses_an_owner_with_keys(store: KeyStore) -> None:
    """An owner that owns keys is not removed: its keys would belong to nobody."""
    store.create_key("erin", "k", ["project"])
    with pytest.raises(KeyStateError, match="owns 1 key"):
        store.remove_owner("erin")


def test_caller_meta_is_the_owners_with_the_keys_on_top_and_costs_no_query(
    store: KeyStore, verifier: Verifier
) -> None:
    """caller.meta holds the owner's metadata overlaid by the key's; 100 warm requests send 0
    statements; a change of the owner's metadata reaches the verifier."""
    store.add_owner("payments", "team", meta=[("cost", "42"), ("plan", "basic")])
    key = store.create_key("payments", "k", ["project"], meta=[("plan", "gold")])
    caller = verifier.verify(header(key.plaintext), ["project"])
    assert dict(caller.meta) == {"cost": "42", "plan": "gold"}
    with pytest.raises(TypeError):
        caller.meta["plan"] = "free"  # type: ignore[index]
    seen: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append(statement)

    event.listen(verifier._engine, "before_cursor_execute", note)
    for _ in range(100):
        assert verifier.verify(header(key.plaintext), ["project"]).meta["cost"] == "42"
    reads = [s for s in seen if "apikey_tui_key" in s and "apikey_tui_change" not in s]
    assert reads == []
    store.change_owner("payments", meta=[("cost", "7")])
    assert eventually(lambda: verifier.verify(header(key.plaintext)).meta.get("cost") == "7")


def test_meta_and_tags_have_documented_bounds_and_are_undone(store: KeyStore) -> None:
    """Metadata larger than 1024 bytes, bad names or tags are refused; set-meta and set-tags
    are undone like every key change."""
    with pytest.raises(InvalidInputError, match="1024 bytes"):
        store.create_key("f", "k", ["project"], meta=[(f"k{i}", "x" * 100) for i in range(12)])
    with pytest.raises(InvalidInputError, match="tag name"):
        store.create_key("f", "k", ["project"], tags=[("Env", "prod")])
    key = store.create_key("f", "k", ["project"], tags=[("env", "dev")])
    done = store.set_tags_of_keys([key.info], [("env", "prod"), ("team", "pay")])
    assert done.after[0].tags == (("env", "prod"), ("team", "pay"))
    store.undo(done)
    assert store.get_key("f", "k").tags == (("env", "dev"),)
    meta = store.set_meta_of_keys([key.info], [("plan", "gold")])
    store.undo(meta)
    assert store.get_key("f", "k").meta == ()


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_owners_transfer_and_offboard(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI adds and lists owners, transfers a key, offboards as a dry run (nothing
    changes) and with --apply (no terminal: it goes on); errors are one line."""
    url = database_url
    code, _, err = _cli(capsys, url, "owners", "add", "payments", "--kind", "team",
                        "--member", "alice", "--meta", "cost=42")  # fmt: skip
    assert code == 0 and "Added team payments" in err
    store.create_key("alice", "laptop", ["project"])
    store.create_key("alice", "ci", ["project"])
    code, out, _ = _cli(capsys, url, "owners", "list", "--json")
    listed = {o["name"]: o for o in json.loads(out)}
    assert listed["payments"]["members"] == ["alice"] and listed["alice"]["keys"] == 2
    code, out, err = _cli(capsys, url, "keys", "transfer", "ci", "--owner", "alice",
                          "--to", "payments", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["owner"] == "payments"
    code, _, err = _cli(capsys, url, "keys", "transfer", "ci", "--owner", "alice", "--to", "x")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    code, out, err = _cli(capsys, url, "offboard", "alice", "--json")
    assert code == 0 and "Dry run" in err
    assert json.loads(out)["plan"] == {"alice/laptop": "disable"}
    assert not store.get_key("alice", "laptop").disabled
    code, out, err = _cli(capsys, url, "offboard", "alice", "--apply", "--json")
    assert code == 0 and json.loads(out)["applied"] is True
    assert store.get_key("alice", "laptop").disabled
    assert store.get_owner("payments").members == ()
    with pytest.raises(SystemExit) as refused:  # there is no --yes: a terminal always asks
        _cli(capsys, url, "offboard", "alice", "--apply", "--yes")
    assert refused.value.code == 2


def test_filter_grammar_gives_the_cli_and_the_app_the_same_keys(
    store: KeyStore, capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """tag:, owner:, kind:, state: and scope: terms with free text find the same keys through
    `keys list --filter` and the app's window (`key_window`)."""
    store.add_owner("payments", "team")
    store.create_key("payments", "api-prod", ["project"], tags=[("env", "prod")])
    store.create_key("payments", "api-dev", ["project"], tags=[("env", "dev")])
    store.create_key("payments", "web-prod", ["serving"], tags=[("env", "prod")])
    gone = store.create_key("alice", "api-prod", ["project"], tags=[("env", "prod")])
    store.disable_key("alice", "api-prod", expected_public_id=gone.info.public_id)
    cases = {
        "tag:env=prod": {"payments/api-prod", "payments/web-prod", "alice/api-prod"},
        "tag:env=prod kind:team": {"payments/api-prod", "payments/web-prod"},
        "tag:env=prod scope:project": {"payments/api-prod", "alice/api-prod"},
        "owner:payments api": {"payments/api-prod", "payments/api-dev"},
        "state:disabled": {"alice/api-prod"},
        "kind:person tag:env": {"alice/api-prod"},
        # through the keys' terms index: scopes and tags together, alternatives, none at all
        "scope:serving tag:env=dev": set(),
        "scope:serving tag:env": {"payments/web-prod"},
        "scope:project tag:env=dev tag:env=prod": {
            "payments/api-prod",
            "payments/api-dev",
            "alice/api-prod",
        },
        "scope:serving owner:payments api": set(),
    }
    for text, expected in cases.items():
        code, out, _ = _cli(capsys, database_url, "keys", "list", "--all", "--filter", text,
                            "--json")  # fmt: skip
        cli = {f"{k['owner']}/{k['name']}" for k in json.loads(out)}
        window = store.key_window(KeyQuery(text=text), 0, 100)
        app = {f"{k.owner}/{k.name}" for k in window}
        assert (code, cli, app) == (0, expected, expected), text
        assert store.count_keys(KeyQuery(text=text)) == len(expected)


def test_a_tag_value_keeps_its_case_and_field_words_do_not_on_every_database(
    store: KeyStore, capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """`tag:env=prod` finds env=prod and not env=Prod on SQLite as on PostgreSQL; the field,
    a tag's name and a kind's word are read in any case (`TAG:ENV`, `kind:TEAM`)."""
    store.add_owner("payments", "team")
    store.create_key("payments", "lower", ["project"], tags=[("env", "prod")])
    store.create_key("alice", "upper", ["project"], tags=[("env", "Prod")])
    cases = {
        "tag:env=prod": {"payments/lower"},
        "tag:env=Prod": {"alice/upper"},
        "tag:env=PROD": set(),
        "TAG:ENV": {"payments/lower", "alice/upper"},
        "Tag:Env=prod": {"payments/lower"},
        "kind:TEAM": {"payments/lower"},
    }
    for text, expected in cases.items():
        code, out, _ = _cli(capsys, database_url, "keys", "list", "--all", "--filter", text,
                            "--json")  # fmt: skip
        cli = {f"{k['owner']}/{k['name']}" for k in json.loads(out)}
        app = {f"{k.owner}/{k.name}" for k in store.key_window(KeyQuery(text=text), 0, 100)}
        assert (code, cli, app) == (0, expected, expected), text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("state:disbled", "names no state"),
        ("kind:teams", "is none of person, team, service"),
        ("kind:robot owner:x", "is none of"),
        ("owner:", "owner: needs a value"),
        ("tag:", "tag: needs a value"),
        ("tag:\u00e9=1", "tag name"),
        ("tag:env=a%b", "value"),
        (" ".join(["owner:bob"] * 500), "at most 1000 characters"),
        (" ".join(f"owner:o{n}" for n in range(33)), "at most 32"),
    ],
)
def test_a_filter_no_key_can_meet_is_a_usage_error_not_no_keys(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    """A typo in a term (a state or kind word naming none, an empty value, a tag outside its
    grammar) or a filter past its bounds is one line and exit 2 in the CLI, never an empty
    list or a database error; the bounds hold in the store too (the app's reads)."""
    text = text.encode().decode("unicode_escape")
    store.create_key("bob", "k", ["project"])
    with pytest.raises(SystemExit) as refused:  # argparse's usage error, as any bad value
        main(["--database-url", database_url, "keys", "list", "--all", "--filter", text])
    out, err = capsys.readouterr()
    code = refused.value.code
    assert code == 2 and out == "" and said in err and err.count("\n") == 1, err
    assert "Traceback" not in err and "database" not in err
    if "at most" in said:
        with pytest.raises(InvalidInputError):
            store.key_window(KeyQuery(text=text), 0, 100)


def test_a_state_or_kind_word_being_typed_is_no_error(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Part of a word that names a state (`state:dis`, `state:exp`) is accepted, as the app
    sees it mid-word; only a word that names none is refused."""
    store.create_key("bob", "k", ["project"])
    for text in ("state:dis", "state:act", "state:a"):
        code, _, err = _cli(capsys, database_url, "keys", "list", "--all", "--filter", text)
        assert code == 0 and "argument --filter" not in err, text


def test_cli_members_change_meta_and_tags(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`owners members`, `owners change --meta`, `keys set-meta` and `keys set-tags` change
    what they name; `none` clears; a malformed pair is one line, exit 2 (a usage error)."""
    url = database_url
    _cli(capsys, url, "owners", "add", "svc", "--kind", "service", "--member", "alice")
    code, out, _ = _cli(capsys, url, "owners", "members", "svc", "--add", "bob", "--remove",
                        "alice", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["members"] == ["bob"]
    code, out, _ = _cli(capsys, url, "owners", "change", "svc", "--meta", "tier=gold", "--json")
    assert code == 0 and json.loads(out)["meta"] == {"tier": "gold"}
    store.create_key("svc", "k", ["project"])
    code, out, _ = _cli(capsys, url, "keys", "set-meta", "k", "--owner", "svc", "plan=x",
                        "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["meta"] == {"plan": "x"}
    code, out, _ = _cli(capsys, url, "keys", "set-tags", "k", "--owner", "svc", "env=prod")
    assert code == 0 and store.get_key("svc", "k").tags == (("env", "prod"),)
    code, _, _ = _cli(capsys, url, "keys", "set-tags", "k", "--owner", "svc", "none")
    assert code == 0 and store.get_key("svc", "k").tags == ()
    code, _, err = _cli(capsys, url, "keys", "set-tags", "k", "--owner", "svc", "Env=prod")
    assert code == 2 and err.count("\n") == 1 and "tag name" in err
    code, out, _ = _cli(capsys, url, "owners", "show", "svc", "--json")
    shown = json.loads(out)
    assert (shown["kind"], shown["members"], shown["keys"]) == ("service", ["bob"], 1)


def test_offboard_apply_asks_in_a_terminal_and_no_means_nothing(
    database_url: str,
    store: KeyStore,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a terminal `offboard --apply` asks first (as keys delete does); Enter is no, and
    nothing changes."""
    import io

    from apikey_tui.cli import prompts

    store.create_key("alice", "laptop", ["project"])
    monkeypatch.setattr(prompts, "_tty", lambda stream: True)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    code, _, err = _cli(capsys, database_url, "offboard", "alice", "--apply")
    assert code == 1 and "Offboard alice as listed? [y/N]" in err and "Cancelled" in err
    assert not store.get_key("alice", "laptop").disabled
