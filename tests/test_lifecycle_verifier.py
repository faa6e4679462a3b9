"""The verifier and the key lifecycle: expiry and grace at the exact second, disable/enable."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta

from apikey_tui.errors import InvalidKeyError
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, FakeClock
from tests.test_verifier import header


def accepted(checker: Verifier, key: str) -> bool:
    """Whether the verifier accepts the key now (a refusal must be the plain 401)."""
    try:
        checker.verify(header(key))
    except InvalidKeyError:
        return False
    return True


def test_an_expired_key_is_refused_from_the_exact_second_even_when_cached(
    clocked: tuple[KeyStore, Verifier], clock: FakeClock
) -> None:
    """A key that expires at 60 s works at 59.999 s from the cache and is refused at 60 s."""
    store, checker = clocked
    key = store.create_key("alice", "demo", ["project"], expires=timedelta(seconds=60)).plaintext
    assert accepted(checker, key)
    clock.at(59.999)
    assert accepted(checker, key)
    assert checker.cache_size() == 1
    clock.at(60)
    assert not accepted(checker, key)
    clock.at(59)  # a clock that steps back does not revive a forgotten entry without a check
    assert accepted(checker, key)


def test_a_rotated_keys_old_secret_stops_at_the_end_of_its_grace(
    clocked: tuple[KeyStore, Verifier], clock: FakeClock
) -> None:
    """During a 30 s grace both secrets work; at 30 s the old one is refused, cached or not."""
    store, checker = clocked
    old = store.create_key("alice", "demo", ["project"]).plaintext
    assert accepted(checker, old)
    new = store.rotate_key("alice", "demo", grace=timedelta(seconds=30)).plaintext
    deadline = time.monotonic() + 15  # PostgreSQL: by push, or within the 1 s bound
    while not accepted(checker, new):
        assert time.monotonic() < deadline, "the rotated key's new secret was never accepted"
        time.sleep(0.05)
    assert accepted(checker, old)
    clock.at(29.999)
    assert accepted(checker, old)
    clock.at(30)
    assert not accepted(checker, old)
    assert accepted(checker, new)


def test_ending_the_grace_refuses_the_old_secret_at_once(
    clocked: tuple[KeyStore, Verifier], clock: FakeClock
) -> None:
    """--end-grace stops the previous secret at the next check (SQLite) or within the bound."""
    store, checker = clocked
    old = store.create_key("alice", "demo", ["project"]).plaintext
    store.rotate_key("alice", "demo", grace=timedelta(hours=24))
    assert accepted(checker, old)
    store.end_grace("alice", "demo")
    deadline = time.monotonic() + 15
    while accepted(checker, old):
        assert time.monotonic() < deadline, "the ended grace never reached the verifier"
        time.sleep(0.05)


CHECKER = """
import sys
from apikey_tui.errors import InvalidKeyError
from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier
verifier = Verifier.from_url(sys.argv[1], hasher=SecretHasher("cheapest"))
for line in sys.stdin:
    try:
        verifier.verify("ApiKey " + line.strip())
        print("ok", flush=True)
    except InvalidKeyError:
        print("refused", flush=True)
"""


def test_disable_and_enable_reach_a_verifier_in_another_process(database_url: str) -> None:
    """A key disabled by an admin is refused by a service process, and works again once enabled."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    service = subprocess.Popen(
        [sys.executable, "-c", CHECKER, database_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def answer() -> str:
        assert service.stdin is not None and service.stdout is not None
        service.stdin.write(key + "\n")
        service.stdin.flush()
        return service.stdout.readline().strip()

    def becomes(expected: str) -> bool:
        deadline = time.monotonic() + 15  # PostgreSQL: push, or at worst the 1 s bound
        while time.monotonic() < deadline:
            if answer() == expected:
                return True
            time.sleep(0.05)
        return False

    try:
        assert answer() == "ok"
        store.disable_key("alice", "demo", "suspected leak")
        assert becomes("refused")
        store.enable_key("alice", "demo")
        assert becomes("ok")
    finally:
        service.kill()
        service.communicate()  # waits, and closes the pipes
        store.close()
