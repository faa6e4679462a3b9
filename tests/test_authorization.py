"""Tests of the Authorization header parser: every case maps to one typed error and status."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apikey_tui import keyformat
from apikey_tui.errors import (
    AuthError,
    InvalidKeyError,
    MalformedHeaderError,
    MissingKeyError,
)
from apikey_tui.verifier.authorization import parse_key, split_credentials

_, KEY = keyformat.generate()
BAD_CHECKSUM = KEY[:-1] + ("a" if KEY[-1] != "a" else "b")
REALM = "api"

# (header, error class or None for success, status, WWW-Authenticate)
CASES = [
    (None, MissingKeyError, 401, 'ApiKey realm="api"'),
    ("", MissingKeyError, 401, 'ApiKey realm="api"'),
    ("Basic dXNlcjpwYXNz", MissingKeyError, 401, 'ApiKey realm="api"'),
    (f"Bearer {KEY}", MissingKeyError, 401, 'ApiKey realm="api"'),
    (f"ApiKeys {KEY}", MissingKeyError, 401, 'ApiKey realm="api"'),
    (f"ApiKey {KEY}", None, 200, None),
    (f"apikey {KEY}", None, 200, None),
    (f"APIKEY {KEY}", None, 200, None),
    (f"ApiKey   {KEY}  ", None, 200, None),
    (f"  ApiKey {KEY}", None, 200, None),
    ("ApiKey", MalformedHeaderError, 400, 'ApiKey realm="api", error="invalid_request"'),
    ("ApiKey ", MalformedHeaderError, 400, 'ApiKey realm="api", error="invalid_request"'),
    (
        f"ApiKey {KEY} {KEY}",
        MalformedHeaderError,
        400,
        'ApiKey realm="api", error="invalid_request"',
    ),
    (
        f"ApiKey {KEY}, ApiKey {KEY}",
        MalformedHeaderError,
        400,
        'ApiKey realm="api", error="invalid_request"',
    ),
    (
        "ApiKey " + "a" * 5000,
        MalformedHeaderError,
        400,
        'ApiKey realm="api", error="invalid_request"',
    ),
    ("ApiKey ключ", MalformedHeaderError, 400, 'ApiKey realm="api", error="invalid_request"'),
    ("ApiKey k\x00ey", MalformedHeaderError, 400, 'ApiKey realm="api", error="invalid_request"'),
    (f"ApiKey\t{KEY}", MissingKeyError, 401, 'ApiKey realm="api"'),
    (f"ApiKey {BAD_CHECKSUM}", InvalidKeyError, 401, 'ApiKey realm="api", error="invalid_token"'),
    (f"ApiKey {KEY[:-3]}", InvalidKeyError, 401, 'ApiKey realm="api", error="invalid_token"'),
    ("ApiKey not-a-key", InvalidKeyError, 401, 'ApiKey realm="api", error="invalid_token"'),
    (f"ApiKey {KEY.upper()}", InvalidKeyError, 401, 'ApiKey realm="api", error="invalid_token"'),
]


def _case_id(header: str | None) -> str:
    """The case's header with the random key named, so every process collects the same ids."""
    if header is None:
        return "None"
    for value, name in ((BAD_CHECKSUM, "BAD_CHECKSUM"), (KEY.upper(), "KEY.upper()"), (KEY, "KEY")):
        header = header.replace(value, name)
    return header.replace(KEY[:-3], "KEY[:-3]")


def parse_authorization(value: str | None) -> keyformat.ParsedKey:
    """A whole header value read as the verifier reads it: the credential, then the key."""
    return parse_key(split_credentials(value))


@pytest.mark.parametrize(
    ("header", "error", "status", "challenge"), CASES, ids=[_case_id(c[0]) for c in CASES]
)
def test_header_cases_map_to_exact_status_and_challenge(
    header: str | None, error: type[AuthError] | None, status: int, challenge: str | None
) -> None:
    """Each header shape yields the documented error, HTTP status and WWW-Authenticate value."""
    if error is None:
        assert parse_authorization(header).public_id == keyformat.parse(KEY).public_id
        return
    with pytest.raises(error) as info:
        parse_authorization(header)
    assert info.value.status == status
    assert info.value.challenge(REALM) == challenge
    assert KEY[20:40] not in str(info.value.problem())  # never echo the presented key


def test_invalid_key_answers_are_identical() -> None:
    """A bad checksum and a garbage token produce byte-identical problem bodies and headers."""
    answers = set()
    for header in (f"ApiKey {BAD_CHECKSUM}", "ApiKey nope"):
        with pytest.raises(InvalidKeyError) as info:
            parse_authorization(header)
        answers.add((repr(info.value.problem()), repr(info.value.http_headers(REALM))))
    assert len(answers) == 1


@given(st.one_of(st.none(), st.text(max_size=200), st.text(max_size=100).map("ApiKey ".__add__)))
def test_parser_raises_only_typed_auth_errors(header: str | None) -> None:
    """Whatever the header, the parser returns key parts or raises one of the typed AuthErrors."""
    try:
        parse_authorization(header)
    except AuthError as exc:
        assert exc.status in (400, 401)
