"""Limits wired into the verifier: the decision after the scopes, 429s, owners' pools, changes,
usage, the async path, and two serve-auth processes (two hosts) counting in one Redis."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import pytest

from apikey_tui.cli import main
from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    InvalidKeyError,
    LimitsUnavailableError,
    RateLimitedError,
)
from apikey_tui.limits import parse_limit
from apikey_tui.store import CreatedKey, KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, eventually
from tests.redis_server import RedisServer
from tests.test_proxies import Process, call
from tests.throwaway_postgres import free_port

# A long window: no test straddles its turn (windows are aligned to the Unix epoch).
LONG = "30d"


def header(key: str) -> str:
    return f"ApiKey {key}"


def wrong_secret(key: str) -> str:
    """The same public id with another secret (a valid checksum is not needed: it is refused)."""
    return key[:-6] + ("aaaaaa" if not key.endswith("aaaaaa") else "bbbbbb")


def passes(verifier: Verifier, key: str, scopes: tuple[str, ...] = ("project",)) -> bool:
    """Whether one request passes (False: refused by a limit)."""
    try:
        verifier.verify(header(key), scopes)
    except RateLimitedError:
        return False
    return True


def test_a_limited_key_gets_n_then_429_and_other_refusals_consume_nothing(
    store: KeyStore, database_url: str
) -> None:
    """401s and 403s spend nothing; then exactly N pass and the rest get a 429 naming the limit."""
    key = store.create_key("alice", "metered", ["project"], limits=[parse_limit(f"3/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        for _ in range(5):
            with pytest.raises(InvalidKeyError):
                verifier.verify(header(wrong_secret(key.plaintext)), ["project"])
            with pytest.raises(InsufficientScopeError):
                verifier.verify(header(key.plaintext), ["serving"])
        assert [passes(verifier, key.plaintext) for _ in range(6)] == [True] * 3 + [False] * 3
        with pytest.raises(RateLimitedError) as refused:
            verifier.verify(header(key.plaintext), ["project"])
        status, headers, body = refused.value.response("api")
        fields = dict(headers)
        assert status == 429 and "www-authenticate" not in fields
        assert int(fields["retry-after"]) >= 1
        assert fields["ratelimit-policy"] == f'"key:3/{LONG}";q=3;w={30 * 86400}'
        problem = json.loads(body)
        assert (problem["limit"], problem["limit_of"], problem["status"]) == (
            f"3/{LONG}",
            "key",
            429,
        )
        assert key.info.public_id not in body.decode() and "alice" not in body.decode()
    finally:
        verifier.close()


def test_a_429_answer_kept_for_reuse_is_the_one_built_afresh() -> None:
    """RateLimitedError keeps its answers: each equals one built anew by AuthError for the
    same fields, any field changed gives another, and a caller changing the headers it got
    changes nobody else's."""
    cases = [
        ("key", "3/30d", 3, 2592000, 37.0, "api"),
        ("owner", "3/30d", 3, 2592000, 37.0, "api"),
        ("key", "4/30d", 4, 2592000, 37.0, "api"),
        ("key", "3/30d", 3, 2592000, 38.0, "api"),
        ("key", "3/30d", 3, 2592000, 37.0, "other"),
    ]
    answers = []
    for of, limit, quota, window, retry, realm in cases * 2:
        error = RateLimitedError(of, limit, quota, window, retry)
        fresh = AuthError.response(error, realm)
        answer = error.response(realm)
        assert answer == fresh, (of, limit, retry, realm)
        answers.append(answer)
        answer[1].append(("x-added", "by a server"))
    # Each case its own answer, but the realm's: a 429 has no challenge to name it in.
    assert len({(a[0], tuple(a[1][:-1]), a[2]) for a in answers}) == len(cases) - 1
    again = RateLimitedError(*cases[0][:5]).response("api")
    assert ("x-added", "by a server") not in again[1]


