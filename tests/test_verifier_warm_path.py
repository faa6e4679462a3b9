"""The warm path's budget: a remembered key costs a few Python calls, counted (never timed)."""

from __future__ import annotations

import gc
import itertools
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from apikey_tui import keyformat
from apikey_tui.clock import system_clock
from apikey_tui.errors import InvalidKeyError, VerifierUnavailableError
from apikey_tui.integrations.routes import route
from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier, last_used
from apikey_tui.verifier import checker as checker_module
from apikey_tui.verifier.freshness import CommitFreshness
from apikey_tui.verifier.key_index import KeyIndex, Verdict
from apikey_tui.verifier.last_used import LastUsedWriter
from tests.conftest import CHEAP, FakeClock


def python_calls(call: Callable[[], object]) -> list[str]:
    """The Python functions (not C ones) that run during call, in order, by qualified name."""
    names: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            names.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return names[1:]  # call itself left out


@pytest.fixture
def warm(sqlite_url: str) -> Iterator[tuple[Verifier, str]]:
    """A verifier on SQLite and the header of a key it has verified (the key is remembered)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    header = f"ApiKey {key}"
    assert checker.verify(header, ("project",)).key_name == "ci"
    checker.verify(header, ("project",))  # the usage tally made: the steady state
    yield checker, header
    checker.close()


def test_a_warm_verify_is_four_python_calls(warm: tuple[Verifier, str]) -> None:
    """A remembered key's verify runs verify, the memory lookup, the freshness test and the
    scope test: no context manager, generator or deadline (those doubled its cost)."""
    checker, header = warm
    hits = checker.stats.hits
    calls = python_calls(lambda: checker.verify(header, ("project",)))
    assert calls == [
        "Verifier.verify",
        "Verifier._warm",
        "CommitFreshness.generation",
        "Verifier.authorize",
    ]
    assert checker.stats.hits == hits + 1


def test_a_warm_identify_and_cached_take_the_same_path(warm: tuple[Verifier, str]) -> None:
    """identify (DRF) and cached (ASGI, FastAPI) answer a remembered key by the same few calls."""
    checker, header = warm
    assert python_calls(lambda: checker.identify(header)) == [
        "Verifier.identify",
        "Verifier._warm",
        "CommitFreshness.generation",
    ]
    assert python_calls(lambda: checker.cached(header, ("project",))) == [
        "Verifier.cached",
        "Verifier._warm",
        "CommitFreshness.generation",
        "Verifier.authorize",
    ]


def test_the_wsgi_middleware_adds_few_calls_to_a_warm_check(warm: tuple[Verifier, str]) -> None:
    """A WSGI request with a remembered key costs the middleware a handful of calls around the
    verifier's four (it paid eleven more through the cold path's machinery)."""
    checker, header = warm
    app = ApiKeyWSGIMiddleware(lambda environ, start: [b"ok"], checker, [route("/", "project")])
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_AUTHORIZATION": header}
    start: Any = None  # never called: the key passes
    assert app(environ, start) == [b"ok"]
    calls = python_calls(lambda: app(environ, start))
    assert len(calls) <= 10, calls
    assert "Verifier._answer" not in calls


def test_a_re_read_of_a_changed_key_is_a_bounded_number_of_python_calls(
    warm: tuple[Verifier, str],
) -> None:
    """A remembered key an admin just changed is re-read (the change log, then the key) and
    trusted again without argon2 in at most 90 Python calls (issue 31: it took 154, a
    quarter of them asking SQLAlchemy whether anything listens to the two reads)."""
    checker, header = warm
    store = KeyStore.open(checker._engine.url.render_as_string(hide_password=False), hasher=CHEAP)
    try:
        for scopes in (["project", "serving"], ["project"]):  # a cached reader, then counted
            store.set_key_scopes("alice", "ci", scopes)
            calls = python_calls(lambda: checker.verify(header, ("project",)))
        assert "CredentialReads.changes_since" in calls and "CredentialReads.credential" in calls
        assert len(calls) <= 90, calls
        assert checker.stats.argon2 == 1 and checker.stats.revalidated == 2
        # A key read once per check, and the presented secret fingerprinted once per check.
        assert calls.count("fingerprint") == 1
    finally:
        store.close()


def test_a_freshness_failure_on_the_warm_path_is_one_counted_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remembered key whose database file was removed is refused with 503, counted once."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()
    monkeypatch.setattr(CommitFreshness, "PLACE_CHECK", 0.0)  # look at every check
    checker = Verifier.from_url(url, hasher=CHEAP)
    try:
        checker.verify(f"ApiKey {key}")
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"keys.db{suffix}").unlink(missing_ok=True)
        for check in (checker.verify, checker.identify):
            with pytest.raises(VerifierUnavailableError):
                check(f"ApiKey {key}")
        assert checker.stats.unavailable == 2
    finally:
        checker.close()


def _objects_per_key(checker: Verifier) -> float:
    """Objects the cache holds per remembered key: each counted once, shared ones (an owner,
    a scope set, an epoch, the terms keys alike hold) left out."""
    shared = {id(checker._last_used.epoch), id(None)}
    for entry in checker._entries.values():
        shared |= {id(entry.owner), id(entry.scopes), id(entry.meta), id(entry.limits)}
        shared |= {id(scope) for scope in entry.scopes}
        if entry._terms.heads is not None:  # the verifier's kind of terms, shared
            shared.add(id(entry._terms))
    seen: set[int] = set()
    for public_id, entry in checker._entries.items():
        parts = [public_id, entry, entry.key_name, entry.public_id, entry._terms]
        parts += [getattr(entry, name) for cls in type(entry).__mro__
                  for name in getattr(cls, "__slots__", ())]  # fmt: skip
        seen |= {id(part) for part in parts if id(part) not in shared}
    return len(seen) / len(checker._entries)


def test_a_remembered_key_costs_four_objects(sqlite_url: str) -> None:
    """Each verified key is a digest, its entry (which is its caller) and the caller's two
    strings: the cache is keyed by the caller's own id string, no key carries a timestamp, and
    the stored fingerprint (not a tag of the argon2 hash) tells a recreated key (it held 8,
    then 6: an entry and a caller apart, then 5: a hash tag)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(20)]
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    try:
        for key in keys:
            checker.verify(f"ApiKey {key}")
        assert checker.cache_size() == 20
        assert _objects_per_key(checker) == 4
    finally:
        checker.close()


