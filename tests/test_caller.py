"""The Caller services hold, and what a remembered key costs the verifier's cache (issue 31)."""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError

import pytest

from apikey_tui.errors import RateLimitedError
from apikey_tui.hashing import SecretHasher
from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from apikey_tui.verifier import checker as checker_module

CHEAP = SecretHasher("cheapest")
ID = "ak" + "a" * 16


def test_a_caller_reads_as_the_fields_it_was_made_with() -> None:
    """A Caller made by hand shows its owner, name, id and scopes, and no limits, rules or
    metadata unless given."""
    caller = Caller("alice", "ci", ID, frozenset({"project"}))
    assert (caller.owner, caller.key_name, caller.public_id) == ("alice", "ci", ID)
    assert caller.scopes == frozenset({"project"})
    assert (caller.limits, caller.networks, caller.leases, dict(caller.meta)) == ((), None, (), {})
    assert Caller("a", "b", ID, frozenset(), meta={"team": "x"}).meta == {"team": "x"}


def test_callers_compare_by_owner_name_id_and_scopes() -> None:
    """Equal when owner, name, id and scopes are; equal callers hash alike; anything else
    differs, whatever their limits or metadata."""
    one = Caller("alice", "ci", ID, frozenset({"project"}))
    same = Caller("alice", "ci", ID, frozenset({"project"}), meta={"team": "x"})
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    for other in (
        Caller("bob", "ci", ID, frozenset({"project"})),
        Caller("alice", "cd", ID, frozenset({"project"})),
        Caller("alice", "ci", "ak" + "b" * 16, frozenset({"project"})),
        Caller("alice", "ci", ID, frozenset({"serving"})),
    ):
        assert one != other
    assert one != ("alice", "ci", ID, frozenset({"project"}))


def test_a_caller_is_read_only() -> None:
    """No field of a caller can be set or deleted, its scopes included."""
    caller = Caller("alice", "ci", ID, frozenset({"project"}))
    for name in ("owner", "key_name", "public_id", "scopes", "_terms", "anything"):
        with pytest.raises(FrozenInstanceError):
            setattr(caller, name, "x")
        with pytest.raises(FrozenInstanceError):
            delattr(caller, name)


def test_a_caller_shows_what_a_dataclass_showed() -> None:
    """repr shows the four compared fields, as the dataclass Caller did; match works by them."""
    caller = Caller("alice", "ci", ID, frozenset({"project"}))
    assert repr(caller) == (
        f"Caller(owner='alice', key_name='ci', public_id='{ID}', scopes=frozenset({{'project'}}))"
    )
    match caller:
        case Caller(owner, name, public_id, scopes):
            assert (owner, name, public_id, scopes) == ("alice", "ci", ID, frozenset({"project"}))


