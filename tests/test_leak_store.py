"""KeyStore.contain_leak and KeyStore.leaks: what a proven leak changes, and how it reads back."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from apikey_tui.errors import AuthError, InvalidInputError, KeyNotFoundError, KeyStateError
from apikey_tui.names import NEVER
from apikey_tui.store import LEAK_EVENT, Credential, KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import FakeClock


def credential_of(store: KeyStore, public_id: str) -> Credential:
    found = store.credential(public_id)
    assert found is not None
    return found


def test_live_key_is_disabled_with_leak_reason_and_event(store: KeyStore) -> None:
    """A live key is disabled ('leaked: <where>'), and its leak reads back as source, where."""
    info = store.create_key("alice", "ci", ["project"]).info
    leak = store.contain_leak(
        credential_of(store, info.public_id), source="github", where="https://github.com/o/r"
    )
    assert leak is not None and leak.outcome == "disabled"
    after = store.get_key("alice", "ci")
    assert after.leaked and after.disabled_reason == "leaked: https://github.com/o/r"
    [read] = store.leaks("alice", "ci")
    assert read == replace(leak, at=read.at)  # the event's own timestamp
    assert [e.action for e in store.events(limit=1)] == [LEAK_EVENT]


def test_delete_action_deletes_and_keeps_the_leak_history(store: KeyStore) -> None:
    """With delete the key is gone, and its leak is still found by owner and name."""
    info = store.create_key("alice", "ci", ["project"]).info
    leak = store.contain_leak(
        credential_of(store, info.public_id), source="depsdev", where="u", delete=True
    )
    assert leak is not None and leak.outcome == "deleted"
    with pytest.raises(KeyNotFoundError):
        store.get_key("alice", "ci")
    assert [x.outcome for x in store.leaks("alice", "ci")] == ["deleted"]


def test_a_disabled_key_is_marked_leaked_and_cannot_be_enabled(store: KeyStore) -> None:
    """A leak reported while the key is disabled marks it leaked (it keeps when it went off),
    and neither enable nor an undo of the earlier disable brings the secret back."""
    info = store.create_key("alice", "ci", ["project"]).info
    disabled = store.disable_keys([info], "off for now")
    leak = store.contain_leak(credential_of(store, info.public_id), source="revoke", where="x")
    assert leak is not None and leak.outcome == "disabled"
    after = store.get_key("alice", "ci")
    assert after.leaked and after.disabled_reason == "leaked: x"
    assert after.disabled_at == disabled.after[0].disabled_at
    with pytest.raises(KeyStateError, match="secret leaked"):
        store.enable_key("alice", "ci")
    with pytest.raises(KeyStateError):
        store.undo(disabled)
    with pytest.raises(KeyStateError, match="secret leaked"):
        store.enable_keys([after])
    assert store.get_key("alice", "ci").leaked


def test_an_expired_key_is_marked_leaked_and_a_new_expiry_does_not_revive_it(
    clocked: tuple[KeyStore, Verifier], clock: FakeClock
) -> None:
    """A leak reported after the key expired marks it leaked: a new expiry, or undoing that
    new expiry, leaves the verifier refusing the secret."""
    store, verifier = clocked
    created = store.create_key("alice", "ci", ["project"], expires=timedelta(hours=1))
    clock.advance(timedelta(hours=2))
    credential = credential_of(store, created.info.public_id)
    leak = store.contain_leak(credential, source="github", where="https://github.com/o/r")
    assert leak is not None and leak.outcome == "disabled"
    renewed = store.set_expiry_of_keys([store.get_key("alice", "ci")], NEVER)
    assert store.get_key("alice", "ci").leaked
    with pytest.raises(AuthError):
        verifier.verify(f"ApiKey {created.plaintext}")
    store.undo(renewed)  # back to expired; still leaked
    assert store.get_key("alice", "ci").leaked


def test_the_same_report_again_acts_once(store: KeyStore) -> None:
    """A replayed report (same source and where) writes no second event and says 'repeated';
    another report of the same secret is recorded beside the first."""
    info = store.create_key("alice", "ci", ["project"]).info
    where = "https://github.com/o/r/blob/main/" + "x" * 500  # stored cut short
    first = store.contain_leak(credential_of(store, info.public_id), source="github", where=where)
    again = store.contain_leak(credential_of(store, info.public_id), source="github", where=where)
    assert first is not None and again is not None and again.outcome == "repeated"
    assert [x.outcome for x in store.leaks("alice", "ci")] == ["disabled"]
    other = store.contain_leak(credential_of(store, info.public_id), source="scan", where="f:1")
    assert other is not None and other.outcome == "recorded"
    assert [x.outcome for x in store.leaks("alice", "ci")] == ["recorded", "disabled"]


def test_recreating_a_leaked_key_lifts_the_mark_from_the_new_secret(
    clocked: tuple[KeyStore, Verifier],
) -> None:
    """After a recreate the key is disabled but no longer leaked: enable makes the new secret
    work, and the old one stays refused."""
    store, verifier = clocked
    created = store.create_key("alice", "ci", ["project"])
    store.contain_leak(credential_of(store, created.info.public_id), source="scan", where="f:1")
    recreated = store.recreate_key("alice", "ci")
    after = store.get_key("alice", "ci")
    assert after.disabled and not after.leaked
    assert after.disabled_reason == "leaked secret replaced: f:1"
    store.enable_key("alice", "ci")
    assert verifier.verify(f"ApiKey {recreated.plaintext}").key_name == "ci"
    with pytest.raises(AuthError):
        verifier.verify(f"ApiKey {created.plaintext}")


def test_a_recreated_key_is_not_touched_by_its_old_secrets_leak(store: KeyStore) -> None:
    """A credential read before the key was recreated changes nothing (its secret is dead)."""
    info = store.create_key("alice", "ci", ["project"]).info
    old = credential_of(store, info.public_id)
    store.recreate_key("alice", "ci")
    assert store.contain_leak(old, source="scan", where="f:1") is None
    assert not store.get_key("alice", "ci").disabled
    assert store.leaks("alice", "ci") == []


def test_previous_secret_in_grace_leaking_stops_the_whole_key(store: KeyStore) -> None:
    """A rotated key's previous secret (in grace) leaking disables the key; the event names the
    previous id."""
    first = store.create_key("alice", "ci", ["project"]).info
    store.rotate_key("alice", "ci", grace=timedelta(days=1))
    leak = store.contain_leak(credential_of(store, first.public_id), source="scan", where="f:1")
    assert leak is not None and leak.outcome == "disabled" and leak.public_id == first.public_id
    assert store.get_key("alice", "ci").leaked


def test_long_or_unprintable_where_is_cut_and_escaped(store: KeyStore) -> None:
    """A where of 1000 characters with an escape sequence fits the reason and the event."""
    info = store.create_key("alice", "ci", ["project"]).info
    where = "\x1b[2J" + "u" * 1000
    leak = store.contain_leak(credential_of(store, info.public_id), source="scan", where=where)
    assert leak is not None
    reason = store.get_key("alice", "ci").disabled_reason
    assert reason is not None and len(reason) == 200 and "\x1b" not in reason
    [event] = store.events(limit=1)
    assert len(event.detail) <= 400 and "\x1b" not in event.detail


def test_unknown_source_is_refused(store: KeyStore) -> None:
    """A source outside LEAK_SOURCES is refused before anything changes."""
    info = store.create_key("alice", "ci", ["project"]).info
    with pytest.raises(InvalidInputError):
        store.contain_leak(credential_of(store, info.public_id), source="mail", where="x")
    assert not store.get_key("alice", "ci").disabled


def test_a_hash_upgraded_meanwhile_does_not_stop_the_containment(store: KeyStore) -> None:
    """A verifier re-hashing the secret (a profile upgrade) between the check and the write is
    the same key and secret: the leak is still contained."""
    info = store.create_key("alice", "ci", ["project"]).info
    proven = credential_of(store, info.public_id)
    store.replace_hash(info.public_id, proven.secret_hash, "$argon2id$v=19$m=8,t=1,p=1$upgraded")
    leak = store.contain_leak(proven, source="github", where="u")
    assert leak is not None and leak.outcome == "disabled"
    assert store.get_key("alice", "ci").leaked


def test_rotating_a_leaked_key_gives_its_leaked_secret_no_grace(store: KeyStore) -> None:
    """Rotated with a grace, then enabled, a leaked key's old secret still never works again."""
    info = store.create_key("alice", "ci", ["project"]).info
    store.contain_leak(credential_of(store, info.public_id), source="github", where="u")
    rotated = store.rotate_key("alice", "ci", grace=timedelta(hours=24))
    store.enable_key("alice", "ci")
    assert rotated.info.old_public_id is None and rotated.info.grace_until is None
    assert store.credential(info.public_id) is None  # the leaked id answers nothing
    assert "no grace: the key leaked" in store.events(limit=2)[-1].detail
