"""GitHub's secret-scanning partner format (deps.dev sends the same): keys, signatures, bodies.

A report is a JSON array of `{token, type, url, source}`, signed over the raw body with ECDSA
P-256/SHA-256 (DER, base64) by the key its identifier header names. The keys come from a saved
copy of GitHub's `meta/public_keys/secret_scanning` document, never fetched at run time.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from apikey_tui.errors import LeakRequestError

MAX_BODY = 1024 * 1024  # bytes
MAX_TOKENS = 1000  # per report, and per revocation request
PublicKeys = Mapping[str, ec.EllipticCurvePublicKey]


@dataclass(frozen=True)
class Signer:
    """Who signs reports on an endpoint: a name (the leak source) and its two headers."""

    name: str
    identifier_header: bytes
    signature_header: bytes


GITHUB = Signer("github", b"github-public-key-identifier", b"github-public-key-signature")
DEPSDEV = Signer("depsdev", b"gosst-public-key-identifier", b"gosst-public-key-signature")


@dataclass(frozen=True)
class Reported:
    """One entry of a report; the token never shows in a repr."""

    token: str = field(repr=False)
    type: str
    url: str
    source: str


def load_public_keys(path: str | Path) -> dict[str, ec.EllipticCurvePublicKey]:
    """Read a saved `secret_scanning` keys document; ValueError naming the file if unusable.

    Every key must be a P-256 public key in PEM: anything else would be a key we cannot check
    a signature with, so the file is refused at start rather than a report at run time.
    """
    try:
        data = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise ValueError(f"cannot read the key file {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"key file {path} is not JSON") from None
    entries = data.get("public_keys") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'key file {path}: expected {{"public_keys": [...]}} with keys')
    keys: dict[str, ec.EllipticCurvePublicKey] = {}
    for number, entry in enumerate(entries, 1):
        identifier = entry.get("key_identifier") if isinstance(entry, dict) else None
        pem = entry.get("key") if isinstance(entry, dict) else None
        if not (isinstance(identifier, str) and identifier and isinstance(pem, str)):
            raise ValueError(f"key file {path}: key {number} needs key_identifier and key (PEM)")
        try:
            key = serialization.load_pem_public_key(pem.encode("ascii"))
        except (ValueError, UnicodeEncodeError, UnsupportedAlgorithm):
            raise ValueError(f"key file {path}: key {number} is not a PEM public key") from None
        if not (isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"):
            raise ValueError(f"key file {path}: key {number} is not an ECDSA P-256 key")
        keys[identifier] = key
    return keys


def check_signature(
    keys: PublicKeys, identifier: bytes | None, signature: bytes | None, body: bytes
) -> None:
    """Raise LeakRequestError (401) unless signature is the named key's over the raw body."""
    if identifier is None or signature is None:
        raise LeakRequestError(401, "the report carries no signature or no key identifier")
    key = keys.get(identifier.decode("latin-1"))
    if key is None:
        raise LeakRequestError(401, "the report is signed with an unknown key")
    try:
        der = base64.b64decode(signature, validate=True)
        key.verify(der, body, ec.ECDSA(hashes.SHA256()))
    except (binascii.Error, ValueError, InvalidSignature):
        raise LeakRequestError(401, "the report's signature does not verify") from None


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError("a name given twice in one object")
    return dict(pairs)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(body: bytes) -> Any:
    """Parse UTF-8 JSON, refusing what readers could disagree on: repeated names, NaN."""
    try:
        return json.loads(
            body.decode("utf-8"),
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise LeakRequestError(400, "the body is not JSON (UTF-8, no repeated names)") from None


def parse_report(body: bytes) -> list[Reported]:
    """The entries of a report; any entry not of the documented shape refuses it whole (400)."""
    data = strict_json(body)
    if not isinstance(data, list):
        raise LeakRequestError(400, "a report is a JSON array of {token, type, url, source}")
    if len(data) > MAX_TOKENS:
        raise LeakRequestError(400, f"a report holds at most {MAX_TOKENS} tokens")
    reported = []
    for entry in data:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise LeakRequestError(400, "each report entry is an object with a token string")
        extra = {name: entry.get(name, "") for name in ("type", "url", "source")}
        if not all(isinstance(value, str) for value in extra.values()):
            raise LeakRequestError(400, "type, url and source of a report entry are strings")
        reported.append(Reported(entry["token"], extra["type"], extra["url"], extra["source"]))
    return reported


def parse_revocation(body: bytes) -> list[str]:
    """The credentials of a `/revoke` request: `{"credentials": [string, ...]}`, at most 1000."""
    data = strict_json(body)
    credentials = data.get("credentials") if isinstance(data, dict) else None
    if not isinstance(credentials, list) or not all(isinstance(c, str) for c in credentials):
        raise LeakRequestError(400, 'expected {"credentials": ["...", ...]}')
    if len(credentials) > MAX_TOKENS:
        raise LeakRequestError(400, f"at most {MAX_TOKENS} credentials per request")
    return credentials
