"""Network rules in the verifier: enforce refuses, shadow records, owners fence their keys, a
refusal consumes nothing, rules that cannot be read fail closed, and use teaches a proposal."""

from __future__ import annotations

import asyncio
import ipaddress
import json

import pytest
from sqlalchemy import text

from apikey_tui.db import make_engine
from apikey_tui.errors import (
    NETWORK_NOT_ALLOWED,
    InsufficientScopeError,
    NetworkNotAllowedError,
    RateLimitedError,
)
from apikey_tui.limits import parse_limit
from apikey_tui.networks import SHADOW, network_rules, parse_cidr
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, eventually
from tests.test_limits_verifier import LONG, header

INSIDE, OUTSIDE = "10.1.2.3", "203.0.113.9"


def outcome(verifier: Verifier, key: str, client: str | None, scopes: tuple[str, ...] = ()) -> str:
    """What one request gets: ok, network, scope or limit."""
    try:
        verifier.verify(header(key), scopes, client, "/orders")
    except NetworkNotAllowedError:
        return "network"
    except InsufficientScopeError:
        return "scope"
    except RateLimitedError:
        return "limit"
    return "ok"


def test_enforce_refuses_with_a_stable_problem_type_and_the_scope_challenge(
    store: KeyStore, database_url: str
) -> None:
    """Outside the allow list, inside a deny, or from an unknown address: 403 with the
    network-not-allowed type and an insufficient_scope challenge; inside: admitted."""
    rules = network_rules(["10.0.0.0/8", "2001:db8::/32"], ["10.9.0.0/16"])
    key = store.create_key("alice", "placed", ["project"], networks=rules)
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        got = {
            client: outcome(verifier, key.plaintext, client)
            for client in (INSIDE, "10.9.0.1", OUTSIDE, "2001:db8::5", "2001:db9::5", None, "x")
        }
        assert got == {
            INSIDE: "ok",
            "10.9.0.1": "network",
            OUTSIDE: "network",
            "2001:db8::5": "ok",
            "2001:db9::5": "network",
            None: "network",
            "x": "network",
        }
        with pytest.raises(NetworkNotAllowedError) as refused:
            verifier.verify(header(key.plaintext), (), OUTSIDE)
        status, headers, body = refused.value.response("api")
        problem = json.loads(body)
        assert status == 403 and problem["type"] == NETWORK_NOT_ALLOWED
        assert dict(headers)["www-authenticate"].startswith(
            'ApiKey realm="api", error="insufficient_scope"'
        )
        assert OUTSIDE not in body.decode() and key.info.public_id not in body.decode()
        assert verifier.stats.outcomes()["network"] == 6
    finally:
        verifier.close()


def test_a_network_refusal_consumes_no_limit_no_last_used_and_comes_before_scopes(
    store: KeyStore, database_url: str
) -> None:
    """Refused from outside: no token of the limit spent, last_used_at untouched, and no word
    about scopes; then exactly N pass from inside, and the refusals count as their own kind."""
    key = store.create_key(
        "bob",
        "k",
        ["project"],
        limits=[parse_limit(f"2/{LONG}")],
        networks=network_rules(["10.0.0.0/8"]),
    )
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        refused = [
            outcome(verifier, key.plaintext, OUTSIDE, s) for s in [("project",), ("admin",)] * 3
        ]
        assert refused == ["network"] * 6
        verifier.flush()
        assert store.get_key("bob", "k").last_used_at is None
        admitted = [outcome(verifier, key.plaintext, INSIDE, ("project",)) for _ in range(3)]
        assert admitted == ["ok", "ok", "limit"]
        verifier.flush()
        assert store.get_key("bob", "k").last_used_at is not None
    finally:
        verifier.close()
    use = store.network_use("bob", "k")
    refusals = [(r.network, r.route, r.requests, r.shadow) for r in use.refusals]
    assert refusals == [("203.0.113.0/24", "/orders", 6, False)]
    usage = store.key_usage("bob", "k")
    assert usage.requests == 2 and usage.forbidden == ()


def test_shadow_admits_and_records_and_enforce_then_refuses_exactly_those(
    store: KeyStore, database_url: str
) -> None:
    """In shadow every request passes and each would-be refusal is recorded with its network and
    route; switched to enforce, the same addresses are refused and no others."""
    clients = [INSIDE, "10.200.0.1", OUTSIDE, "198.51.100.4", "2001:db8::1", "::1"]
    key = store.create_key(
        "carol", "k", ["project"], networks=network_rules(["10.0.0.0/8"], mode=SHADOW)
    )
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert [outcome(verifier, key.plaintext, c) for c in clients] == ["ok"] * len(clients)
        assert verifier.stats.network_shadowed == 4
        verifier.flush()
        would = {r.network for r in store.network_use("carol", "k").refusals if r.shadow}
        assert would == {"203.0.113.0/24", "198.51.100.0/24", "2001:db8::/56", "::/56"}
        info = store.get_key("carol", "k")
        assert info.networks is not None
        store.set_networks_of_keys([info], info.networks.with_mode("enforce"))
        enforced = eventually(lambda: outcome(verifier, key.plaintext, OUTSIDE) == "network")
        assert enforced
        got = [outcome(verifier, key.plaintext, c) for c in clients]
        assert got == ["ok", "ok", "network", "network", "network", "network"]
    finally:
        verifier.close()


