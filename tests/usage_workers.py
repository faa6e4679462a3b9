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


def append(url: str, public_id: str, rounds: int, minute: int) -> None:
    """Append `rounds` batches of one request each at `minute`, as a verifier's flush does."""
    from apikey_tui.db import make_engine
    from apikey_tui.store.credentials import credential_source

    source = credential_source(make_engine(url))
    for i in range(rounds):
        source.record_usage([(public_id, minute - i % 300, 1, 0, "", 1)])
    source.close()