def test_an_owners_pool_is_shared_and_a_change_reaches_a_running_verifier(
    store: KeyStore, database_url: str
) -> None:
    """A verifier that cached two keys learns of their owner's new pool (SQLite: next check;
    PostgreSQL: by push) and admits no more than the pool across both keys."""
    one = store.create_key("bob", "one", ["project"])
    two = store.create_key("bob", "two", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert passes(verifier, one.plaintext) and passes(verifier, two.plaintext)
        store.set_owner_limits("bob", [parse_limit(f"4/{LONG}")])
        assert eventually(lambda: bool(verifier.verify(header(one.plaintext)).limits))
        assert eventually(lambda: bool(verifier.verify(header(two.plaintext)).limits))
        admitted = sum(passes(verifier, k.plaintext) for _ in range(6) for k in (one, two))
        # The two checks that saw the pool arrive spent from it too.
        assert admitted == 4 - 2
    finally:
        verifier.close()


def test_a_lowered_limit_voids_the_tokens_leased_under_the_old_one(
    store: KeyStore, database_url: str
) -> None:
    """Tokens a verifier leased under a higher limit are not spent once the key's limit (or
    its owner's pool) is lowered: the running window admits no more than the new N."""
    key = store.create_key("gil", "k", ["project"], limits=[parse_limit(f"1000/{LONG}")])
    pooled = store.create_key("hal", "k", ["project"])
    store.set_owner_limits("hal", [parse_limit(f"1000/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        # One request each leases 16 tokens (1000 // 16 > 16) and spends one.
        assert passes(verifier, key.plaintext) and passes(verifier, pooled.plaintext)
        store.set_limits_of_keys([key.info], [parse_limit(f"2/{LONG}")])
        store.set_owner_limits("hal", [parse_limit(f"2/{LONG}")])
        for lowered in (key, pooled):
            seen: list[bool] = []

            def lowered_is_seen(lowered: CreatedKey = lowered, seen: list[bool] = seen) -> bool:
                try:
                    caller = verifier.verify(header(lowered.plaintext), ["project"])
                except RateLimitedError:
                    seen.append(False)
                    return True  # only the new limit can refuse: 1000 has room
                seen.append(True)
                return all(a.limit.count == 2 for a in caller.limits)

            assert eventually(lowered_is_seen)
            # The store counted the 16 granted before the change: 2 leave it no room, so
            # nothing more passes once the change is seen (the check that saw it included).
            admitted = sum(passes(verifier, lowered.plaintext) for _ in range(20)) + seen[-1]
            assert admitted == 0
    finally:
        verifier.close()


def test_a_raised_limit_admits_again_in_a_window_the_old_one_had_spent(
    store: KeyStore, database_url: str
) -> None:
    """A verifier that knows a key's window spent asks the store again once the limit is
    raised, rather than answering 429 until the window turns (up to 30 days for a quota)."""
    key = store.create_key("ida", "k", ["project"], limits=[parse_limit(f"2/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert [passes(verifier, key.plaintext) for _ in range(3)] == [True, True, False]
        store.set_limits_of_keys([key.info], [parse_limit(f"5/{LONG}")])
        assert eventually(lambda: passes(verifier, key.plaintext))
        admitted = 1 + sum(passes(verifier, key.plaintext) for _ in range(5))
        assert admitted == 5 - 2
    finally:
        verifier.close()


def test_limit_changes_are_audited_with_their_actor_and_undone(store: KeyStore) -> None:
    """Setting a key's or an owner's limits records its actor; undo puts them back exactly."""
    key = store.create_key("carol", "k", ["project"], limits=[parse_limit("10/s")])
    batch = store.set_limits_of_keys([key.info], [parse_limit("5/s"), parse_limit("100/d")])
    assert [str(x) for x in batch.after[0].limits] == ["5/s", "100/d"]
    assert [str(x) for x in store.undo(batch).after[0].limits] == ["10/s"]
    done = store.set_owner_limits("carol", [parse_limit("1000/h")])
    store.undo_owner_limits(done)
    assert store.owner_limits("carol") == ()
    events = [(e.action, e.actor, e.detail) for e in store.events(4)]
    assert events[0][:2] == ("owner.limits", ACTOR.user)
    assert events[1] == ("owner.limits", ACTOR.user, "owner limits: 1000/h (were none)")
    assert events[3] == ("key.limits", ACTOR.user, "limits: 5/s 100/d (were 10/s)")


def test_a_429_is_counted_in_usage_as_its_own_kind(store: KeyStore, database_url: str) -> None:
    """Requests refused with 429 are kept apart from 403s and listed by the Usage reads."""
    key = store.create_key("dave", "k", ["project"], limits=[parse_limit(f"2/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert [passes(verifier, key.plaintext) for _ in range(5)] == [True, True] + [False] * 3
        verifier.flush()
    finally:
        verifier.close()
    usage = store.key_usage("dave", "k")
    assert usage.requests == 2 and usage.forbidden == ()
    assert usage.limited == ((f"key:2/{LONG}", 3),)
    assert [(a.name, a.limited) for a in store.usage_overview().limited] == [("k", 3)]


def test_keys_usage_text_names_the_429s(
    store: KeyStore, database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys usage` in text lists the requests refused with 429 by the limit that refused them."""
    key = store.create_key("dave", "k", ["project"], limits=[parse_limit(f"2/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert [passes(verifier, key.plaintext) for _ in range(5)] == [True, True] + [False] * 3
        verifier.flush()
    finally:
        verifier.close()
    assert main(["--database-url", database_url, "--owner", "dave", "keys", "usage", "k"]) == 0
    assert f"429 limit key:2/{LONG}: 3" in capsys.readouterr().out.splitlines()


def test_the_async_path_never_asks_the_store_on_the_loop_and_keeps_the_bound(
    store: KeyStore, database_url: str
) -> None:
    """cached() answers None when only the store can say; verify_async then admits exactly N."""
    key = store.create_key("erin", "k", ["project"], limits=[parse_limit(f"3/{LONG}")])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)

    async def one() -> bool:
        try:  # as the ASGI integrations do (Guard.check_async)
            if verifier.cached(header(key.plaintext), ["project"]) is None:
                await verifier.verify_async(header(key.plaintext), ["project"])
        except RateLimitedError:  # a spent window is known without the store: cached says so
            return False
        return True

    async def many() -> list[bool]:
        return [await one() for _ in range(6)]

    try:
        calls = verifier.restrictions.limiter.store_calls
        assert asyncio.run(many()) == [True] * 3 + [False] * 3
        assert verifier.restrictions.limiter.store_calls > calls
    finally:
        verifier.close()


def test_a_dead_redis_fails_closed_with_503_and_never_over_admits(tmp_path: Path) -> None:
    """With Redis killed the answer is 503 + Retry-After; restarted, the running window grants
    nothing more (its counts were lost), so the bound holds."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("fay", "k", ["project"], limits=[parse_limit(f"4/{LONG}")])
    store.close()
    server = RedisServer()
    server.start()
    verifier = Verifier.from_url(url, hasher=CHEAP, limits_url=server.url)
    try:
        assert passes(verifier, key.plaintext) and passes(verifier, key.plaintext)
        server.kill()
        with pytest.raises(LimitsUnavailableError) as down:
            verifier.verify(header(key.plaintext), ["project"])
        assert down.value.response("api")[0] == 503
        assert int(dict(down.value.response("api")[1])["retry-after"]) >= 1
        server.start()
        # Once the limiter asks again (after its retry interval), the window stays spent.
        assert eventually(lambda: _refused_by_limit(verifier, key.plaintext), seconds=10), (
            "the limiter never asked the restarted store"
        )
    finally:
        verifier.close()
        server.cleanup()


def _refused_by_limit(verifier: Verifier, key: str) -> bool:
    try:
        verifier.verify(header(key), ["project"])
    except RateLimitedError:
        return True
    except LimitsUnavailableError:
        return False
    raise AssertionError("a request passed after the store lost its counts")


def test_two_hosts_with_several_workers_admit_no_more_than_n_in_one_redis() -> None:
    """Two serve-auth servers (two hosts; one runs two workers) sharing one Redis admit at most
    N of a key's requests in its window, counted by the 200s they answer."""
    with tempfile.TemporaryDirectory(prefix="apikey-limits-") as name:
        folder = Path(name)
        url = f"sqlite:///{folder / 'keys.db'}"
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        key = store.create_key("gil", "k", ["project"], limits=[parse_limit(f"7/{LONG}")])
        store.close()
        server = RedisServer()
        server.start()
        hosts: list[Process] = []
        try:
            for n, workers in enumerate((2, 1)):
                port = free_port()
                command = [sys.executable, "-m", "apikey_tui", "serve-auth", "--port", str(port),
                           "--database-url", url, "--workers", str(workers),
                           "--limits-url", server.url]  # fmt: skip
                hosts.append(Process(f"host{n}", command, port, folder))
            statuses = [
                call(hosts[i % 2].port, "/auth?scope=project", key.plaintext).status
                for i in range(20)
            ]
            assert statuses.count(200) == 7, statuses
            assert set(statuses) == {200, 429}
        finally:
            for host in hosts:
                host.stop()
            server.cleanup()
