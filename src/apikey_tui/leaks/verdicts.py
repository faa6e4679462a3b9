"""What a key found somewhere is to this database: live, disabled, expired, deleted, forged."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apikey_tui.hashing import fingerprint
from apikey_tui.keyformat import ParsedKey

if TYPE_CHECKING:
    from apikey_tui.store import Credential, KeyStore

# live: it works now. disabled, expired: ours, its secret right, but refused. deleted: an id this
# database issued that is no longer a key (deleted, or replaced by recreate or rotate). forged:
# a real id with a wrong secret, never a leak of that key. unknown: not an id of this database.
STATES = ("live", "disabled", "expired", "deleted", "forged", "unknown")


def token_sha256(token: str) -> str:
    """The SHA-256 (hex) of a token as found: what logs and reports name instead of it.

    Defined for every string: a token read from a file keeps its undecodable bytes (the
    surrogateescape reading hashes them back to themselves); a lone surrogate sent in JSON
    (`"\\ud800"`), which no file holds, is hashed in its surrogatepass form.
    """
    try:
        raw = token.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # its repr holds the whole token: never let it out
        raw = token.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def mask(public_id: str) -> str:
    """A public id shortened for output: its first six and last four characters."""
    return f"{public_id[:6]}…{public_id[-4:]}"


@dataclass(frozen=True)
class Verdict:
    """A key's state here; credential (never shown) is set when its secret was proven right."""

    state: str
    owner: str | None = None
    name: str | None = None
    credential: Credential | None = field(default=None, repr=False)

    @property
    def genuine(self) -> bool:
        """Whether the secret is a real one of a current key (live, disabled or expired)."""
        return self.credential is not None


def judge(store: KeyStore, key: ParsedKey) -> Verdict:
    """Look the public id up and check the secret (fingerprint, then argon2)."""
    credential = store.credential(key.public_id)
    if credential is None:
        return Verdict("deleted" if store.issued(key.public_id) else "unknown")
    info = credential.info
    matches = credential.fingerprint is None or hmac.compare_digest(
        credential.fingerprint, fingerprint(key.public_id, key.secret)
    )
    if not (matches and store.hasher.verify(credential.secret_hash, key.secret)):
        return Verdict("forged", info.owner, info.name)
    now = store.clock()
    if credential.disabled:
        state = "disabled"
    elif credential.expires_at is not None and now >= credential.expires_at:
        state = "expired"
    else:
        state = "live"
    return Verdict(state, info.owner, info.name, credential)