def _ours() -> int:
    """Objects the collector tracks whose type is this project's, or a usage counter.

    type(), never isinstance(): isinstance asks an object's __class__, which makes one of
    Django's lazy objects (another test's, in this worker) set itself up."""
    return sum(
        str(type(o).__module__).startswith("apikey_tui.") or type(o) is itertools.count
        for o in gc.get_objects()
    )


@pytest.mark.parametrize("record", [True, False])
def test_a_remembered_key_adds_one_object_the_collector_tracks(
    sqlite_url: str, record: bool
) -> None:
    """Once its use is recorded (a flush read the tallies), a verified key leaves one object of
    ours behind, its entry, with usage recording on or off (it left four: an entry, a caller,
    a usage tally and its counter)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(100)]
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP, record_usage=record)
    try:
        for key in keys[:20]:  # threads and the writers' objects are made once, not per key
            checker.verify(f"ApiKey {key}", ("project",))
        checker.flush()
        gc.collect()
        before = _ours()
        for key in keys[20:]:
            checker.verify(f"ApiKey {key}", ("project",))
        checker.flush()
        gc.collect()
        assert checker.cache_size() == 100
        assert (_ours() - before) / 80 < 1.5  # a few made once besides
    finally:
        checker.close()


def test_a_key_is_noted_as_used_once_per_epoch(warm: tuple[Verifier, str]) -> None:
    """A remembered key's use is noted for last_used_at once per epoch of the writer, not per
    request; a new epoch notes it again."""
    checker, header = warm
    writer = checker._last_used
    writer.flush()
    checker.verify(header)
    assert writer.pending == {}  # noted when it was verified, in this epoch
    writer.epoch = object()  # what the writer's thread does every minute or more
    checker.verify(header)
    checker.verify(header)
    assert len(writer.pending) == 1


def test_the_writer_moves_the_epoch_off_the_request_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last-used writer's thread replaces the epoch once EPOCH seconds have passed."""
    monkeypatch.setattr(last_used, "EPOCH", 0.0)
    writer = LastUsedWriter(lambda pending: None, interval=0.01, clock=system_clock)
    first = writer.epoch
    writer.note("akexample")  # starts the thread
    try:
        for _ in range(500):
            if writer.epoch is not first:
                break
            threading.Event().wait(0.01)
        assert writer.epoch is not first
    finally:
        writer.close()


