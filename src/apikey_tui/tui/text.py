"""Text from the database shown literally, and cut to a width with a visible '…'.

The one function that makes stored text safe for a terminal is names.printable (the CLI's
too); literal() is it as Textual content, which never reads markup. The cutters here are the
app's, for every screen (the key table, the usage lists, the audit trail).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len, set_cell_size
from textual.content import Content

from apikey_tui.names import printable, shorten

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Event

ELLIPSIS = "…"


def literal(value: str) -> Content:
    """Content that shows value as typed: '[red]' stays '[red]', ESC shows as '\\x1b'."""
    return Content(printable(value))


def actor_text(event: Event) -> str:
    """Who acted, with the SSH client address when there was one."""
    return event.actor + (f" ({event.actor_address})" if event.actor_address else "")


def clip(text: str, width: int) -> str:
    """text cut to width cells with a visible '…' when it was longer."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def fit(text: str, width: int) -> str:
    """text in exactly width cells: padded, or cut with '…' (never silently)."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1) + ELLIPSIS


def fit_middle(text: str, width: int, apart: tuple[int, int] | None = None) -> str:
    """text in exactly width cells: padded, or cut in the middle with '…', both ends kept.

    An ASCII text (every valid name and owner) is cut by names.shorten, the CLI's rule, which
    keeps the part where it differs from its look-alikes (apart: names.look_alikes).
    """
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    if text.isascii():
        return set_cell_size(shorten(text, width, apart), width)
    if width <= 2:
        return fit(text, width)
    tail = max((width - 1) // 2, 1)  # as names.shorten
    head = width - 1 - tail
    end = text[-tail:]
    while cell_len(end) > tail:  # wide characters: fewer of them
        end = end[1:]
    return set_cell_size(set_cell_size(text, head) + ELLIPSIS + end, width)


def fit_parts(parts: Sequence[str], width: int) -> str:
    """parts joined by ' · ' in width cells: the last ones dropped until the rest fit (a status
    line's key hints, which the footer shows too), the first cut with '…' if it must be."""
    kept = list(parts)
    while len(kept) > 1 and cell_len(" · ".join(kept)) > width:
        kept.pop()
    line = " · ".join(kept)
    return line if cell_len(line) <= width else fit(line, width)
