"""Worker processes of the usage tests: kept light (spawned children import only this)."""

from __future__ import annotations

from apikey_tui import keyformat
from apikey_tui.errors import InsufficientScopeError, InvalidKeyError
from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier


def wrong(plaintext: str) -> str:
    """A well-formed key with the same public id and another secret."""
    return keyformat.generate(keyformat.parse(plaintext).public_id)[1]


def verify(url: str, plaintext: str, n: int, m: int, w: int) -> None:
    """n checks allowed for project, m refused for admin, w wrong secrets; then close()."""
    verifier = Verifier.from_url(url, hasher=SecretHasher("cheapest"))
    for _ in range(n):
        verifier.verify("ApiKey " + plaintext, ("project",))
    for _ in range(m):
        try:
            verifier.verify("ApiKey " + plaintext, ("project", "admin"))
        except InsufficientScopeError:
            pass
    for _ in range(w):
        try:
            verifier.verify("ApiKey " + wrong(plaintext), ("project",))
        except InvalidKeyError:
            pass
    verifier.close()