def test_keys_noted_within_a_second_wait_under_one_time_and_a_failed_write_keeps_them() -> None:
    """The last-used writer keeps one datetime for the keys it notes within a second (a list
    slot a key, not a dict entry and a datetime each), later notes win, and a failed write
    keeps every key with its time for the next."""
    clock = FakeClock()
    written: list[Mapping[str, datetime]] = []

    def record(pending: Mapping[str, datetime]) -> None:
        written.append(dict(pending))
        if len(written) == 1:
            raise OSError("database away")

    writer = LastUsedWriter(record, interval=3600, clock=clock)
    start = clock()
    for n in range(100):
        writer.note(f"ak{n}")
        clock.advance(timedelta(milliseconds=5))  # 0.5 s in all
    clock.advance(timedelta(seconds=2))
    writer.note("ak0")
    assert len({id(when) for when in writer.pending.values()}) == 2
    writer.flush()  # fails: kept
    writer.note("ak200")
    writer.flush()
    writer.close()
    assert written[1] == {
        **{f"ak{n}": start for n in range(1, 100)},
        "ak0": start + timedelta(seconds=2.5),
        "ak200": start + timedelta(seconds=2.5),
    }


def test_only_the_usual_spelling_is_hashed_as_a_remembered_key(warm: tuple[Verifier, str]) -> None:
    """The warm path hashes the whole header: another spelling of the scheme is answered from
    memory by the full check (no key read, no argon2), another scheme of the same length, or
    the key with anything around it, finds no entry."""
    checker, header = warm
    key = header.removeprefix("ApiKey ")
    cold, argon2 = checker.stats.cold, checker.stats.argon2
    for spelling in (f"apikey {key}", f"APIKEY  {key}", f" ApiKey {key}"):
        assert checker.verify(spelling).key_name == "ci"
    assert (checker.stats.cold, checker.stats.argon2) == (cold, argon2)
    for other in (f"Bearer {key}", f"ApiKey {key} ", f"ApiKey {key}x", key, f"ApiKey{key}"):
        assert checker.cached(other) is None


@pytest.mark.parametrize("how", ["verify", "identify", "cached"])
def test_every_warm_entry_point_refuses_at_the_exact_second_and_sees_every_commit(
    sqlite_url: str, clock: FakeClock, how: str
) -> None:
    """verify and identify carry the memory lookup inline, cached calls it: each answers a
    remembered key from memory until its expiry's exact second, and none once a commit (by
    another connection) disabled it, as the full check would."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, clock=clock)
    expiring = store.create_key("alice", "ci", ["project"], expires=timedelta(seconds=60))
    other = store.create_key("alice", "other", ["project"])
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP, clock=clock)
    check = getattr(checker, how)

    def from_memory(key: str) -> bool:
        hits = checker.stats.hits
        try:
            answered = check(f"ApiKey {key}") is not None
        except InvalidKeyError:
            answered = False
        assert checker.stats.hits == hits + answered
        return answered

    try:
        for key in (expiring, other):
            checker.verify(f"ApiKey {key.plaintext}")
        clock.at(59.999)
        assert from_memory(expiring.plaintext)
        clock.at(60)
        assert not from_memory(expiring.plaintext)
        assert from_memory(other.plaintext)
        store.disable_key("alice", "other")
        assert not from_memory(other.plaintext)
    finally:
        checker.close()
        store.close()


def test_a_wrong_secret_under_a_remembered_id_leaves_the_key_remembered(
    warm: tuple[Verifier, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong secret presented under a cached key's public id (ids are public) while the key
    index cannot vouch for it is refused without evicting the key: its next request is still
    answered from memory, with no second argon2 (the refusal used to drop the entry, so
    anyone could make a service spend argon2 on a key again while its index loaded)."""
    checker, header = warm
    public_id = header.removeprefix("ApiKey ")[: keyformat.ID_LENGTH]
    forged = keyformat.generate(public_id)[1]  # a valid checksum, another secret
    argon2 = checker.stats.argon2
    with monkeypatch.context() as patched:
        patched.setattr(KeyIndex, "judge", lambda self, *args: (Verdict.UNSURE, None))
        with pytest.raises(InvalidKeyError):
            checker.verify(f"ApiKey {forged}")
    hits = checker.stats.hits
    assert checker.verify(header).public_id == public_id
    assert (checker.stats.hits, checker.stats.argon2) == (hits + 1, argon2)


