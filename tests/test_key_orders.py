"""The table's computed orders (State, Expires, Scopes) and the filter's state words, in SQL.

On SQLite and PostgreSQL, on the fake clock: the database's order, keyset pages and positions
agree with a Python sort, and its state (a CASE on the clock's now, bound) with states.marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert

from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.store import SORTS, KeyQuery, KeyStore, states
from apikey_tui.store.ordering import NEVER
from apikey_tui.store.types import LEAK_REASON
from tests.conftest import ACTOR, CHEAP, FakeClock

KEY = KeyRow.__table__  # type: ignore[attr-defined]


@pytest.fixture
def clocked_store(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """A store on both backends whose clock is the fake one, with a third scope."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    store.add_scope("billing")
    yield store
    store.close()


def every_state(store: KeyStore, now: datetime, owner: str = "alice", count: int = 24) -> None:
    """count keys (fake hashes) in every state, some of each, with one to three scopes."""
    rows = []
    for n in range(count):
        kind = n % 8
        row: dict[str, Any] = {
            "owner": owner,
            "name": f"k-{n:02d}",
            "public_id": f"ak{owner[:3]}{n:013d}",
            "secret_hash": "not-a-hash",
            "created_at": now - timedelta(days=10 + n),
            "last_used_at": now - timedelta(hours=n) if n % 3 else None,
            # every row names every column: an executemany reads the first row's keys
            "expires_at": None,
            "old_public_id": None,
            "grace_until": None,
            "disabled_at": None,
            "disabled_reason": None,
        }
        if kind == 1:  # expired, some exactly now (expired from that second)
            row["expires_at"] = now - timedelta(hours=n // 8 % 2)
        elif kind == 2:  # soon, one exactly at the 14-day edge
            row["expires_at"] = now + (states.SOON if n == 2 else timedelta(days=n % 5 + 1))
        elif kind == 3:  # far
            row["expires_at"] = now + states.SOON + timedelta(seconds=1 + n)
        elif kind == 4:  # grace, one ending exactly now (over)
            row["old_public_id"] = f"akold{owner[:3]}{n:011d}"
            row["grace_until"] = now + timedelta(hours=n) if n > 4 else now
        elif kind == 5:
            row["disabled_at"], row["disabled_reason"] = now, "rotated out"
        elif kind == 6:
            row["disabled_at"], row["disabled_reason"] = now, LEAK_REASON + "ci.log:3"
        elif kind == 7:  # unused: exactly 90 days, or a second short of it
            row["created_at"] = now - states.UNUSED_AFTER + timedelta(seconds=n // 8 % 2)
            row["last_used_at"] = None
        rows.append(row)
    with store.engine.begin() as conn:
        conn.execute(insert(KeyRow), rows)
        ids = conn.execute(KEY.select().where(KEY.c.owner == owner)).all()
        scopes = [
            {"key_id": r.id, "scope": s}
            for i, r in enumerate(ids)
            for s in ("project", "serving", "billing")[: 1 + i % 3]
        ]
        conn.execute(insert(KeyScopeRow), scopes)


def python_order(now: datetime) -> dict[str, Any]:
    """Each sort as a Python key function (the table's order, written again the slow way)."""
    return {
        "owner": lambda k: (k.owner, k.name),
        "name": lambda k: (k.name, k.owner),
        "public_id": lambda k: k.public_id,
        "created": lambda k: (k.created_at, k.owner, k.name),
        "last_used": lambda k: (k.last_used_at is not None, k.last_used_at or now, k.owner, k.name),
        "state": lambda k: (states.urgency(k, now), k.expires_at or NEVER, k.owner, k.name),
        "expires": lambda k: (k.expires_at or NEVER, k.owner, k.name),
        "scopes": lambda k: (len(k.scopes), k.owner, k.name),
    }


def test_every_sort_both_ways_agrees_with_a_python_sort(
    clocked_store: KeyStore, clock: FakeClock
) -> None:
    """Every sort, both directions, one owner or all: windows, keyset pages, positions."""
    store, now = clocked_store, clock.now
    every_state(store, now)
    every_state(store, now, owner="bob", count=9)
    everything = store.list_keys()
    orders = python_order(now)
    assert set(orders) == set(SORTS)
    for owner in (None, "alice"):
        for sort in SORTS:
            for reverse in (False, True):
                query = KeyQuery(owner, "", sort, reverse)
                mine = [k for k in everything if owner is None or k.owner == owner]
                expected = sorted(mine, key=orders[sort], reverse=reverse)
                where = (owner, sort, reverse)
                assert store.key_window(query, 0, 100) == expected, where
                total = len(expected)
                assert store.key_window(query, 15, 6, total=total) == expected[15:21], where
                assert store.key_window(query, 0, 5, after=expected[9]) == expected[10:15]
                assert store.key_window(query, 0, 5, before=expected[9]) == expected[4:9]
                for index in (0, 7, 13, total - 1):
                    key = expected[index]
                    assert store.key_position(query, key.owner, key.name) == index, where


def test_the_state_order_is_by_urgency(clocked_store: KeyStore, clock: FakeClock) -> None:
    """Sorted by State: leaked, expired, soon (soonest first), grace, disabled, unused, active."""
    every_state(clocked_store, clock.now)
    keys = clocked_store.key_window(KeyQuery("alice", "", "state"), 0, 100)
    kinds = [states.marker(k, clock.now)[1] for k in keys]
    firsts = list(dict.fromkeys(kinds))
    assert firsts == list(states.URGENCY)
    soon = [k.expires_at for k in keys if states.marker(k, clock.now)[1] == states.SOON_KIND]
    assert soon == sorted(soon)  # type: ignore[type-var]


def test_the_sql_state_is_the_markers_at_every_edge(
    clocked_store: KeyStore, clock: FakeClock
) -> None:
    """At, a second before and a second after each key's edges, SQL and Python agree."""
    store = clocked_store
    every_state(store, clock.now)
    start = clock.now
    for shift in (timedelta(0), timedelta(seconds=-1), timedelta(seconds=1), timedelta(days=1)):
        clock.now = start + shift
        keys = store.list_keys("alice")
        for kind in states.URGENCY:
            word = states.WORDS[kind][0]
            found = {k.name for k in store.key_window(KeyQuery("alice", word), 0, 100)}
            named = states.kinds_named(word)
            held = {k.name for k in keys if set(named) & set(states.facts(k, clock.now))}
            assert found == held, (kind, shift)


def test_the_filter_finds_states_by_their_words(clocked_store: KeyStore, clock: FakeClock) -> None:
    """'dis', 'expir', 'soon', 'grace' find their keys ('dis' the leaked ones too: they are
    disabled); 'di' (too short) finds only names."""
    every_state(clocked_store, clock.now)
    clocked_store.create_key("alice", "disco", ["project"])
    now = clock.now

    def found(text: str) -> set[str]:
        return {k.name for k in clocked_store.key_window(KeyQuery("alice", text), 0, 100)}

    def of(*kinds: str) -> set[str]:
        keys = clocked_store.list_keys("alice")
        return {k.name for k in keys if set(kinds) & set(states.facts(k, now))}

    assert found("dis") == of(states.DISABLED, states.LEAKED) | {"disco"}  # leaked: disabled too
    assert found("DISABLED") == of(states.DISABLED, states.LEAKED)
    assert found("expir") == of(states.EXPIRED, states.SOON_KIND)
    assert found("soon") == of(states.SOON_KIND)
    assert found("grace") == of(states.GRACE) and found("leaked") == of(states.LEAKED)
    assert found("di") == {"disco"}


def test_the_owner_list_counts_each_owners_keys(clocked_store: KeyStore, clock: FakeClock) -> None:
    """owner_counts names each owner that has keys, by name, with how many."""
    every_state(clocked_store, clock.now, count=5)
    every_state(clocked_store, clock.now, owner="bob", count=2)
    assert clocked_store.owner_counts() == [("alice", 5), ("bob", 2)]


def test_span_rounds_to_the_nearest_unit() -> None:
    """Right after 3 days the span reads 3d; 23h40m reads 1d; 13h stays 13h, 20h59m is 21h."""
    assert states.span(timedelta(days=3) - timedelta(seconds=5)) == "3d"
    assert states.span(timedelta(hours=23, minutes=40)) == "1d"
    assert states.span(timedelta(hours=13)) == "13h"
    assert states.span(timedelta(hours=20, minutes=59)) == "21h"
    assert states.span(timedelta(seconds=40)) == "40s"


@pytest.mark.parametrize("text", ["disabled", "dis", "leaked", "active", "di"])
def test_keys_list_filter_finds_states_as_the_app_does(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, text: str
) -> None:
    """keys list --filter WORD finds the keys the app's filter finds for a state word."""
    from tests.test_cli import run

    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
    store.create_key("alice", "ci", ["project"])
    store.create_key("alice", "off", ["project"])
    store.create_key("bob", "leaky-disco", ["project"])
    store.disable_key("alice", "off", "rotated out")
    store.disable_key("bob", "leaky-disco", LEAK_REASON + "ci.log:3")
    in_app = {(k.owner, k.name) for k in store.key_window(KeyQuery(None, text), 0, 100)}
    store.close()
    code, out, _ = run(capsys, sqlite_url, "keys", "list", "--all", "--filter", text, "--json")
    assert code == 0 and in_app
    assert {(k["owner"], k["name"]) for k in json.loads(out)} == in_app


def test_a_state_word_finds_a_key_the_state_cell_shows_otherwise(
    clocked_store: KeyStore, clock: FakeClock
) -> None:
    """A key rotated with a grace that also expires in 3 days shows '⚠ 3d left', yet 'grace'
    finds it (its old secret still works), as 'soon' does; 'active' finds neither state."""
    store = clocked_store
    store.create_key("alice", "staging-b", ["project"], expires=timedelta(days=10))
    store.rotate_key("alice", "staging-b", grace=timedelta(hours=1))
    store.set_expiry("alice", "staging-b", timedelta(days=3))
    store.create_key("alice", "plain", ["project"])
    key = store.get_key("alice", "staging-b")
    assert states.marker(key, clock.now) == ("⚠ 3d left", states.SOON_KIND)

    def found(text: str) -> list[str]:
        return [k.name for k in store.key_window(KeyQuery("alice", text), 0, 100)]

    assert found("grace") == ["staging-b"] and found("soon") == ["staging-b"]
    assert found("active") == ["plain"]