@pytest.fixture
def remembered(sqlite_url: str) -> tuple[Verifier, list[str]]:
    """A verifier that verified four keys of alice with scope project, and their headers."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(4)]
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    headers = [f"ApiKey {key}" for key in keys]
    for header in headers:
        checker.verify(header)
    return checker, headers


def test_a_remembered_key_holds_four_slots_and_a_60_bit_digest(
    remembered: tuple[Verifier, list[str]],
) -> None:
    """A cache entry (a Caller) holds four slots (64 bytes, where eleven took 128) and a digest
    under 2**60 (32 bytes, where 64 bits took 48); keys alike share one Terms."""
    checker, _headers = remembered
    try:
        entries = list(checker._entries.values())
        slots = [name for cls in type(entries[0]).__mro__ for name in getattr(cls, "__slots__", ())]
        assert len(slots) == 4
        assert all(0 <= entry.digest < 2**60 for entry in entries)
        assert len({id(entry._terms) for entry in entries}) == 1
    finally:
        checker.close()


def test_keys_sharing_terms_are_each_noted_once_an_epoch(
    remembered: tuple[Verifier, list[str]],
) -> None:
    """Keys that share their terms are noted for last_used_at each on its own use, once an
    epoch: one key's note does not count for another's (the terms' twin of the epoch)."""
    checker, headers = remembered
    writer = checker._last_used
    try:
        writer.flush()
        writer.epoch = object()  # what the writer's thread does every minute or more
        for header in (headers[0], headers[0], headers[1], headers[0]):
            checker.verify(header)
        noted = [header[len("ApiKey ") :][:18] for header in headers]
        assert writer._ids == noted[:2]  # each once, in order, the others not at all
        writer.flush()
        writer.epoch = object()
        for header in (headers[2], headers[0], headers[2]):
            checker.verify(header)
        assert writer._ids == [noted[2], noted[0]]
        assert checker._entries[noted[0]]._terms is checker._entries[noted[2]]._terms  # a twin
    finally:
        checker.close()


def test_a_copy_of_a_cached_caller_is_a_plain_caller(
    remembered: tuple[Verifier, list[str]],
) -> None:
    """A copy or a pickle of the caller the cache gave is an equal plain Caller, without the
    entry's digest (nothing of the key leaves the cache)."""
    checker, headers = remembered
    try:
        caller = checker.verify(headers[0])
        for made in (copy.copy(caller), copy.deepcopy(caller), pickle.loads(pickle.dumps(caller))):  # noqa: S301
            assert type(made) is Caller and made == caller
            assert not hasattr(made, "seal") and not hasattr(made, "digest")
    finally:
        checker.close()


def test_a_key_re_read_after_a_change_is_noted_in_the_epoch_of_its_use(
    remembered: tuple[Verifier, list[str]], sqlite_url: str
) -> None:
    """A key whose scopes an admin changed, used once in a new epoch (re-read without argon2),
    is noted for last_used_at in that epoch, as any use of it is."""
    checker, headers = remembered
    writer = checker._last_used
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    try:
        writer.flush()
        writer.epoch = object()  # a minute later: what the writer's thread does
        store.set_key_scopes("alice", "k0", ["project", "serving"])
        checker.verify(headers[0], ["serving"])
        assert checker.stats.revalidated == 1 and checker.stats.argon2 == 4
        assert writer._ids == [headers[0][len("ApiKey ") :][:18]]
        checker.verify(headers[0])  # noted once an epoch, the re-read's note counted
        assert len(writer._ids) == 1
    finally:
        store.close()
        checker.close()


def test_a_copy_of_a_limited_caller_is_held_to_its_limits(
    store: KeyStore, database_url: str
) -> None:
    """A copy or a pickle of a limited key's caller (without the verifier's leases) passed to
    authorize spends its limits as the cached caller does: N pass, then 429."""
    limit = [parse_limit("3/30d")]
    key = store.create_key("alice", "metered", ["project"], limits=limit)
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        caller = checker.verify(f"ApiKey {key.plaintext}", ["project"])  # one spent
        for made in (copy.copy(caller), pickle.loads(pickle.dumps(caller))):  # noqa: S301
            assert made.limits and not made.leases
        made = copy.copy(caller)
        checker.authorize(made, ["project"])
        checker.authorize(made, ["project"])
        with pytest.raises(RateLimitedError):
            checker.authorize(made, ["project"])
    finally:
        checker.close()


def test_a_key_alike_no_other_costs_one_terms_once_noted(sqlite_url: str) -> None:
    """Keys that share their terms with no other key (one key an owner) hold one Terms each
    once noted, as a key's own record did, not the terms and their twin of the epoch."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [store.create_key(f"owner{n}", "k", ["project"]).plaintext for n in range(50)]
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    try:
        for epoch in range(3):
            checker._last_used.epoch = object()  # the writer's thread, a minute apart
            for key in keys:
                checker.verify(f"ApiKey {key}")
            assert len(checker._last_used._ids) == 50 * (epoch + 1)  # each noted each epoch
        held = [entry._terms for entry in checker._entries.values()]
        held += checker._shared_terms.values()
        assert len({id(terms) for terms in held}) == 50
    finally:
        checker.close()


def test_the_kinds_a_cache_shares_are_kept_within_a_bound(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tables of kinds keys share (terms, metadata; scope sets by the same function) hold at
    most KINDS_MAX each, however many kinds keys bring; the keys still answer and share."""
    monkeypatch.setattr(checker_module, "KINDS_MAX", 5)
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [
        store.create_key(f"owner{n}", "k", ["project"], meta=[("n", str(n))]).plaintext
        for n in range(20)
    ]
    alike = [store.create_key("alice", f"a{n}", ["project"]).plaintext for n in range(3)]
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    try:
        for n, key in enumerate(keys):
            assert checker.verify(f"ApiKey {key}").meta == {"n": str(n)}
        for table in (checker._shared_terms, checker._metas):
            assert 0 < len(table) <= 5
        callers = [checker.verify(f"ApiKey {key}", ["project"]) for key in alike]
        assert len({id(caller._terms) for caller in callers}) == 1
    finally:
        checker.close()
