"""An older verifier never starts on a database using what it cannot judge: limits, networks."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from apikey_tui.db import make_engine, schema, upgrade_schema
from apikey_tui.errors import SchemaVersionError
from apikey_tui.limits.model import parse_limit
from apikey_tui.networks import SHADOW, network_rules
from apikey_tui.store import KeyStore
from tests.conftest import CHEAP


def starts(url: str, release_schema: int) -> bool:
    """Whether a verifier whose code is at `release_schema` accepts this database at start:
    its check (`schema.ensure(verifier=True)`), unchanged since schema version 5."""
    engine = make_engine(url, create=False)
    try:
        with engine.connect() as conn:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(schema, "SCHEMA_VERSION", release_schema)
                try:
                    schema.ensure(conn, create=False, verifier=True)
                except SchemaVersionError:
                    return False
            return True
    finally:
        engine.dispose()


def test_enforced_network_rules_keep_verifiers_before_networks_from_starting(
    database_url: str,
) -> None:
    """Once a key's network rules are enforced, a verifier from before network rules (schema 9)
    refuses the database at start (503) instead of letting the key in from anywhere; shadow
    rules, which refuse nothing, leave it working; this release's verifier starts either way."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).info
    assert starts(database_url, 9)
    store.set_networks_of_keys([key], network_rules(["10.0.0.0/8"], mode=SHADOW))
    assert starts(database_url, 9)
    store.set_networks_of_keys([key], network_rules(["10.0.0.0/8"]))
    assert not starts(database_url, 9) and starts(database_url, 10)
    store.close()


def test_an_owners_enforced_rules_keep_verifiers_before_networks_from_starting(
    database_url: str,
) -> None:
    """An owner's enforced rules (which each of its keys must pass) raise the floor the same."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    store.create_key("alice", "demo", ["project"])
    store.set_owner_networks("alice", network_rules([], ["192.0.2.0/24"]))
    assert not starts(database_url, 9) and starts(database_url, 10)
    store.close()


@pytest.mark.parametrize("whose", ["key", "owner"])
def test_limits_keep_verifiers_before_limits_from_starting(database_url: str, whose: str) -> None:
    """A key's limits or its owner's pool keep a verifier from before limits (schema 8) from
    starting; one that knows limits (9) starts."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).info
    assert starts(database_url, 8)
    if whose == "key":
        store.set_limits_of_keys([key], [parse_limit("10/s")])
    else:
        store.set_owner_limits("alice", [parse_limit("100/m")])
    assert not starts(database_url, 8) and starts(database_url, 9)
    store.close()


def test_db_upgrade_raises_the_floor_for_rules_an_earlier_release_stored(
    database_url: str,
) -> None:
    """`db upgrade` on a database whose enforced rules were stored before the floor rose with
    them (verifiers_from still 4) raises it, so no older verifier starts on it after."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).info
    store.set_networks_of_keys([key], network_rules(["10.0.0.0/8"]))
    with store.engine.begin() as conn:  # as an earlier release left it
        conn.execute(text("UPDATE apikey_tui_meta SET value = '4' WHERE key = 'verifiers_from'"))
    store.close()
    assert starts(database_url, 9)
    engine = make_engine(database_url)
    try:
        upgrade_schema(engine)
    finally:
        engine.dispose()
    assert not starts(database_url, 9) and starts(database_url, 10)


def test_a_batch_of_limits_raises_the_floor_with_one_statement(sqlite_url: str) -> None:
    """Giving 30 keys limits in one batch asks the meta row once, not once a key."""
    from sqlalchemy import event

    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [store.create_key("alice", f"k{n}", ["project"]).info for n in range(30)]
    statements: list[str] = []
    event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]), named=False
    )
    store.set_limits_of_keys(keys, [parse_limit("10/s")])
    assert sum("apikey_tui_meta" in s and s.startswith("UPDATE") for s in statements) == 1
    assert not starts(sqlite_url, 8)
    store.close()


def test_db_upgrade_says_which_older_services_it_now_turns_away(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db upgrade` on a database already at this schema (0.9.0's) whose enforced rules were
    stored before the floor rose with them raises the floor and says which services now answer
    503 when they start, instead of only "already at schema version 11"; run again, it has
    nothing more to say about them."""
    from apikey_tui.cli import main

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).info
    store.set_networks_of_keys([key], network_rules(["10.0.0.0/8"]))
    with store.engine.begin() as conn:  # as 0.9.0 left it
        conn.execute(text("UPDATE apikey_tui_meta SET value = '4' WHERE key = 'verifiers_from'"))
    store.close()
    assert main(["--database-url", database_url, "db", "upgrade"]) == 0
    err = capsys.readouterr().err
    assert "already at schema version" in err
    assert "network rules in enforce mode" in err and "before 0.8.0" in err and "503" in err
    assert main(["--database-url", database_url, "db", "upgrade"]) == 0
    assert "503" not in capsys.readouterr().err


def _floor_lost(store: KeyStore) -> None:
    """Put 'verifiers_from' back to 4, as a database from before the floor has it."""
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE apikey_tui_meta SET value = '4' WHERE key = 'verifiers_from'"))


def test_every_other_path_that_stores_limits_or_enforced_rules_raises_the_floor(
    sqlite_url: str,
) -> None:
    """A key created with limits or enforced rules, an undo that puts them back, and an owner's
    shadow rules switched to enforce each raise the floor, as set-limits and set-networks do."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    store.create_key("alice", "a", ["project"], limits=[parse_limit("5/m")])
    assert not starts(sqlite_url, 8) and starts(sqlite_url, 9)
    store.create_key("alice", "b", ["project"], networks=network_rules(["10.0.0.0/8"]))
    assert not starts(sqlite_url, 9)
    key = store.get_key("alice", "b")
    lifted = store.set_networks_of_keys([key], None)
    _floor_lost(store)
    store.undo(lifted)  # the rules come back: so does the floor
    assert not starts(sqlite_url, 9)
    _floor_lost(store)
    done = store.set_owner_limits("bob", [parse_limit("1/h")])
    lifted_pool = store.set_owner_limits("bob", [])
    _floor_lost(store)
    store.undo_owner_limits(lifted_pool)
    assert not starts(sqlite_url, 8) and done.owner == "bob"
    _floor_lost(store)
    store.set_owner_networks("carol", network_rules(["10.0.0.0/8"], mode=SHADOW))
    assert starts(sqlite_url, 9)
    store.set_owner_networks("carol", network_rules(["10.0.0.0/8"]))
    assert not starts(sqlite_url, 9)
    store.close()
