"""Metadata and tags of keys and owners: KEY=VALUE pairs, their rules and how they are stored.

Metadata is a small JSON object of strings that services read as `caller.meta` (the owner's,
then the key's on top); tags are short words an admin filters by (`tag:env=prod`), never seen
by a service. Both are checked here and nowhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from apikey_tui.errors import InvalidInputError

Pairs = tuple[tuple[str, str], ...]  # sorted by name: hashable, and one spelling per content
META_ENTRIES_MAX = 16
META_VALUE_MAX = 200
_META_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
TAGS_MAX_COUNT = 16
# Tags are words: no space, no '=' in a name, nothing a shell or the filter must quote.
_TAG_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}")
_TAG_VALUE = re.compile(r"[A-Za-z0-9_.:/@+-]{0,64}")
NO_META: Mapping[str, str] = MappingProxyType({})


def split_pair(text: str, what: str) -> tuple[str, str]:
    """'KEY=VALUE' as (KEY, VALUE); a value may hold '=' and be empty."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InvalidInputError(f"{what} {text[:40]!a} is not KEY=VALUE")
    return name, value


def _unique(pairs: Iterable[tuple[str, str]], what: str) -> dict[str, str]:
    """The pairs by name; a name given twice (`x=1 x=2`) is refused, never last-wins."""
    found: dict[str, str] = {}
    for name, value in pairs:
        if name in found:
            raise InvalidInputError(f"{what} {name[:40]!a} is given twice; nothing was done")
        found[name] = value
    return found


def check_meta(pairs: Iterable[tuple[str, str]]) -> Pairs:
    """Metadata as stored: names like identifiers, printable values (no control, format or
    space character but the plain space), at most META_MAX bytes; each name once."""
    found = _unique(pairs, "metadata")
    if len(found) > META_ENTRIES_MAX:
        raise InvalidInputError(f"at most {META_ENTRIES_MAX} metadata entries; nothing was done")
    for name, value in found.items():
        if not _META_NAME.fullmatch(name):
            raise InvalidInputError(
                f"metadata name {name[:40]!a} is not allowed: a letter or '_', then letters, "
                "digits, '_', '.' or '-' (at most 64)"
            )
        if len(value) > META_VALUE_MAX:
            raise InvalidInputError(f"metadata {name} is longer than {META_VALUE_MAX} characters")
        # str.isprintable: no control or format character, and no space but ' ' (a no-break
        # or line-separator space looks like ' ' yet compares apart in a service's code).
        if not value.isprintable():
            raise InvalidInputError(
                f"metadata {name} holds a control, format or non-plain space character"
            )
    ordered = tuple(sorted(found.items()))
    from apikey_tui.db.models import META_MAX  # its column's size; SQLModel, so not at import

    if len((meta_text(ordered) or "").encode()) > META_MAX:
        raise InvalidInputError(f"metadata is larger than {META_MAX} bytes as JSON")
    return ordered


def meta_text(pairs: Pairs) -> str | None:
    """How the database holds metadata: compact JSON with sorted names, or None for none."""
    if not pairs:
        return None
    return json.dumps(dict(pairs), separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def meta_of_text(text: str | None) -> Pairs:
    """The metadata a database text holds; anything but an object of strings is none."""
    if not text:
        return ()
    try:
        found = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(found, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in found.items() if isinstance(v, str)))


def caller_meta(owner: str | None, key: str | None) -> Mapping[str, str]:
    """What a service reads as caller.meta: the owner's metadata with the key's on top,
    read-only (built once per credential read, never per request)."""
    if not owner and not key:
        return NO_META
    return MappingProxyType({**dict(meta_of_text(owner)), **dict(meta_of_text(key))})


def check_tags(pairs: Iterable[tuple[str, str]]) -> Pairs:
    """Tags as stored: lower-case names, word values, at most TAGS_MAX_COUNT of them; each
    name once."""
    found = _unique(pairs, "tag")
    if len(found) > TAGS_MAX_COUNT:
        raise InvalidInputError(f"at most {TAGS_MAX_COUNT} tags; nothing was done")
    for name, value in found.items():
        if not _TAG_NAME.fullmatch(name):
            raise InvalidInputError(
                f"tag name {name[:40]!a} is not allowed: lower-case letters, digits, '_', '.' "
                "or '-', starting with a letter or digit (at most 32)"
            )
        if not _TAG_VALUE.fullmatch(value):
            raise InvalidInputError(
                f"tag {name} value {value[:40]!a} is not allowed: ASCII letters, digits and "
                "_ . : / @ + - (at most 64)"
            )
    ordered = tuple(sorted(found.items()))
    text = tags_text(ordered)
    from apikey_tui.db.models import TAGS_MAX  # its column's size; SQLModel, so not at import

    if text is not None and len(text) > TAGS_MAX:
        raise InvalidInputError(f"tags are longer than {TAGS_MAX} characters together")
    return ordered


def tags_text(pairs: Pairs) -> str | None:
    """How the database holds tags: 'env=prod team=pay', sorted, or None for none."""
    return " ".join(f"{name}={value}" for name, value in pairs) or None


def tags_of_text(text: str | None) -> Pairs:
    """The tags a database text holds (`tags_text`)."""
    if not text:  # most keys: nothing to split (a verifier's re-read reads the key's row)
        return ()
    found: list[tuple[str, str]] = []
    for part in text.split():
        name, _, value = part.partition("=")
        found.append((name, value))
    return tuple(found)


def pairs_words(pairs: Pairs) -> str:
    """'a=1 b=2' for a person to read ('' for none)."""
    return " ".join(f"{name}={value}" for name, value in pairs)
