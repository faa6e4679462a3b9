"""Bulk key commands on SQLite and the real PostgreSQL: one transaction, one batch id, and undo."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from apikey_tui.errors import InvalidInputError, KeyChangedError, KeyStateError
from apikey_tui.store import KeyInfo, KeyStore
from apikey_tui.store.audit import batch_of, with_batch
from tests.conftest import ACTOR, CHEAP, FakeClock


@pytest.fixture
def bstore(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """A store (SQLite, then PostgreSQL) on the fake clock with four keys of alice."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    for name in ("a", "b", "c", "d"):
        key_store.create_key("alice", name, ["project"], expires=timedelta(days=30))
    yield key_store
    key_store.close()


def keys(store: KeyStore, *names: str) -> list[KeyInfo]:
    """The named keys of alice as the store has them now."""
    return [store.get_key("alice", name) for name in names]


def logged(store: KeyStore) -> list[str]:
    """Every public id the change log holds, oldest first."""
    with store.engine.connect() as conn:
        return [r[0] for r in conn.execute(text("SELECT public_id FROM apikey_tui_change"))]


def test_bulk_disable_is_one_batch_with_one_id_and_logs_every_key(bstore: KeyStore) -> None:
    """Disabling three keys disables each, gives each event one shared batch id, logs each id."""
    chosen = keys(bstore, "a", "b", "c")
    mark = len(logged(bstore))
    done = bstore.disable_keys(chosen, "rotating the CI fleet")
    assert [k.disabled for k in keys(bstore, "a", "b", "c", "d")] == [True, True, True, False]
    events = [e for e in bstore.events(10) if e.action == "key.disable"]
    assert len(events) == 3
    assert {batch_of(e.detail) for e in events} == {done.id}
    assert all(e.detail.endswith("rotating the CI fleet") for e in events)
    assert sorted(logged(bstore)[mark:]) == sorted(k.public_id for k in chosen)


def test_one_refusal_refuses_the_whole_batch(bstore: KeyStore) -> None:
    """When one marked key is already disabled, none of the others is disabled either."""
    chosen = keys(bstore, "a", "b")
    bstore.disable_key("alice", "b")
    with pytest.raises(KeyStateError):
        bstore.disable_keys(chosen)
    assert not bstore.get_key("alice", "a").disabled


def test_a_key_recreated_meanwhile_refuses_the_batch(bstore: KeyStore) -> None:
    """A key recreated after it was marked stops the batch: nothing is deleted."""
    chosen = keys(bstore, "a", "b")
    bstore.recreate_key("alice", "b")
    with pytest.raises(KeyChangedError):
        bstore.delete_keys(chosen)
    assert len(bstore.list_keys("alice")) == 4


def test_undo_restores_each_key_exactly_in_one_audited_batch(
    bstore: KeyStore, clock: FakeClock
) -> None:
    """Undoing a bulk disable enables the keys again; undoing an enable brings back each key's
    own disabled time and reason, not new ones."""
    bstore.disable_key("alice", "a", "lost laptop")
    clock.advance(timedelta(hours=1))
    bstore.disable_key("alice", "b", "")
    before = keys(bstore, "a", "b")
    clock.advance(timedelta(hours=1))
    enabled = bstore.enable_keys(before)
    assert not any(k.disabled for k in keys(bstore, "a", "b"))
    undone = bstore.undo(enabled)
    assert keys(bstore, "a", "b") == before
    restores = [e for e in bstore.events(10) if e.action == "key.restore"]
    assert len(restores) == 2
    assert {batch_of(e.detail) for e in restores} == {undone.id}
    assert all(f"undoes batch {enabled.id} (enable)" in e.detail for e in restores)


def test_undo_of_an_expiry_batch_puts_back_each_expiry(bstore: KeyStore) -> None:
    """Setting two keys to never expire, then undoing, brings back their 30-day expiries."""
    before = keys(bstore, "c", "d")
    done = bstore.set_expiry_of_keys(before, "never")
    assert all(k.expires_at is None for k in keys(bstore, "c", "d"))
    bstore.undo(done)
    assert keys(bstore, "c", "d") == before


