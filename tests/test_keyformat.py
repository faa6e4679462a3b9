"""Tests of the key format: generation, parsing, checksum and secrecy of the repr."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apikey_tui import keyformat
from apikey_tui.keyformat import MalformedKey


def test_generated_key_round_trips_through_parse() -> None:
    """A generated key parses back into the same public id and secret."""
    parts, text = keyformat.generate()
    assert keyformat.parse(text) == parts
    assert text.startswith(parts.public_id + ".")


def test_key_uses_only_header_safe_characters_and_one_separator() -> None:
    """Keys hold only lower-case base32 characters and exactly one '.' separator."""
    _, text = keyformat.generate()
    assert re.fullmatch(r"ak[a-z2-7]+\.[a-z2-7]+", text)
    assert text.count(".") == 1
    assert len(text) == keyformat.KEY_LENGTH


def test_secret_carries_at_least_256_random_bits() -> None:
    """The secret part's length times log2 of the alphabet is at least 256 bits."""
    assert keyformat.SECRET_CHARS * math.log2(len(keyformat.ALPHABET)) >= 256


def test_keys_are_unique() -> None:
    """A thousand generated keys have a thousand distinct ids and secrets."""
    keys = [keyformat.generate()[0] for _ in range(1000)]
    assert len({k.public_id for k in keys}) == len({k.secret for k in keys}) == 1000


def test_repr_never_shows_the_secret() -> None:
    """The repr of parsed key parts names the public id but not the secret."""
    parts, _ = keyformat.generate()
    assert parts.secret not in repr(parts)
    assert parts.public_id in repr(parts)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda k: k[:-1],  # truncated
        lambda k: k + "a",  # too long
        lambda k: k.upper(),  # wrong case
        lambda k: k.replace(".", "_"),  # wrong separator
        lambda k: " " + k,  # stray space
        lambda k: "",  # empty
    ],
)
def test_mangled_keys_are_malformed(mangle: object) -> None:
    """Truncated, padded, re-cased or re-separated keys are rejected by the parser."""
    _, text = keyformat.generate()
    with pytest.raises(MalformedKey):
        keyformat.parse(mangle(text))  # type: ignore[operator]


@given(st.integers(min_value=0, max_value=keyformat.KEY_LENGTH - 1), st.sampled_from("abc234"))
def test_any_single_typo_fails_the_checksum(position: int, replacement: str) -> None:
    """Changing any one character of a key makes it malformed (CRC-32 catches single typos)."""
    _, text = keyformat.generate()
    if text[position] == replacement or text[position] == ".":
        return
    with pytest.raises(MalformedKey):
        keyformat.parse(text[:position] + replacement + text[position + 1 :])


@given(st.text(max_size=120))
def test_parse_raises_only_malformed_key_and_never_echoes_input(text: str) -> None:
    """Any text either parses or raises MalformedKey whose message does not contain the text."""
    try:
        keyformat.parse(text)
    except MalformedKey as exc:
        assert len(text) < 4 or text not in str(exc)
