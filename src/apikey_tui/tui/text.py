"""Text from the database shown literally: no markup, no escape sequences, no control characters."""

from __future__ import annotations

import unicodedata

from textual.content import Content


def visible(value: str) -> str:
    """Replace control and format characters by visible escapes such as \\x1b."""
    if all(unicodedata.category(ch)[0] != "C" for ch in value):
        return value
    return "".join(ch if unicodedata.category(ch)[0] != "C" else ascii(ch)[1:-1] for ch in value)


def literal(value: str) -> Content:
    """Content that shows value as typed: '[red]' stays '[red]'."""
    return Content(visible(value))
