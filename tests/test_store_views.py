"""Store reads behind the app's views (key detail, scope catalog, audit trail), on both backends."""

from __future__ import annotations

import pytest

from apikey_tui.errors import KeyNotFoundError
from apikey_tui.store import Actor, KeyStore, ScopeUsage


def test_scope_usage_counts_the_keys_of_every_owner(store: KeyStore) -> None:
    """Each catalog scope comes with how many keys hold it, unused scopes with 0."""
    store.add_scope("billing", "Invoices")
    store.create_key("alice", "a", ["project"])
    store.create_key("bob", "b", ["project", "serving"])
    assert [(s.name, s.keys) for s in store.scope_usage()] == [
        ("billing", 0),
        ("project", 2),
        ("serving", 1),
    ]
    assert store.scope_usage()[0] == ScopeUsage("billing", "Invoices", 0)


def test_events_filter_by_key_actor_and_action(store: KeyStore) -> None:
    """Filters match parts of key (owner, name, public id), actor (or address) and action."""
    info = store.create_key("alice", "ci-deploy", ["project"]).info
    store.create_key("bob", "reports", ["project"])
    store.add_scope("billing")
    assert [e.key_name for e in store.events(key="CI-")] == ["ci-deploy"]
    assert [e.owner for e in store.events(key=info.public_id[:10])] == ["alice"]
    assert [e.owner for e in store.events(key="bob")] == ["bob"]
    assert [e.action for e in store.events(action="scope.")] == ["scope.add"]
    assert store.events(actor="nobody") == []
    assert len(store.events(actor="192.0.2")) == 3
    assert store.events(key="%") == [] and store.events(key="_") == []  # no LIKE wildcards
    assert [e.action for e in store.events(key="alice", action="create")] == ["key.create"]


def test_key_detail_names_who_made_the_key_and_lists_its_events(store: KeyStore) -> None:
    """The origin is the newest create or recreate; events are the key's own, newest first."""
    store.create_key("alice", "ci-deploy", ["project"])
    store.create_key("alice", "other", ["project"])
    store.set_key_scopes("alice", "ci-deploy", ["serving"])
    other_admin = KeyStore(store.engine, hasher=store.hasher, actor=Actor("bob-admin"))
    other_admin.recreate_key("alice", "ci-deploy")
    detail = store.key_detail("alice", "ci-deploy")
    assert detail.info == store.get_key("alice", "ci-deploy")
    assert detail.origin is not None
    assert (detail.origin.action, detail.origin.actor) == ("key.recreate", "bob-admin")
    assert [e.action for e in detail.events] == ["key.recreate", "key.rescope", "key.create"]
    with pytest.raises(KeyNotFoundError):
        store.key_detail("alice", "missing")
