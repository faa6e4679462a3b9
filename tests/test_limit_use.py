"""The use of each limit in its current window, as the CLI's `keys show` and the app read it."""

from __future__ import annotations

import json

import pytest

from apikey_tui.cli import main
from apikey_tui.limits import AppliedLimit, parse_limit
from apikey_tui.limits.model import key_subject, owner_subject
from apikey_tui.limits.redis_store import RedisLimitStore
from apikey_tui.limits.where import open_store
from apikey_tui.store import KeyStore
from apikey_tui.store import limit_use as limit_use_module
from tests.redis_server import RedisServer
from tests.test_cli import run

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


def test_near_limits_reads_at_most_a_bounded_number_and_says_so(store: KeyStore) -> None:
    """Past `most` limited keys (the app's NEAR_CHECK_MAX) the read stops and says there were
    more; with no bound it reads them all."""
    assert limit_use_module.NEAR_CHECK_MAX == 200
    for name in ("a", "b", "c"):
        store.create_key("di", name, ["project"], limits=[parse_limit(f"1/{LONG}")])
        spend(store, key_subject("di", name), f"1/{LONG}", 1)
    near = store.near_limits(most=2)
    assert [n.name for n in near.near] == ["a", "b"] and near.more
    every = store.near_limits(most=None)
    assert [n.name for n in every.near] == ["a", "b", "c"] and not every.more


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


def _three_keys_and_a_pool(store: KeyStore) -> None:
    """bo's keys at 10, 9 and 7 of 10; cy's pool at 4 of 5 (80 %); each in its window now."""
    for name, used in (("full", 10), ("nine", 9), ("seven", 7)):
        store.create_key("bo", name, ["project"], limits=[parse_limit(f"10/{LONG}")])
        spend(store, key_subject("bo", name), f"10/{LONG}", used)
    store.create_key("cy", "k", ["project"])
    store.set_owner_limits("cy", [parse_limit(f"5/{LONG}")])
    spend(store, owner_subject("cy"), f"5/{LONG}", 4)


def test_keys_near_limits_lists_those_at_the_threshold_and_exits_1(
    store: KeyStore, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys near-limits --all` lists keys and pools at 80 % or more, fullest first, and exits
    1; --threshold moves the line; without --all only the owner's own are read."""
    _three_keys_and_a_pool(store)
    code, out, err = run(capsys, database_url, "keys", "near-limits", "--all")
    assert (code, err) == (1, "")
    assert [line.split(":")[0] for line in out.splitlines()] == [
        "bo/full", "bo/nine", "cy (pool)",
    ]  # fmt: skip
    assert f"10/{LONG} (key): 9 used (90 %), window ends " in out
    assert f"5/{LONG} (owner's pool): 4 used (80 %)" in out
    code, out, _ = run(capsys, database_url, "keys", "near-limits", "--all", "--threshold", "95")
    assert code == 1 and out.startswith("bo/full:") and out.count("\n") == 1
    code, out, _ = run(capsys, database_url, "keys", "near-limits", "--owner", "cy", "--json")
    data = json.loads(out)
    assert code == 1 and data["threshold"] == 80 and data["unknown"] is None
    assert [(n["owner"], n["name"], n["of"], n["used"], n["count"]) for n in data["near"]] == [
        ("cy", None, "owner", 4, 5)
    ]


def test_keys_near_limits_is_silent_with_exit_0_when_none_is_near(
    store: KeyStore, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """None at the threshold: nothing on stdout or stderr, exit 0 (cron mails only output)."""
    _three_keys_and_a_pool(store)
    code, out, err = run(capsys, database_url, "keys", "near-limits", "--all", "--threshold", "100")
    assert code == 1 and out.startswith("bo/full:")  # 10 of 10 is 100 %
    spend(store, key_subject("bo", "unused"), f"10/{LONG}", 0)
    code, out, err = run(capsys, database_url, "keys", "near-limits")  # tester's keys: none
    assert (code, out, err) == (0, "", "")


def test_keys_near_limits_exits_2_when_the_store_of_counts_cannot_say(
    store: KeyStore,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the counts' Redis down the alert cannot be ruled out: one line (password masked)
    on stderr and exit 2, not a silent 0; --json says why in `unknown`."""
    _three_keys_and_a_pool(store)
    monkeypatch.setenv("APIKEY_TUI_LIMITS_URL", "redis://:hunter2@127.0.0.1:1/0")
    code, out, err = run(capsys, database_url, "keys", "near-limits", "--all")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("apikey-tui: limits' use unknown: ") and "hunter2" not in err
    code, out, _ = run(capsys, database_url, "keys", "near-limits", "--all", "--json")
    data = json.loads(out)
    assert code == 2 and data["near"] == [] and "hunter2" not in data["unknown"]


@pytest.mark.parametrize("given", ["0", "101", "eighty", "-5"])
def test_keys_near_limits_refuses_a_threshold_outside_1_to_100(
    sqlite_url: str, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """A threshold that is no percentage from 1 to 100 is a usage error: one line, exit 2."""
    KeyStore.open(sqlite_url).close()
    with pytest.raises(SystemExit) as stopped:
        main(["--database-url", sqlite_url, "keys", "near-limits", "--threshold", given])
    out, err = capsys.readouterr()
    assert (stopped.value.code, out, err.count("\n")) == (2, "", 1)
    assert "expected a percentage from 1 to 100" in err


def test_a_store_no_verifier_has_counted_in_is_unknown_never_a_silent_zero(
    store: KeyStore,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A store of counts no verifier has taken from (services count in Redis while the admin's
    shell lacks APIKEY_TUI_LIMITS_URL, or the reverse) says nothing of their use: the use is
    unknown, saying why, and `keys near-limits` exits 2, never a silent all-clear."""
    key = store.create_key("fay", "k", ["project"], limits=[parse_limit(f"10/{LONG}")])
    server = RedisServer()
    server.start()
    try:
        counts = RedisLimitStore(server.url)  # the services count here, and nearly all of it
        limit = key.info.limits[0]
        counts.take(AppliedLimit(key_subject("fay", "k"), limit).key, 10, limit.seconds, 9, "")
        read = store.limit_use(key.info)  # the admin's shell: the key database
        assert [u.used for u in read.uses] == [None]
        assert "no verifier has counted a limit in the key database" in read.unknown
        code, out, err = run(capsys, database_url, "keys", "near-limits", "--all")
        assert (code, out, err.count("\n")) == (2, "", 1) and "APIKEY_TUI_LIMITS_URL" in err
        monkeypatch.setenv("APIKEY_TUI_LIMITS_URL", server.url)  # where the services count
        code, out, err = run(capsys, database_url, "keys", "near-limits", "--all")
        assert (code, err) == (1, "") and out.startswith("fay/k: ")
    finally:
        server.cleanup()
    monkeypatch.delenv("APIKEY_TUI_LIMITS_URL")
    spend(store, key_subject("fay", "other"), f"10/{LONG}", 0)  # a verifier counted here
    assert [u.used for u in store.limit_use(key.info).uses] == [0]
