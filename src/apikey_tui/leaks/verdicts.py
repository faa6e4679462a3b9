"""What a key found somewhere is to this database: live, disabled, expired, deleted, forged."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apikey_tui.errors import StoreUnavailableError
from apikey_tui.hashing import fingerprint
from apikey_tui.keyformat import ParsedKey

if TYPE_CHECKING:  # `scan --offline` (a pre-commit hook) must import no database layer
    from apikey_tui.store import Credential, KeyStore
    from apikey_tui.verifier.gate import FailureBudget

# live: it works now. disabled, expired: ours, its secret right, but refused. deleted: an id this
# database issued that is no longer a key (deleted, or replaced by recreate or rotate). forged:
# a real id with a wrong secret, never a leak of that key. unknown: not an id of this database.
# unchecked: a real id of a key made by 0.1.0 (no fingerprint) whose budget of wrong secrets is
# spent for now (serve-leaks' /revoke only), so its secret was not checked.
STATES = ("live", "disabled", "expired", "deleted", "forged", "unknown", "unchecked")


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
class TokenVerdict:
    """A key's state here; credential (never shown) is set when its secret was proven right."""

    state: str
    owner: str | None = None
    name: str | None = None
    credential: Credential | None = field(default=None, repr=False)

    @property
    def genuine(self) -> bool:
        """Whether the secret is a real one of a current key (live, disabled or expired)."""
        return self.credential is not None


def judge(
    store: KeyStore,
    key: ParsedKey,
    legacy: FailureBudget | None = None,
    *,
    tell_deleted: bool = True,
) -> TokenVerdict:
    """Look the public id up and check the secret (fingerprint, then argon2).

    argon2 runs only for a secret whose fingerprint matches (the right one, bar a 2**-64
    chance), so at most once per public id for any list of tokens, except for a key made by
    0.1.0, which has no fingerprint: then `legacy`, when given, bounds the wrong secrets
    checked for its id (a spent budget is "unchecked", nothing changes). A key of 0.1.0 whose
    secret is proven right is given its fingerprint, so later wrong secrets cost no argon2.

    Telling a deleted id from an unknown one reads the audit trail by public id, which no index
    serves: a scan of the whole trail. With tell_deleted False both are "unknown", so a caller
    that acts on neither (serve-leaks, taking ids from anyone) never pays for it; `judge_all`
    pays once for many keys.
    """
    return judge_all(store, [key], legacy, tell_deleted=tell_deleted)[0]


def judge_all(
    store: KeyStore,
    keys: Sequence[ParsedKey],
    legacy: FailureBudget | None = None,
    *,
    tell_deleted: bool = True,
) -> list[TokenVerdict]:
    """`judge` each key, in order, telling deleted ids from unknown ones with one read of the
    audit trail for them all (one per id made a scan of a file of keys quadratic)."""
    verdicts = [_judge(store, key, legacy) for key in keys]
    absent = [key.public_id for key, v in zip(keys, verdicts, strict=True) if v.state == "unknown"]
    if not (tell_deleted and absent):
        return verdicts
    issued = store.issued(absent)
    return [
        TokenVerdict("deleted") if v.state == "unknown" and key.public_id in issued else v
        for key, v in zip(keys, verdicts, strict=True)
    ]


def _judge(store: KeyStore, key: ParsedKey, legacy: FailureBudget | None) -> TokenVerdict:
    """`judge` of one key, an id that no key holds being "unknown" (deleted or never issued)."""
    credential = store.credential(key.public_id)
    if credential is None:
        return TokenVerdict("unknown")
    info = credential.info
    presented = fingerprint(key.public_id, key.secret)
    if credential.fingerprint is None:
        if legacy is not None and not legacy.allows(key.public_id):
            return TokenVerdict("unchecked", info.owner, info.name)
        if not store.hasher.verify(credential.secret_hash, key.secret):
            if legacy is not None:
                legacy.spend(key.public_id)
            return TokenVerdict("forged", info.owner, info.name)
        try:
            store.add_fingerprint(key.public_id, presented)
        except StoreUnavailableError:
            pass  # a read-only database (a scan's) keeps it without: argon2 still decides
    elif not (
        hmac.compare_digest(credential.fingerprint, presented)
        and store.hasher.verify(credential.secret_hash, key.secret)
    ):
        return TokenVerdict("forged", info.owner, info.name)
    if credential.works(store.clock()):
        state = "live"
    else:
        state = "disabled" if credential.disabled else "expired"
    return TokenVerdict(state, info.owner, info.name, credential)
