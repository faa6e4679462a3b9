"""The network commands: create with rules, set-networks, owners set-networks, keys show, and
keys networks --propose / --apply from the use a verifier recorded."""

from __future__ import annotations

import json

import pytest

from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP
from tests.test_cli import run as _run


def run(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """The CLI in this process: exit code (argparse's usage errors too), stdout, stderr."""
    try:
        return _run(capsys, url, *args)
    except SystemExit as exit_:
        out, err = capsys.readouterr()
        return int(exit_.code or 0), out, err


def test_rules_are_set_shown_switched_and_lifted_with_one_line_errors(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """keys create takes networks and a mode; show and --json list them; --mode alone switches
    the mode; none lifts them; a bad network or a mode without networks is a usage error."""
    code, _, err = run(
        capsys, database_url, "keys", "create", "p", "--scope", "project", "--owner", "alice",
        "--allow-from", "10.0.0.0/8", "--allow-from", "2001:db8::/32", "--deny-from",
        "10.9.0.0/16", "--networks-mode", "shadow",
    )  # fmt: skip
    assert (
        code == 0 and "Networks: shadow: allow 10.0.0.0/8, 2001:db8::/32; deny 10.9.0.0/16." in err
    )
    code, out, _ = run(capsys, database_url, "keys", "show", "p", "--owner", "alice")
    assert "networks:   shadow: allow 10.0.0.0/8, 2001:db8::/32; deny 10.9.0.0/16" in out
    code, out, _ = run(
        capsys, database_url, "keys", "set-networks", "p", "--owner", "alice", "--mode", "enforce",
        "--json",
    )  # fmt: skip
    assert json.loads(out)["networks"] == {
        "mode": "enforce",
        "allow": ["10.0.0.0/8", "2001:db8::/32"],
        "deny": ["10.9.0.0/16"],
        "readable": True,
    }
    code, out, _ = run(capsys, database_url, "keys", "show", "p", "--owner", "alice", "--json")
    shown = json.loads(out)
    assert shown["networks"]["mode"] == "enforce" and shown["network_refusals"] == []
    assert shown["owner_networks"] is None
    for bad in (
        ["keys", "set-networks", "p", "--owner", "alice", "--allow-from", "10.0.0.1/8"],
        ["keys", "set-networks", "p", "none", "--owner", "alice", "--mode", "shadow"],
        ["keys", "set-networks", "p", "--owner", "alice"],
        ["keys", "create", "q", "--scope", "project", "--networks-mode", "shadow"],
    ):
        code, out, err = run(capsys, database_url, *bad)
        assert code == 2 and out == "" and err.count("\n") == 1, bad
    code, _, err = run(
        capsys, database_url, "keys", "set-networks", "p", "none", "--owner", "alice"
    )
    assert code == 0 and "may now be used from anywhere" in err
    code, _, err = run(
        capsys, database_url, "owners", "set-networks", "alice", "--allow-from", "10.0.0.0/8"
    )
    assert code == 0
    code, out, _ = run(capsys, database_url, "keys", "show", "p", "--owner", "alice")
    assert "and the owner's: enforce: allow 10.0.0.0/8" in out
    code, out, _ = run(capsys, database_url, "events", "--json")
    actions = [e["action"] for e in json.loads(out)][:4]
    assert actions == ["owner.networks", "key.networks", "key.networks", "key.create"]


def test_propose_prints_the_covering_list_and_apply_sets_it_in_shadow(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """After use from three /24s (two of them siblings), --propose prints the two networks
    covering them; --apply sets them in shadow mode; with no use it says so and exits 1."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("bob", "k", ["project"])
    idle = store.create_key("bob", "idle", ["project"])
    store.close()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        for client in ("192.0.2.1", "192.0.3.200", "198.51.100.9", "192.0.2.99"):
            verifier.verify(f"ApiKey {key.plaintext}", (), client)
        verifier.flush()
    finally:
        verifier.close()
    code, out, _ = run(capsys, database_url, "keys", "networks", "k", "--owner", "bob", "--propose")
    assert code == 0 and out.splitlines() == ["192.0.2.0/23", "198.51.100.0/24"]
    code, out, err = run(
        capsys, database_url, "keys", "networks", "k", "--owner", "bob", "--apply", "--json"
    )
    # The next step, ready to paste: this key and owner, not a placeholder.
    assert "apikey-tui keys set-networks k --owner bob --mode enforce" in err
    data = json.loads(out)
    assert data["networks"]["mode"] == "shadow"
    assert data["networks"]["allow"] == data["proposal"] == ["192.0.2.0/23", "198.51.100.0/24"]
    assert data["came_from"] == ["192.0.2.0/24", "192.0.3.0/24", "198.51.100.0/24"]
    code, out, err = run(
        capsys, database_url, "keys", "networks", "idle", "--owner", "bob", "--apply"
    )
    assert code == 1 and "nothing to propose" in err and err.count("\n") == 1
    assert idle.info.networks is None
