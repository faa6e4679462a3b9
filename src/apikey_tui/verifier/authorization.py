"""Parse an `Authorization: ApiKey <key>` header value into key parts, or a typed AuthError."""

from __future__ import annotations

import re

from apikey_tui import keyformat
from apikey_tui.errors import InvalidKeyError, MalformedHeaderError, MissingKeyError

SCHEME = "apikey"  # compared case-insensitively (RFC 9110 section 11.1)
MAX_CREDENTIAL = 1024
# RFC 9110: credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
_SCHEME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")
# The well-formed header in one match, for the hot path; anything else takes the slow path,
# which says exactly what is wrong. Both accept the same headers.
_WELL_FORMED = re.compile(r"[ \t]*[Aa][Pp][Ii][Kk][Ee][Yy] +([A-Za-z0-9._~+/-]+=*) *[ \t]*")


def split_credentials(value: str | None) -> str:
    """Return the credential after 'ApiKey ', or raise Missing/MalformedHeaderError."""
    if value is None:
        raise MissingKeyError()
    match = _WELL_FORMED.fullmatch(value)
    if match is not None and len(match.group(1)) <= MAX_CREDENTIAL:
        return match.group(1)
    value = value.strip(" \t")
    scheme, _, rest = value.partition(" ")
    if not _SCHEME.fullmatch(scheme) or scheme.lower() != SCHEME:
        raise MissingKeyError()  # another scheme carries no API key: challenge for one
    credential = rest.strip(" ")
    if (
        not credential
        or len(credential) > MAX_CREDENTIAL
        or not _TOKEN68.fullmatch(credential)  # also refuses a second key after a space
    ):
        raise MalformedHeaderError()
    return credential


def parse_key(credential: str) -> keyformat.ParsedKey:
    """Parse a credential; one that is well-formed but no key of ours is InvalidKeyError."""
    try:
        return keyformat.parse(credential)
    except keyformat.MalformedKey:
        # Same answer as an unknown or revoked key: a caller learns nothing from the difference.
        raise InvalidKeyError() from None