def test_an_owners_rules_fence_every_key_and_changes_reach_a_running_verifier(
    store: KeyStore, database_url: str
) -> None:
    """A cached key learns of its owner's new rules (SQLite: next check; PostgreSQL: by push);
    both sets must pass; lifting them admits again; every change is audited and undone."""
    key = store.create_key("dave", "k", ["project"], networks=network_rules(["10.0.0.0/8"]))
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        assert outcome(verifier, key.plaintext, "10.5.0.1") == "ok"
        done = store.set_owner_networks("dave", network_rules(["10.1.0.0/16"]))
        assert eventually(lambda: outcome(verifier, key.plaintext, "10.5.0.1") == "network")
        assert outcome(verifier, key.plaintext, INSIDE) == "ok"
        store.undo_owner_networks(done)
        assert eventually(lambda: outcome(verifier, key.plaintext, "10.5.0.1") == "ok")
    finally:
        verifier.close()
    batch = store.set_networks_of_keys([store.get_key("dave", "k")], None)
    assert batch.after[0].networks is None
    assert store.undo(batch).after[0].networks == network_rules(["10.0.0.0/8"])
    actions = [(e.action, e.actor) for e in store.events(5)]
    assert actions[:4] == [
        ("key.restore", ACTOR.user),
        ("key.networks", ACTOR.user),
        ("owner.networks", ACTOR.user),
        ("owner.networks", ACTOR.user),
    ]


@pytest.mark.parametrize("stored", ["shadow +10.0.0.1/8", "enforce", "allow 10.0.0.0/8", "+10/8"])
def test_rules_that_cannot_be_read_refuse_every_request(
    store: KeyStore, database_url: str, stored: str
) -> None:
    """A key whose stored rules are damaged is refused from everywhere (fail closed), in either
    mode, and so are the keys of an owner whose rules are damaged."""
    key = store.create_key("erin", "k", ["project"])
    other = store.create_key("fay", "k", ["project"])
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE apikey_tui_key SET networks = :n WHERE owner = 'erin'"), {"n": stored}
            )
            conn.execute(
                text("INSERT INTO apikey_tui_owner_network (owner, networks) VALUES ('fay', :n)"),
                {"n": stored},
            )
    finally:
        engine.dispose()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        for plaintext in (key.plaintext, other.plaintext):
            assert {outcome(verifier, plaintext, c) for c in (INSIDE, "10.0.0.1", "::1")} == {
                "network"
            }
    finally:
        verifier.close()
    assert store.get_key("erin", "k").networks is not None


def test_the_proposal_covers_every_recorded_network_and_nothing_wider(
    store: KeyStore, database_url: str
) -> None:
    """Use from 40 addresses in 12 networks: the proposal covers each address's /24 or /56, and
    the addresses it covers are exactly those networks; applying it starts in shadow mode."""
    key = store.create_key("gus", "k", ["project"])
    addresses = [f"10.0.{n}.{h}" for n in (0, 1, 2, 3, 7) for h in (1, 77, 200)]
    addresses += [f"192.0.2.{h}" for h in (5, 6)] + ["198.51.100.1", "203.0.113.250"]
    addresses += [f"2001:db8:0:{n:x}00::{h}" for n in (0, 1, 2, 0x10) for h in (1, 2)]
    addresses += ["2001:db8:ffff::1", "::1", "::ffff:10.0.9.9", "172.16.5.4", "172.16.4.4"]
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        for address in addresses:
            assert outcome(verifier, key.plaintext, address) == "ok"
        verifier.flush()
    finally:
        verifier.close()
    use = store.network_use("gus", "k", days=1)
    expected = {
        ipaddress.ip_network(f"{a}/{24 if '.' in a and ':' not in a else 56}", strict=False)
        for a in addresses
        if not a.startswith("::ffff:")
    } | {ipaddress.ip_network("10.0.9.0/24")}
    proposal = [ipaddress.ip_network(str(c)) for c in use.proposal]
    assert not use.more
    for network in expected:  # 100 % of the recorded addresses are covered
        assert any(
            network.subnet_of(p)  # type: ignore[arg-type]  # same version: checked first
            for p in proposal
            if p.version == network.version
        )
    covered = sum(p.num_addresses for p in proposal)
    assert covered == sum(n.num_addresses for n in expected)  # and nothing wider
    assert str(use.proposal[0]) == "10.0.0.0/22"
    rules = network_rules(use.proposal, mode=SHADOW)
    assert all(rules.fence.admits(parse_cidr(a).start) for a in addresses)


