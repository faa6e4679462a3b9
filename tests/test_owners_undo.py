"""`offboard PERSON --undo`: an applied offboarding reversed from the audit trail, by the CLI."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from sqlmodel import col, delete

from apikey_tui.cli import main, prompts
from apikey_tui.db.models import EventRow
from apikey_tui.errors import InvalidKeyError, KeyStateError
from apikey_tui.store import KeyStore
from apikey_tui.store.offboarding import OFFBOARD, NoOffboardingError
from apikey_tui.store.types import CreatedKey, KeyInfo
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP


@pytest.fixture
def verifier(database_url: str, store: KeyStore) -> Iterator[Verifier]:
    """A verifier on the store's database."""
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    yield checker
    checker.close()


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, *args])
    out, err = capsys.readouterr()
    return code, out, err


def _alice(store: KeyStore) -> dict[str, CreatedKey]:
    """alice owns two keys (one already disabled), is in a team and answers for a service."""
    store.add_owner("payments", "team", members=["alice", "bob"])
    store.add_owner("svc-bill", "service", members=["alice"])
    keys = {
        "laptop": store.create_key("alice", "laptop", ["project"]),
        "old": store.create_key("alice", "old", ["project"]),
        "ci": store.create_key("alice", "ci", ["project"]),
        "nightly": store.create_key("svc-bill", "nightly", ["project"]),
    }
    store.disable_key("alice", "old", "retired", expected_public_id=keys["old"].info.public_id)
    return keys


def _state(store: KeyStore) -> tuple[list[KeyInfo], list[tuple[str, tuple[str, ...]]]]:
    """Every key and every owner's members: what an undo must give back exactly."""
    keys = sorted(store.list_keys(), key=lambda k: k.public_id)
    return keys, [(o.name, o.members) for o in store.list_owners()]


