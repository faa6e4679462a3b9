"""The API key format: generate, parse and checksum keys, with no I/O."""

from __future__ import annotations

import hmac
import re
import secrets
import zlib
from dataclasses import dataclass, field

# Lower-case RFC 4648 base32: safe in an HTTP header (token68), in a URL, in a shell and in
# JSON; no look-alikes such as 0/O or 1/l; case never matters when a human reads it aloud.
ALPHABET = "abcdefghijklmnopqrstuvwxyz234567"
PREFIX = "ak"
ID_CHARS = 16  # 80 random bits: unique ids without coordination
SECRET_CHARS = 52  # 260 random bits, at least the 256 the design asks for
CHECK_CHARS = 7  # CRC-32 in 7 base32 digits
SEPARATOR = "."
ID_LENGTH = len(PREFIX) + ID_CHARS  # a public id's characters, at the start of its key
KEY_LENGTH = ID_LENGTH + len(SEPARATOR) + SECRET_CHARS + CHECK_CHARS

_ID_SHAPE = rf"{PREFIX}[{ALPHABET}]{{{ID_CHARS}}}"
_KEY = re.compile(
    rf"({_ID_SHAPE})\.([{ALPHABET}]{{{SECRET_CHARS}}})([{ALPHABET}]{{{CHECK_CHARS}}})"
)
# A key's shape as a regular expression without groups or anchors, for scanners (apikey-tui
# scan, grep): it finds candidates; `parse` (the checksum) decides which are keys.
KEY_PATTERN = rf"{_ID_SHAPE}\{SEPARATOR}[{ALPHABET}]{{{SECRET_CHARS + CHECK_CHARS}}}"


class MalformedKey(ValueError):
    """The text is not an API key of this format (wrong shape or checksum); it is never echoed."""


@dataclass(frozen=True)
class ParsedKey:
    """A key split into its public id and its secret; the secret never shows in a repr."""

    public_id: str
    secret: str = field(repr=False)


def _random(n: int) -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(n))


def checksum(body: str) -> str:
    """Return the CRC-32 of the key body as CHECK_CHARS base32 digits."""
    value = zlib.crc32(body.encode("ascii"))
    # Most significant digit first, unrolled: every cold check of a key parses it (a loop,
    # a list and a join cost a re-read about a microsecond).
    a = ALPHABET
    return (
        a[value >> 30]
        + a[value >> 25 & 31]
        + a[value >> 20 & 31]
        + a[value >> 15 & 31]
        + a[value >> 10 & 31]
        + a[value >> 5 & 31]
        + a[value & 31]
    )


def new_public_id() -> str:
    """Return a fresh public id such as 'ak' + 16 base32 characters."""
    return PREFIX + _random(ID_CHARS)


def generate(public_id: str | None = None) -> tuple[ParsedKey, str]:
    """Make a new key; return its parts and the full text, which the caller shows once."""
    public_id = public_id or new_public_id()
    secret = _random(SECRET_CHARS)
    body = f"{public_id}{SEPARATOR}{secret}"
    return ParsedKey(public_id, secret), body + checksum(body)


def parse(text: str) -> ParsedKey:
    """Split a key into id and secret, or raise MalformedKey; no database is touched."""
    match = _KEY.fullmatch(text) if len(text) == KEY_LENGTH else None
    if match is None:
        raise MalformedKey("not an API key of this format")
    public_id, secret, check = match.groups()
    # The checksum is not secret, but a constant-time compare costs nothing and avoids a debate.
    # Its body is the text before it (the pattern matched "<id>.<secret>" there).
    if not hmac.compare_digest(check, checksum(text[:-CHECK_CHARS])):
        raise MalformedKey("API key checksum does not match (mistyped or truncated?)")
    return ParsedKey(public_id, secret)
