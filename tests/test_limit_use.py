"""The use of each limit in its current window, as the CLI's `keys show` and the app read it."""

from __future__ import annotations

import pytest

from apikey_tui.limits import AppliedLimit, parse_limit
from apikey_tui.limits.model import key_subject, owner_subject
from apikey_tui.limits.where import open_store
from apikey_tui.store import KeyStore
from apikey_tui.store import limit_use as limit_use_module

LONG = "30d"  # no test straddles a window's turn


def spend(store: KeyStore, subject: str, text: str, tokens: int) -> None:
    """Grant `tokens` of a limit's current window, as verifiers' leases do."""
    limit = parse_limit(text)
    counts, _ = open_store(store.engine, None, clock=store.clock)
    counts.take(AppliedLimit(subject, limit).key, limit.count, limit.seconds, tokens, "")


def test_a_keys_limits_and_its_owners_pool_each_show_their_use(store: KeyStore) -> None:
    """The key's own limits come first, then the owner's pool, each with the window's count."""
    key = store.create_key("ann", "k", ["project"], limits=[parse_limit(f"10/{LONG}")])
    store.set_owner_limits("ann", [parse_limit(f"50/{LONG}")])
    spend(store, key_subject("ann", "k"), f"10/{LONG}", 9)
    spend(store, owner_subject("ann"), f"50/{LONG}", 5)
    read = store.limit_use(key.info)
    assert read.unknown == ""
    assert [(str(u.limit), u.of, u.used, u.near) for u in read.uses] == [
        (f"10/{LONG}", "key", 9, True),
        (f"50/{LONG}", "owner", 5, False),
    ]
    assert all(u.window_ends is not None for u in read.uses)


def test_near_limits_lists_keys_and_pools_at_80_percent_fullest_first(store: KeyStore) -> None:
    """A key at 80 % or more of a limit is listed, fullest first; one below it is not."""
    for name, used in (("full", 10), ("eighty", 8), ("seventy", 7)):
        store.create_key("bo", name, ["project"], limits=[parse_limit(f"10/{LONG}")])
        spend(store, key_subject("bo", name), f"10/{LONG}", used)
    store.create_key("cy", "other", ["project"], limits=[parse_limit(f"10/{LONG}")])
    store.set_owner_limits("cy", [parse_limit(f"4/{LONG}")])
    spend(store, owner_subject("cy"), f"4/{LONG}", 4)
    near = store.near_limits()
    assert [(n.owner, n.name, n.use.used) for n in near.near] == [
        ("bo", "full", 10),
        ("cy", None, 4),
        ("bo", "eighty", 8),
    ]
    assert not near.more and near.unknown == ""
    assert [n.name for n in store.near_limits(owner="bo").near] == ["full", "eighty"]


def test_near_limits_reads_at_most_a_bounded_number_and_says_so(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past NEAR_CHECK_MAX limited keys the read stops and says there were more."""
    monkeypatch.setattr(limit_use_module, "NEAR_CHECK_MAX", 2)
    for name in ("a", "b", "c"):
        store.create_key("di", name, ["project"], limits=[parse_limit(f"1/{LONG}")])
        spend(store, key_subject("di", name), f"1/{LONG}", 1)
    near = store.near_limits()
    assert [n.name for n in near.near] == ["a", "b"] and near.more


def test_an_unreachable_store_of_counts_makes_the_use_unknown_never_an_error(
    store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the counts' Redis down, every use is None and one line says why (URL masked)."""
    monkeypatch.setenv("APIKEY_TUI_LIMITS_URL", "redis://:hunter2@127.0.0.1:1/0")
    key = store.create_key("eve", "k", ["project"], limits=[parse_limit("10/s")])
    read = store.limit_use(key.info)
    assert [u.used for u in read.uses] == [None]
    assert read.unknown and "hunter2" not in read.unknown
    assert store.near_limits().unknown
