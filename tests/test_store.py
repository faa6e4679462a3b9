"""Tests of KeyStore on SQLite and on the real PostgreSQL: keys, scopes, events, secrecy."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from apikey_tui import keyformat
from apikey_tui.errors import (
    DuplicateKeyNameError,
    DuplicateScopeError,
    InvalidInputError,
    KeyNotFoundError,
    ScopeInUseError,
    ScopeNotFoundError,
    StoreUnavailableError,
    UnknownScopeError,
)
from apikey_tui.hashing import fingerprint
from apikey_tui.store import KeyStore
from tests.conftest import CHEAP, every_fingerprint
from tests.throwaway_postgres import ThrowawayPostgres


def _count_keys(store: KeyStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM apikey_tui_key")).scalar_one())


def test_create_returns_a_verifiable_key_once(store: KeyStore) -> None:
    """Create returns a well-formed key whose secret verifies against the stored hash."""
    created = store.create_key("alice", "demo", ["serving", "project"])
    parts = keyformat.parse(created.plaintext)
    assert parts.public_id == created.info.public_id
    assert created.info.scopes == ("project", "serving")
    credential = store.credential(parts.public_id)
    assert credential is not None
    assert store.hasher.verify(credential.secret_hash, parts.secret)
    assert created.plaintext not in repr(created)
    assert created.info.created_at.tzinfo is not None


def test_the_database_holds_no_trace_of_the_secret(store: KeyStore) -> None:
    """No column of any table holds the key, its secret or a part of the secret."""
    created = store.create_key("alice", "demo", ["project"])
    secret = keyformat.parse(created.plaintext).secret
    with store.engine.connect() as conn:
        tables = ["apikey_tui_key", "apikey_tui_event", "apikey_tui_key_scope", "apikey_tui_meta"]
        dump = " ".join(
            str(row)
            for table in tables
            for row in conn.execute(text(f"SELECT * FROM {table}"))  # noqa: S608
        )
    assert secret[:16] not in dump and secret[-16:] not in dump


def test_sqlite_file_bytes_hold_no_trace_of_the_secret(sqlite_url: str, tmp_path: Path) -> None:
    """After create and recreate, the SQLite file and its WAL contain no part of either secret."""
    store = KeyStore.open(sqlite_url)  # the real profile, as the CLI uses it
    secrets = [store.create_key("alice", "demo", ["project"]).plaintext]
    secrets.append(store.recreate_key("alice", "demo").plaintext)
    store.close()
    data = b"".join(p.read_bytes() for p in tmp_path.glob("keys.db*"))
    for key in secrets:
        secret = keyformat.parse(key).secret
        assert secret[:12].encode() not in data and secret[-12:].encode() not in data


def test_same_name_twice_for_one_owner_is_a_duplicate(store: KeyStore) -> None:
    """A second key of the same name for the same owner is refused; another owner may use it."""
    store.create_key("alice", "demo", ["project"])
    with pytest.raises(DuplicateKeyNameError, match="alice already has a key named 'demo'"):
        store.create_key("alice", "demo", ["serving"])
    store.create_key("bob", "demo", ["serving"])
    assert [(k.owner, k.name) for k in store.list_keys()] == [("alice", "demo"), ("bob", "demo")]


@pytest.mark.parametrize(
    ("name", "scopes", "error"),
    [
        ("demo", ["nope"], UnknownScopeError),
        ("demo", [], InvalidInputError),
        ("[bold red]x\x1b[2J", ["project"], InvalidInputError),
        ("", ["project"], InvalidInputError),
        ("demo", ["Project"], InvalidInputError),
    ],
)
def test_bad_input_writes_nothing(
    store: KeyStore, name: str, scopes: list[str], error: type[Exception]
) -> None:
    """Unknown or missing scopes and bad names are refused and leave no key and no event."""
    with pytest.raises(error):
        store.create_key("alice", name, scopes)
    assert _count_keys(store) == 0
    assert store.events() == []


def test_list_filters_by_owner_and_text(store: KeyStore) -> None:
    """Listing narrows by owner and by a case-insensitive substring of name, id or owner."""
    a = store.create_key("alice", "deploy-ci", ["project"]).info
    store.create_key("alice", "laptop", ["project"])
    store.create_key("bob", "deploy_prod", ["project"])
    assert [k.name for k in store.list_keys("alice")] == ["deploy-ci", "laptop"]
    assert [k.name for k in store.list_keys(None, "DEPLOY")] == ["deploy-ci", "deploy_prod"]
    assert [k.name for k in store.list_keys(None, a.public_id[:10])] == ["deploy-ci"]
    assert store.list_keys(None, "%") == []  # wildcards are literal
    assert [k.name for k in store.list_keys(None, "_")] == ["deploy_prod"]
    assert len(store.list_keys(limit=2)) == 2


def test_get_and_delete(store: KeyStore) -> None:
    """A deleted key can no longer be found, listed or looked up by public id."""
    info = store.create_key("alice", "demo", ["project"]).info
    assert store.get_key("alice", "demo") == info
    assert store.delete_key("alice", "demo") == info
    with pytest.raises(KeyNotFoundError):
        store.get_key("alice", "demo")
    with pytest.raises(KeyNotFoundError, match="alice has no key named 'demo'"):
        store.delete_key("alice", "demo")
    assert store.credential(info.public_id) is None
    assert _count_keys(store) == 0


def test_recreate_replaces_id_and_secret_and_keeps_name_and_scopes(store: KeyStore) -> None:
    """Recreate keeps owner, name and scopes; the old id is gone and the new secret verifies."""
    old = store.create_key("alice", "demo", ["project", "serving"])
    new = store.recreate_key("alice", "demo")
    assert (new.info.owner, new.info.name, new.info.scopes) == ("alice", "demo", old.info.scopes)
    assert new.info.public_id != old.info.public_id
    assert store.credential(old.info.public_id) is None
    credential = store.credential(new.info.public_id)
    assert credential is not None
    assert store.hasher.verify(credential.secret_hash, keyformat.parse(new.plaintext).secret)
    assert _count_keys(store) == 1
    with pytest.raises(KeyNotFoundError):
        store.recreate_key("alice", "ghost")


def test_create_and_recreate_store_the_secrets_fingerprint(store: KeyStore) -> None:
    """Create and recreate store the keyed fingerprint of the new secret, hidden from repr."""
    created = keyformat.parse(store.create_key("alice", "demo", ["project"]).plaintext)
    first = store.credential(created.public_id)
    assert first is not None and first.fingerprint == fingerprint(*_id_and_secret(created))
    recreated = keyformat.parse(store.recreate_key("alice", "demo").plaintext)
    second = store.credential(recreated.public_id)
    assert second is not None and second.fingerprint == fingerprint(*_id_and_secret(recreated))
    assert second.fingerprint not in repr(second) and second.secret_hash not in repr(second)


def _id_and_secret(parts: keyformat.ParsedKey) -> tuple[str, str]:
    return parts.public_id, parts.secret


def test_credential_is_one_select_with_the_scopes(store: KeyStore) -> None:
    """credential() reads the key and its scopes in one SELECT, and None for an unknown id."""
    info = store.create_key("alice", "demo", ["serving", "project"]).info
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        credential = store.credential(info.public_id)
        missing = store.credential("ak" + "a" * 16)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)
    assert credential is not None and missing is None
    assert credential.info == info
    queries = [s for s in statements if "apikey_tui" in s]
    assert len(queries) == 2 and all(q.startswith("SELECT") for q in queries)


def test_the_verifiers_credential_carries_the_same_key_info_as_list_keys(store: KeyStore) -> None:
    """credential() gives the verifier the very KeyInfo list_keys gives, disabled reason too."""
    store.create_key("alice", "demo", ["serving", "project"])
    store.rotate_key("alice", "demo", grace=timedelta(hours=1))
    store.disable_key("alice", "demo", "suspected leak")
    [listed] = store.list_keys("alice")
    assert listed.disabled_reason == "suspected leak" and listed.old_public_id is not None
    current = store.credential(listed.public_id)
    previous = store.credential(listed.old_public_id)
    assert current is not None and current.info == listed
    assert previous is not None and previous.info == replace(listed, public_id=listed.old_public_id)


def test_fingerprint_pages_list_every_key_once(store: KeyStore) -> None:
    """Paged two at a time, five keys come back once each with their fingerprint (or None)."""
    created = [store.create_key("alice", f"k{n}", ["project"]) for n in range(5)]
    with store.engine.begin() as conn:  # a key made before schema version 2 has none
        conn.execute(
            text("UPDATE apikey_tui_key SET fingerprint = NULL WHERE public_id = :p"),
            {"p": created[0].info.public_id},
        )
    expected: dict[str, str | None] = {
        c.info.public_id: fingerprint(c.info.public_id, keyformat.parse(c.plaintext).secret)
        for c in created[1:]
    }
    expected[created[0].info.public_id] = None
    assert every_fingerprint(store, page=2) == expected
    assert store.key_count() == 5


def test_set_key_scopes_replaces_them(store: KeyStore) -> None:
    """Re-scoping a key replaces its scopes and still refuses unknown ones."""
    store.create_key("alice", "demo", ["project", "serving"])
    assert store.set_key_scopes("alice", "demo", ["serving"]).scopes == ("serving",)
    assert store.get_key("alice", "demo").scopes == ("serving",)
    with pytest.raises(UnknownScopeError):
        store.set_key_scopes("alice", "demo", ["nope"])
    assert store.get_key("alice", "demo").scopes == ("serving",)


def test_scope_catalog_add_describe_remove(store: KeyStore) -> None:
    """Scopes can be added, described and removed; duplicates and ghosts are refused."""
    store.add_scope("billing", "Billing API")
    with pytest.raises(DuplicateScopeError):
        store.add_scope("billing")
    store.describe_scope("billing", "Invoices and payments")
    assert ("billing", "Invoices and payments") in [
        (s.name, s.description) for s in store.list_scopes()
    ]
    store.remove_scope("billing")
    assert [s.name for s in store.list_scopes()] == ["project", "serving"]
    with pytest.raises(ScopeNotFoundError):
        store.remove_scope("billing")
    with pytest.raises(ScopeNotFoundError):
        store.describe_scope("billing", "x")


def test_removing_a_held_scope_names_the_keys(store: KeyStore) -> None:
    """Removing a scope that keys hold is refused with a message naming those keys."""
    store.create_key("alice", "demo", ["serving"])
    store.create_key("bob", "model", ["serving", "project"])
    with pytest.raises(ScopeInUseError, match="alice/demo, bob/model"):
        store.remove_scope("serving")
    assert "serving" in [s.name for s in store.list_scopes()]


def test_every_change_is_an_event_with_its_actor_and_no_secret(store: KeyStore) -> None:
    """Create, recreate, delete and catalog changes each leave an event naming the actor."""
    first = store.create_key("alice", "demo", ["project"])
    second = store.recreate_key("alice", "demo")
    store.delete_key("alice", "demo")
    store.add_scope("billing", "Billing")
    store.describe_scope("billing", "Invoices")
    store.remove_scope("billing")
    events = store.events()
    assert [e.action for e in events] == [
        "scope.remove",
        "scope.describe",
        "scope.add",
        "key.delete",
        "key.recreate",
        "key.create",
    ]
    assert {(e.actor, e.actor_address) for e in events} == {("admin-test", "192.0.2.7")}
    recreate = events[4]
    assert (recreate.owner, recreate.key_name, recreate.public_id) == (
        "alice",
        "demo",
        second.info.public_id,
    )
    assert first.info.public_id in recreate.detail
    text_of_events = repr(events)
    for key in (first.plaintext, second.plaintext):
        assert keyformat.parse(key).secret[:16] not in text_of_events
    assert len(store.events(limit=2)) == 2


def test_record_use_only_moves_forward(store: KeyStore) -> None:
    """last_used_at is set by record_use and never moved backwards."""
    from datetime import UTC, datetime, timedelta

    info = store.create_key("alice", "demo", ["project"]).info
    later = datetime.now(UTC)
    store.record_use({info.public_id: later})
    store.record_use({info.public_id: later - timedelta(hours=1)})
    used = store.get_key("alice", "demo").last_used_at
    assert used is not None and abs((used - later).total_seconds()) < 0.001


def test_replace_hash_is_refused_after_recreate(store: KeyStore) -> None:
    """An upgraded hash lands only if the stored hash is still the one that was checked."""
    info = store.create_key("alice", "demo", ["project"]).info
    cred = store.credential(info.public_id)
    assert cred is not None
    store.replace_hash(info.public_id, "not-the-current-hash", "$argon2id$bogus")
    after = store.credential(info.public_id)
    assert after is not None and after.secret_hash == cred.secret_hash


def test_database_going_down_is_a_store_unavailable_error(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """When the server stops under an open store, reads and writes raise one-line errors."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    store.create_key("alice", "demo", ["project"])
    throwaway_postgres.stop()
    for operation in (
        lambda: store.list_keys(),
        lambda: store.create_key("alice", "x", ["project"]),
    ):
        with pytest.raises(StoreUnavailableError, match="database unavailable") as info:
            operation()
        assert "\n" not in str(info.value)
    throwaway_postgres.start()
    assert [k.name for k in store.list_keys()] == ["demo"]  # and it recovers by itself
    store.close()


def test_delete_and_recreate_refuse_a_key_recreated_since_it_was_read(store: KeyStore) -> None:
    """With expected_public_id, delete and recreate refuse a key whose id changed, doing nothing."""
    from apikey_tui.errors import KeyChangedError

    chosen = store.create_key("alice", "demo", ["project"]).info
    now = store.recreate_key("alice", "demo").info
    events = len(store.events())
    with pytest.raises(KeyChangedError, match=r"changed meanwhile.*nothing was done"):
        store.delete_key("alice", "demo", expected_public_id=chosen.public_id)
    with pytest.raises(KeyChangedError):
        store.recreate_key("alice", "demo", expected_public_id=chosen.public_id)
    with pytest.raises(KeyChangedError):
        store.set_key_scopes("alice", "demo", ["serving"], expected_public_id=chosen.public_id)
    assert store.get_key("alice", "demo") == now and len(store.events()) == events
    assert store.delete_key("alice", "demo", expected_public_id=now.public_id) == now