def test_a_header_of_a_str_subclass_is_never_answered_by_its_own_hash(
    warm: tuple[Verifier, str],
) -> None:
    """The warm digest is the header's hash, and a str subclass may hash as it likes: one that
    hashes as the remembered key's header, under its id with another secret, is refused (the
    warm path digests only an exact str), while a subclass holding the real key still passes."""
    checker, header = warm
    public_id = header.removeprefix("ApiKey ")[: keyformat.ID_LENGTH]
    forged = keyformat.generate(public_id)[1]  # a valid checksum, another secret

    class Rigged(str):
        def __hash__(self) -> int:
            return hash(header)

    with pytest.raises(InvalidKeyError):
        checker.verify(Rigged(f"ApiKey {forged}"))
    assert checker.cached(Rigged(f"ApiKey {forged}")) is None
    assert checker.verify(Rigged(header)).public_id == public_id


@pytest.mark.parametrize("how", ["verify", "identify"])
def test_a_str_subclass_holding_a_remembered_key_is_answered_without_a_key_read(
    warm: tuple[Verifier, str], how: str
) -> None:
    """A str subclass header in the usual spelling skips the warm path's own hash, but the full
    check answers it from memory by the exact string it rebuilds, as it does other spellings."""
    checker, header = warm

    class Text(str):
        pass

    cold, argon2 = checker.stats.cold, checker.stats.argon2
    for _ in range(3):
        assert getattr(checker, how)(Text(header)).key_name == "ci"
    assert (checker.stats.cold, checker.stats.argon2) == (cold, argon2)


def test_two_keys_checked_at_once_never_share_an_answer_whatever_their_digests(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache's digest has 64 bits, so it is not what a check in flight is joined by: with
    every digest made equal, a second key checked while the first one's read is held gets its
    own caller (joined by digest, it waited for the first key's and was answered with it)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    first = store.create_key("alice", "first", ["project"]).plaintext
    second = store.create_key("bob", "second", ["project"]).plaintext
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    monkeypatch.setattr(checker_module, "header_digest", lambda header: 0)
    inside, release = threading.Event(), threading.Event()
    read = checker._source.credential
    first_id = first[: keyformat.ID_LENGTH]

    def held(public_id: str) -> Any:
        if public_id == first_id:
            inside.set()
            release.wait(10)
        return read(public_id)

    monkeypatch.setattr(checker._source, "credential", held)
    answers: dict[str, str] = {}
    worker = threading.Thread(
        target=lambda: answers.update(first=checker.verify(f"ApiKey {first}").owner)
    )
    worker.start()
    letting_go = threading.Timer(2.0, release.set)  # a joined check would wait for this
    try:
        assert inside.wait(10)
        letting_go.start()
        answers["second"] = checker.verify(f"ApiKey {second}").owner
    finally:
        release.set()
        letting_go.cancel()
        worker.join(10)
        checker.close()
    assert answers == {"first": "alice", "second": "bob"}
