"""Owners (issue 30) beside network rules (issue 29): transfer, offboarding, owners and filter."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from apikey_tui.errors import KeyStateError, NetworkNotAllowedError
from apikey_tui.networks import network_rules
from apikey_tui.store import KeyStore
from apikey_tui.store.types import KeyQuery
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP, eventually
from tests.test_owners import _cli, as_actor, header

OFFICE = network_rules(["10.0.0.0/8"], ["10.9.0.0/16"])
WATCHED = network_rules(["192.0.2.0/24"], mode="shadow")


@pytest.fixture
def verifier(database_url: str, store: KeyStore) -> Iterator[Verifier]:
    """A verifier on the store's database."""
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    yield checker
    checker.close()


def _owner_of(verifier: Verifier, key: str, client: str) -> str | None:
    """The owner a request from client is admitted as, or None when the network refuses it."""
    try:
        return verifier.verify(header(key), (), client).owner
    except NetworkNotAllowedError:
        return None


def test_a_transfer_keeps_the_keys_rules_and_the_new_owners_apply_until_undone(
    store: KeyStore, verifier: Verifier
) -> None:
    """A transferred key keeps its own network rules; the new owner's rules apply to it at once
    and no longer after undo, which gives it back its rules unchanged."""
    store.add_owner("payments", "team")
    store.set_owner_networks("payments", network_rules(["10.1.0.0/16"]))
    key = store.create_key("alice", "ci", ["project"], networks=OFFICE)
    assert _owner_of(verifier, key.plaintext, "10.2.0.1") == "alice"
    assert _owner_of(verifier, key.plaintext, "10.9.0.1") is None
    done = store.transfer_keys([key.info], "payments")
    assert done.after[0].networks == OFFICE
    assert store.get_key("payments", "ci").networks == OFFICE
    assert eventually(lambda: _owner_of(verifier, key.plaintext, "10.2.0.1") is None)
    assert _owner_of(verifier, key.plaintext, "10.1.2.3") == "payments"
    store.undo(done)
    assert store.get_key("alice", "ci").networks == OFFICE
    assert eventually(lambda: _owner_of(verifier, key.plaintext, "10.2.0.1") == "alice")


def test_offboarding_keeps_the_keys_rules_and_its_undo_puts_them_back(
    database_url: str, store: KeyStore
) -> None:
    """An offboarding that disables one key and transfers another leaves both keys' network
    rules as they were; its undo restores them, and is refused once a rule changed since."""
    store.add_owner(
        "payments", "team", members=["alice", "bob"]
    )  # not alice alone: see move_refusal
    store.add_owner("svc-bill", "service", members=["alice"])
    alice = as_actor(database_url, "alice")
    try:
        alice.create_key("alice", "laptop", ["project"], networks=OFFICE)
    finally:
        alice.close()
    store.create_key("svc-bill", "nightly", ["project"], networks=WATCHED)
    seen = store.offboard_preview("alice")
    batch = store.offboard(seen, transfers={("svc-bill", "nightly"): "payments"})
    assert store.get_key("alice", "laptop").networks == OFFICE
    assert store.get_key("payments", "nightly").networks == WATCHED
    store.undo(batch)
    assert store.get_key("alice", "laptop").networks == OFFICE
    assert store.get_key("svc-bill", "nightly").networks == WATCHED
    assert not store.get_key("alice", "laptop").disabled
    again = store.offboard(store.offboard_preview("alice"))
    laptop = store.get_key("alice", "laptop")
    store.set_networks_of_keys([laptop], WATCHED)
    with pytest.raises(KeyStateError, match="changed after the offboard"):
        store.undo(again)
    assert store.get_key("alice", "laptop").networks == WATCHED


def test_owners_show_lists_kind_members_limits_and_networks(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`owners show` names a team's kind, members, pool and network rules, in text and JSON."""
    url = database_url
    _cli(capsys, url, "owners", "add", "payments", "--kind", "team", "--member", "alice")
    _cli(capsys, url, "owners", "set-limits", "payments", "100/m")
    code, _, err = _cli(capsys, url, "owners", "set-networks", "payments", "--allow-from",
                        "10.0.0.0/8", "--mode", "shadow")  # fmt: skip
    assert code == 0, err
    store.create_key("payments", "deploy", ["project"])
    code, out, _ = _cli(capsys, url, "owners", "show", "payments")
    assert code == 0
    lines = out.splitlines()
    assert lines[:3] == ["owner:    payments (1 key)", "kind:     team", "members:  alice"]
    assert lines[-1] == "networks: shadow: allow 10.0.0.0/8"
    assert any(line.startswith("limits:   100/m") for line in lines)
    code, out, _ = _cli(capsys, url, "owners", "show", "payments", "--json")
    shown = json.loads(out)
    assert (shown["kind"], shown["members"], shown["keys"], shown["limits"]) == (
        "team",
        ["alice"],
        1,
        ["100/m"],
    )
    assert shown["networks"]["mode"] == "shadow" and shown["networks"]["allow"] == ["10.0.0.0/8"]


def test_rules_for_a_new_owner_make_a_person_and_go_when_it_is_removed(store: KeyStore) -> None:
    """Network rules for an owner nobody named yet make it a person, listed as owners are;
    removing that owner removes its rules, so one added again starts with none."""
    store.set_owner_networks("contractors", OFFICE)
    assert store.get_owner("contractors").kind == "person"
    assert "contractors" in {o.name for o in store.list_owners("person")}
    store.remove_owner("contractors")
    assert store.owner_networks("contractors") is None
    store.add_owner("contractors", "team")
    assert store.owner_networks("contractors") is None


def test_the_network_mode_words_work_beside_the_filters_fields(
    store: KeyStore, capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """`shadow` and `enforce` find keys by their own mode alone or with tag:, owner:, kind:,
    state: and scope: terms, the same through `keys list --filter` and the app's window."""
    store.add_owner("payments", "team")
    store.create_key("payments", "a", ["project"], networks=WATCHED, tags=[("env", "prod")])
    store.create_key("payments", "b", ["serving"], networks=OFFICE, tags=[("env", "prod")])
    store.create_key("payments", "c", ["project"], tags=[("env", "prod")])
    gone = store.create_key("alice", "d", ["project"], networks=WATCHED)
    store.disable_key("alice", "d", expected_public_id=gone.info.public_id)
    cases = {
        "shadow": {"payments/a", "alice/d"},
        "enforce": {"payments/b"},
        "shadow tag:env=prod": {"payments/a"},
        "shadow kind:person": {"alice/d"},
        "shad owner:payments": {"payments/a"},
        "enforce scope:serving": {"payments/b"},
        "shadow state:disabled": {"alice/d"},
        "enforce kind:person": set(),
    }
    for text, expected in cases.items():
        code, out, _ = _cli(capsys, database_url, "keys", "list", "--all", "--filter", text,
                            "--json")  # fmt: skip
        cli = {f"{k['owner']}/{k['name']}" for k in json.loads(out)} if out.strip() else set()
        window = store.key_window(KeyQuery(text=text), 0, 100)
        app = {f"{k.owner}/{k.name}" for k in window}
        assert (code, cli, app) == (0, expected, expected), text