def test_undo_of_a_scopes_change_puts_back_each_keys_scopes(bstore: KeyStore) -> None:
    """Giving two keys new scopes, then undoing, brings back exactly the scopes each had."""
    bstore.set_key_scopes("alice", "c", ["project", "serving"])
    before = keys(bstore, "c", "d")
    done = bstore.set_scopes_of_keys(before, ["serving"])
    assert [k.scopes for k in keys(bstore, "c", "d")] == [("serving",), ("serving",)]
    assert [e.action for e in bstore.events(2)] == ["key.rescope", "key.rescope"]
    bstore.undo(done)
    assert keys(bstore, "c", "d") == before
    assert bstore.events(1)[0].action == "key.restore"


def test_undo_of_scopes_refuses_when_a_scope_to_restore_left_the_catalog(
    bstore: KeyStore,
) -> None:
    """A scope removed from the catalog after the change cannot come back: the undo is refused."""
    bstore.set_key_scopes("alice", "a", ["project", "serving"])
    done = bstore.set_scopes_of_keys(keys(bstore, "a"), ["project"])
    bstore.remove_scope("serving")
    with pytest.raises(KeyStateError, match="serving left the catalog"):
        bstore.undo(done)
    assert bstore.get_key("alice", "a").scopes == ("project",)


def test_undo_refuses_when_a_key_changed_after_the_batch(bstore: KeyStore) -> None:
    """An undo never overwrites a later change: it is refused whole, the later change stays."""
    done = bstore.disable_keys(keys(bstore, "a", "b"))
    bstore.enable_key("alice", "b")
    with pytest.raises(KeyStateError, match="changed after the disable"):
        bstore.undo(done)
    assert bstore.get_key("alice", "a").disabled


def test_bulk_rotate_hands_over_each_new_secret_and_delete_cannot_be_undone(
    bstore: KeyStore,
) -> None:
    """Rotating two keys gives two new secrets under one batch; a delete batch has no undo."""
    chosen = keys(bstore, "a", "b")
    done = bstore.rotate_keys(chosen, grace=timedelta(hours=1))
    assert [c.info.name for c in done.created] == ["a", "b"]
    assert all(
        c.info.old_public_id == k.public_id for c, k in zip(done.created, chosen, strict=True)
    )
    gone = bstore.delete_keys(keys(bstore, "c"))
    with pytest.raises(InvalidInputError):
        bstore.undo(gone)
    assert [k.name for k in bstore.list_keys("alice")] == ["a", "b", "d"]


def test_a_detail_names_its_batch_only_when_it_has_one() -> None:
    """with_batch puts the id first; batch_of reads it back, and finds none in a plain detail."""
    assert batch_of(with_batch("reason", "0123456789ab")) == "0123456789ab"
    assert batch_of(with_batch("", "0123456789ab")) == "0123456789ab"
    assert batch_of("lost laptop") is None


def test_one_key_is_a_plain_change_and_its_before_is_read_in_the_transaction(
    bstore: KeyStore,
) -> None:
    """A batch of one key records no batch id, and its before is the key as stored, not the
    caller's older copy (so an undo restores what really was)."""
    seen = keys(bstore, "a")
    bstore.set_expiry("alice", "a", timedelta(days=3))  # another admin, after "a" was read
    done = bstore.disable_keys(seen, "off")
    assert done.id is None
    assert batch_of(bstore.events(1)[0].detail) is None
    assert done.before[0].expires_at != seen[0].expires_at
    bstore.undo(done)
    assert bstore.get_key("alice", "a").expires_at == done.before[0].expires_at


def test_an_ended_grace_cannot_be_undone(bstore: KeyStore) -> None:
    """An undo of an ended grace is refused, not a quiet success that leaves the grace ended:
    only what an undo restores exactly (expiry, disabled state, scopes) can be undone."""
    bstore.rotate_key("alice", "a", grace=timedelta(hours=1))
    ended = bstore.end_grace_of_keys(keys(bstore, "a"))
    with pytest.raises(InvalidInputError, match="cannot be undone"):
        bstore.undo(ended)
    assert bstore.events(1)[0].action != "key.restore"
