"""Tests of argon2id hashing with named profiles and upgrade on the next check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apikey_tui.hashing import DEFAULT_PROFILE, PROFILES, SecretHasher


def test_hash_verifies_the_right_secret_only() -> None:
    """A hash verifies its own secret and refuses any other."""
    hasher = SecretHasher("cheapest")
    stored = hasher.hash("s3cret")
    assert stored.startswith("$argon2id$")
    assert hasher.verify(stored, "s3cret")
    assert not hasher.verify(stored, "s3creT")


def test_garbage_hash_never_matches() -> None:
    """A malformed stored hash makes verification fail instead of raising."""
    assert not SecretHasher("cheapest").verify("not-a-hash", "x")


def test_default_profile_is_argon2id_at_its_minimum_cost() -> None:
    """The default profile is argon2id, one pass over 8 KiB, one lane, 16-byte salt and hash
    of 32: sized for 260-bit random secrets, not for guessable passwords."""
    params = PROFILES[DEFAULT_PROFILE]
    assert (
        params.type.name,
        params.time_cost,
        params.memory_cost,
        params.parallelism,
        params.salt_len,
        params.hash_len,
    ) == ("ID", 1, 8, 1, 16, 32)
    assert "m=8,t=1,p=1" in SecretHasher().hash("x")


def test_a_key_secret_v1_hash_verifies_and_is_upgraded() -> None:
    """A hash of the earlier profile (8 MiB) still verifies and is flagged for the upgrade."""
    old = SecretHasher("key-secret-v1").hash("x")
    assert SecretHasher().verify(old, "x")
    assert SecretHasher().needs_rehash(old)


def test_hash_from_another_profile_needs_rehash() -> None:
    """A hash made with the test profile is flagged for upgrade by the real profile only."""
    old = SecretHasher("cheapest").hash("x")
    assert SecretHasher().needs_rehash(old)
    assert not SecretHasher("cheapest").needs_rehash(old)
    assert SecretHasher().verify(old, "x")  # old hashes still verify before the upgrade


def test_unknown_profile_is_refused() -> None:
    """Asking for a profile that does not exist is a clear error."""
    with pytest.raises(ValueError, match="unknown hash profile"):
        SecretHasher("fast-please")


@settings(max_examples=50)
@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_hash_round_trip_for_any_secret(secret: str, other: str) -> None:
    """Any secret verifies against its own hash, and a different one never does."""
    hasher = SecretHasher("cheapest")
    stored = hasher.hash(secret)
    assert hasher.verify(stored, secret)
    assert hasher.verify(stored, other) == (other == secret)
