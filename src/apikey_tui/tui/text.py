"""Text from the database shown literally: no markup, no escape sequences, no control characters.

The one function that makes stored text safe for a terminal is names.printable (the CLI's
too); literal() is it as Textual content, which never reads markup.
"""

from __future__ import annotations

from textual.content import Content

from apikey_tui.names import printable


def literal(value: str) -> Content:
    """Content that shows value as typed: '[red]' stays '[red]', ESC shows as '\\x1b'."""
    return Content(printable(value))