def test_cli_undo_restores_keys_owners_and_memberships_exactly(
    database_url: str, store: KeyStore, verifier: Verifier, capsys: pytest.CaptureFixture[str]
) -> None:
    """--apply then --undo (a new process each: only the trail links them) gives back every
    key as it was (enabled, moved back, the already disabled one untouched) and the
    memberships; the verifier accepts the re-enabled key; the undo is its own batch."""
    keys = _alice(store)
    was = _state(store)
    code, out, _ = _cli(capsys, database_url, "offboard", "alice", "--apply",
                        "--transfer", "alice/ci=payments", "--transfer", "svc-bill=payments",
                        "--json")  # fmt: skip
    applied = json.loads(out)["batch"]
    assert code == 0 and store.get_key("alice", "laptop").disabled
    assert store.get_key("payments", "ci").public_id == keys["ci"].info.public_id
    with pytest.raises(InvalidKeyError):
        verifier.verify(f"ApiKey {keys['laptop'].plaintext}")
    code, out, err = _cli(capsys, database_url, "offboard", "alice", "--undo", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["undone"] == applied and shown["batch"] not in (None, applied)
    assert sorted(f"{k['owner']}/{k['name']}" for k in shown["keys"]) == [
        "alice/ci",
        "alice/laptop",
        "svc-bill/nightly",
    ]
    assert "1 key enabled, 2 moved back, 2 memberships restored" in err
    assert _state(store) == was
    assert verifier.verify(f"ApiKey {keys['laptop'].plaintext}", ["project"]).owner == "alice"
    undo = [e for e in store.events(30) if e.detail.startswith(f"batch {shown['batch']}")]
    assert {e.action for e in undo} == {"key.restore", "key.transfer", "owner.members"}
    assert all(f"undoes batch {applied}" in e.detail for e in undo if e.action != "key.transfer")


def test_the_trail_gives_back_the_batch_apply_returned(store: KeyStore) -> None:
    """The batch read from the audit trail is the one the app holds in memory after applying:
    the same id, keys before and after, and memberships, in the same order."""
    _alice(store)
    seen = store.offboard_preview("alice")
    done = store.offboard(seen, transfers={("svc-bill", "nightly"): "payments"})
    assert store.offboarding("alice") == done
    assert store.offboarding("alice", done.id) == done


def test_undo_is_refused_when_a_key_changed_since(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key of the batch changed after it (here tagged): one line, exit 1, nothing undone."""
    _alice(store)
    store.offboard(store.offboard_preview("alice"), transfers={("svc-bill", "nightly"): "bob"})
    store.set_tags_of_keys([store.get_key("bob", "nightly")], [("env", "prod")])
    then = _state(store)
    code, _, err = _cli(capsys, database_url, "offboard", "alice", "--undo")
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert "'nightly' of bob changed after the offboarding (key.tags" in err
    assert _state(store) == then


def test_a_key_that_leaked_since_stays_disabled(
    database_url: str, store: KeyStore, verifier: Verifier, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key the offboarding disabled that leaks afterwards is never revived by the undo."""
    keys = _alice(store)
    store.offboard(store.offboard_preview("alice"))
    credential = store.credential(keys["laptop"].info.public_id)
    assert credential is not None
    store.contain_leak(credential, source="github", where="https://github.com/o/r")
    with pytest.raises(KeyStateError, match="secret leaked"):
        store.offboarding("alice")
    code, _, err = _cli(capsys, database_url, "offboard", "alice", "--undo")
    assert code == 1 and err.count("\n") == 1 and "secret leaked" in err
    assert store.get_key("alice", "laptop").leaked
    assert store.get_owner("alice").member_of == ()
    with pytest.raises(InvalidKeyError):
        verifier.verify(f"ApiKey {keys['laptop'].plaintext}")


def test_undo_twice_is_refused(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second undo, by the CLI or after the app's own undo, is refused: one line, exit 1."""
    _alice(store)
    store.offboard(store.offboard_preview("alice"))
    code, _, _ = _cli(capsys, database_url, "offboard", "alice", "--undo")
    assert code == 0
    code, _, err = _cli(capsys, database_url, "offboard", "alice", "--undo")
    assert code == 1 and err.count("\n") == 1 and "was undone already" in err
    done = store.offboard(store.offboard_preview("alice"))
    store.undo(done)  # the app's u
    with pytest.raises(KeyStateError, match="was undone already"):
        store.offboarding("alice")


def test_bad_person_or_batch_is_one_line_exit_2(
    database_url: str, store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A person never offboarded, a batch that is not theirs, a malformed batch id or --undo
    with --apply: one line, exit 2, no traceback, nothing changed."""
    _alice(store)
    done = store.offboard(store.offboard_preview("alice"))
    store.offboard(store.offboard_preview("bob"))
    for args in (
        ["offboard", "zed", "--undo"],
        ["offboard", "bob", "--undo", str(done.id)],
        ["offboard", "alice", "--undo", "0123456789ab"],
        ["offboard", "alice", "--undo", "--apply"],
    ):
        code, _, err = _cli(capsys, database_url, *args)
        assert (code, err.count("\n"), "Traceback" in err) == (2, 1, False), args
    with pytest.raises(SystemExit) as bad:  # argparse's own usage error: two lines
        _cli(capsys, database_url, "offboard", "alice", "--undo", "nope")
    assert bad.value.code == 2 and "12 hex digits" in capsys.readouterr().err
    with pytest.raises(NoOffboardingError):
        store.offboarding("carol")
    assert store.get_key("alice", "laptop").disabled


def test_undo_asks_in_a_terminal_and_no_means_nothing(
    database_url: str,
    store: KeyStore,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a terminal --undo lists what it reverses and asks; Enter is no, nothing changes."""
    _alice(store)
    store.offboard(store.offboard_preview("alice"))
    monkeypatch.setattr(prompts, "_tty", lambda stream: True)
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    code, _, err = _cli(capsys, database_url, "offboard", "alice", "--undo")
    assert code == 1 and "alice/laptop: enable" in err and "back in payments" in err
    assert "Undo the offboarding of alice? [y/N]" in err and "Cancelled" in err
    assert store.get_key("alice", "laptop").disabled


def test_an_offboarding_from_before_its_event_is_found_by_its_words(store: KeyStore) -> None:
    """A batch applied by 0.9.0 (no owner.offboard event) is found by its events' words and
    undone like any other."""
    _alice(store)
    done = store.offboard(store.offboard_preview("alice"))
    with store.session(write=True) as session:
        session.exec(delete(EventRow).where(col(EventRow.action) == OFFBOARD))
        session.commit()
    assert store.offboarding("alice") == done
    store.undo(store.offboarding("alice"))
    assert not store.get_key("alice", "laptop").disabled