def test_shadow_recording_and_enforce_refusals_make_no_query_on_the_request_path(
    store: KeyStore, database_url: str
) -> None:
    """Once the key is warm, 200 would-be refusals and 200 refusals run no SQL statement: both
    ride the usage writer, which writes them at its flush."""
    from sqlalchemy import event

    shadowed = store.create_key(
        "hal", "s", ["project"], networks=network_rules(["10.0.0.0/8"], mode=SHADOW)
    )
    enforced = store.create_key("hal", "e", ["project"], networks=network_rules(["10.0.0.0/8"]))
    engine = make_engine(database_url, create=False)
    verifier = Verifier(engine, hasher=CHEAP)
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    try:
        assert outcome(verifier, shadowed.plaintext, INSIDE) == "ok"
        assert outcome(verifier, enforced.plaintext, INSIDE) == "ok"
        verifier.flush()
        event.listen(engine, "before_cursor_execute", count)
        for _ in range(200):
            assert outcome(verifier, shadowed.plaintext, OUTSIDE) == "ok"
            assert outcome(verifier, enforced.plaintext, OUTSIDE) == "network"
        event.remove(engine, "before_cursor_execute", count)
        # Reads of the change log woken by other tests' commits (xdist) are not ours to count.
        assert [s for s in statements if "apikey_tui_change" not in s] == []
        verifier.flush()
    finally:
        verifier.close()
    kinds = {(r.network, r.shadow, r.requests) for r in store.network_use("hal", "s").refusals}
    assert kinds == {("203.0.113.0/24", True, 200)}
    refused = {(r.network, r.shadow, r.requests) for r in store.network_use("hal", "e").refusals}
    assert refused == {("203.0.113.0/24", False, 200)}


def test_a_flood_of_refusals_to_distinct_routes_writes_a_bounded_number_of_rows(
    store: KeyStore, database_url: str
) -> None:
    """3,000 refused (and 3,000 would-be refused) requests, each to a route of its own, write at
    most 64 rows and one `*` row per key and kind, not a row per request."""
    enforced = store.create_key("ivy", "e", ["project"], networks=network_rules(["10.0.0.0/8"]))
    shadowed = store.create_key(
        "ivy", "s", ["project"], networks=network_rules(["10.0.0.0/8"], mode=SHADOW)
    )
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        for n in range(3000):
            key, expected = (enforced, "network"), (shadowed, "ok")
            for made, answer in (key, expected):
                try:
                    verifier.verify(header(made.plaintext), (), OUTSIDE, f"/orders/{n}")
                    got = "ok"
                except NetworkNotAllowedError:
                    got = "network"
                assert got == answer
        verifier.flush()
    finally:
        verifier.close()
    engine = make_engine(database_url, create=False)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT kind, count(*), sum(requests) FROM apikey_tui_usage"
                    " WHERE kind IN (4, 5) GROUP BY kind ORDER BY kind"
                )
            ).all()
    finally:
        engine.dispose()
    assert [(kind, requests) for kind, _, requests in rows] == [(4, 3000), (5, 3000)]
    assert all(count <= 65 for _, count, _ in rows), rows
    refusals = store.network_use("ivy", "e", days=1).refusals
    assert any(r.network == "*" for r in refusals)


def test_an_async_check_records_a_would_be_refusal_once_whatever_its_limit_answers(
    store: KeyStore, database_url: str
) -> None:
    """As the async integrations check (`cached`, then `verify_async` when a limit needs the
    store), a shadow mode's would-be refusal is counted and recorded once per request: when the
    limit needs the store, when it admits and when it refuses (429 from memory or the store)."""
    key = store.create_key(
        "dora",
        "k",
        ["project"],
        limits=[parse_limit(f"2/{LONG}")],  # a lease of one token: each request asks the store
        networks=network_rules(["10.0.0.0/8"], mode=SHADOW),
    )
    verifier = Verifier.from_url(database_url, hasher=CHEAP)

    async def request() -> str:
        head = header(key.plaintext)
        try:
            if verifier.cached(head, ("project",), OUTSIDE, "/orders") is None:
                await verifier.verify_async(head, ("project",), OUTSIDE, "/orders")
        except RateLimitedError:
            return "limit"
        return "ok"

    try:
        # the 4th is refused from memory: the store granted none in this window
        assert [asyncio.run(request()) for _ in range(4)] == ["ok", "ok", "limit", "limit"]
        assert verifier.stats.network_shadowed == 4
        verifier.flush()
    finally:
        verifier.close()
    [refusal] = store.network_use("dora", "k").refusals
    assert (refusal.network, refusal.requests, refusal.shadow) == ("203.0.113.0/24", 4, True)


def test_the_keys_of_an_owner_share_one_compiled_copy_of_its_rules(
    store: KeyStore, database_url: str
) -> None:
    """An owner's rules (up to 10,000 networks, a megabyte compiled) are parsed and compiled
    once for all of its keys a verifier holds, not once per key and per re-read."""
    fence = network_rules([f"10.{i // 128}.{i % 128 * 2}.0/24" for i in range(2000)])
    store.set_owner_networks("erin", fence)
    keys = [store.create_key("erin", f"k{i}", ["project"]).plaintext for i in range(3)]
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        callers = [verifier.verify(header(key), (), INSIDE) for key in keys]
        compiled = {id(c.networks.fences[-1]) for c in callers if c.networks is not None}
        assert len(compiled) == 1
    finally:
        verifier.close()
