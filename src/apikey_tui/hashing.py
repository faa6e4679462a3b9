"""Argon2id hashing of key secrets from a named, documented parameter profile."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import argon2
from argon2 import Parameters, PasswordHasher, Type
from argon2.profiles import CHEAPEST

# Why so light: a key secret carries 260 random bits, so no amount of hashing work changes
# how guessable it is; the hash only has to be one-way, salted and password-grade (the spec
# says to treat a key like a password). argon2's cost exists for guessable passwords: ours are
# not, and every process pays that cost again for every key after each restart. So the default
# is argon2id at its minimum cost (one pass over 8 KiB, ~0.02 ms); key-secret-v1 (8 MiB,
# ~4 ms) still verifies, and a hash made with it is upgraded at the next successful check by
# a verifier that may write it (see docs/decisions.md).
KEY_SECRET_V1 = Parameters(
    type=Type.ID,
    version=19,
    salt_len=16,
    hash_len=32,
    time_cost=1,
    memory_cost=8 * 1024,  # KiB
    parallelism=1,
)
KEY_SECRET_V2 = Parameters(
    type=Type.ID,
    version=19,
    salt_len=16,
    hash_len=32,
    time_cost=1,
    memory_cost=8,  # KiB: argon2's minimum (8 per lane)
    parallelism=1,
)

PROFILES: dict[str, Parameters] = {
    "key-secret-v2": KEY_SECRET_V2,
    "key-secret-v1": KEY_SECRET_V1,
    # Only for tests: fast enough to hash thousands of keys in a unit test run.
    "cheapest": CHEAPEST,
}
DEFAULT_PROFILE = "key-secret-v2"


@dataclass(frozen=True)
class SecretHasher:
    """Hash and verify key secrets with one profile; tell when a stored hash needs upgrading."""

    profile: str = DEFAULT_PROFILE

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown hash profile {self.profile!r}; known: {', '.join(PROFILES)}")

    @property
    def _hasher(self) -> PasswordHasher:
        return _hashers(self.profile)

    def hash(self, secret: str) -> str:
        """Return an argon2id PHC string for the secret."""
        return self._hasher.hash(secret)

    def verify(self, stored_hash: str, secret: str) -> bool:
        """Tell whether the secret matches the stored hash; malformed hashes simply do not match."""
        try:
            return self._hasher.verify(stored_hash, secret)
        except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
            return False

    def needs_rehash(self, stored_hash: str) -> bool:
        """Tell whether the stored hash was made with other parameters than this profile's."""
        return self._hasher.check_needs_rehash(stored_hash)


FINGERPRINT_CHARS = 16  # 64 bits, hex


def fingerprint(public_id: str, secret: str) -> str:
    """A short keyed fingerprint of a secret, stored beside its argon2 hash.

    The verifier compares it before argon2, so a wrong secret costs one BLAKE2b call instead of
    an argon2 run, and never holds up the right one. 64 bits of a keyed hash of a 260-bit random
    secret tell a thief of the database nothing useful; the public id keys it, so equal
    fingerprints of two keys mean nothing either.
    """
    digest = hashlib.blake2b(
        secret.encode(),
        digest_size=FINGERPRINT_CHARS // 2,
        key=public_id.encode(),
        person=b"apikey-tui-fp-v1",
    )
    return digest.hexdigest()


_CACHE: dict[str, PasswordHasher] = {}


def _hashers(profile: str) -> PasswordHasher:
    hasher = _CACHE.get(profile)
    if hasher is None:
        hasher = _CACHE[profile] = PasswordHasher.from_parameters(PROFILES[profile])
    return hasher
