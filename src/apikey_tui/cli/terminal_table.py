"""The CLI's tables in a terminal: sized to its width, cells cut as the app cuts them, coloured."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from apikey_tui.names import ELLIPSIS

GAP = "  "
# SGR colours of the state kinds (store.states). Each kind has a word of its own, so colour is
# never the only sign: NO_COLOR and pipes lose nothing.
STATE_COLOURS = {
    "leaked": "1;31",  # bold red
    "expired": "31",  # red
    "disabled": "35",  # magenta
    "soon": "33",  # yellow
    "grace": "36",  # cyan
    "unused": "2",  # dim
    "active": "32",  # green
}


def cut_end(text: str, width: int) -> str:
    """text in at most width characters, cut at the end with '…' (scopes, ids, times)."""
    if len(text) <= width:
        return text
    return text[: width - 1] + ELLIPSIS if width >= 1 else ""


@dataclass(frozen=True)
class Column:
    """A column: its header, how narrow it may be cut, and how (both ends, or the end).

    fair: how narrow it is cut in the first round, before any column goes to its minimum
    (None: the minimum).
    """

    header: str
    minimum: int
    cut: Callable[[str, int], str] = cut_end
    fair: int | None = None


def terminal_width(out: TextIO) -> int | None:
    """The terminal's width if out is a terminal, else None (piped: plain text, not sized)."""
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or replaced stream is no terminal
        return None
    # COLUMNS first (as shutil does), so a user or a test can ask for a width.
    return shutil.get_terminal_size().columns


def colour_wanted(out: TextIO) -> bool:
    """Colour only in a terminal, never with NO_COLOR set (no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return terminal_width(out) is not None


def layout(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    room: int,
    *,
    shrink: Sequence[int],
    drop: Sequence[int],
) -> tuple[list[int], list[int]]:
    """(the columns kept, their widths) so that a row fits room characters.

    Each column wants its widest cell. Columns in shrink are cut, in that order, down to their
    fair width, dropping columns in the order of drop (the fewest that make it fit); only if no
    drop makes it fit so are they cut again in that order down to their minimum (the fewest
    drops again). Nothing fits a tiny terminal: then the narrowest try is kept and the
    terminal wraps.
    """
    wanted = [max([len(c.header)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    kept: list[int] = list(range(len(columns)))
    widths: list[int] = []
    # Fair widths first, dropping columns as needed; only when no drop makes the row fit at
    # fair widths are columns cut down to their minimum (again with the fewest drops).
    for fair_only in (True, False):
        for dropped in range(len(drop) + 1):
            kept = [i for i in range(len(columns)) if i not in drop[:dropped]]
            widths = _shrunk(columns, wanted, kept, room, shrink, fair_only=fair_only)
            if sum(widths) + len(GAP) * (len(kept) - 1) <= room:
                return kept, widths
    return kept, widths


def _shrunk(
    columns: Sequence[Column],
    wanted: list[int],
    kept: list[int],
    room: int,
    order: Sequence[int],
    *,
    fair_only: bool,
) -> list[int]:
    widths = {i: wanted[i] for i in kept}
    over = sum(widths.values()) + len(GAP) * (len(kept) - 1) - room
    for fair in (True,) if fair_only else (True, False):
        for i in order:
            if i in widths and over > 0:
                column = columns[i]
                least = column.fair if fair and column.fair is not None else column.minimum
                give = min(over, widths[i] - min(least, widths[i]))
                widths[i] -= give
                over -= give
    return [widths[i] for i in kept]


def render(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    out: TextIO,
    *,
    room: int,
    shrink: Sequence[int],
    drop: Sequence[int],
    colours: Sequence[str | None] | None = None,
    colour_column: int | None = None,
) -> None:
    """Print the header and rows cut to room; colours[i] (SGR) paints row i's colour_column."""
    kept, widths = layout(columns, rows, room, shrink=shrink, drop=drop)
    header = [columns[i].header for i in kept]
    print(_line(header, widths), file=out)
    for n, row in enumerate(rows):
        cells = []
        for i, width in zip(kept, widths, strict=True):
            cell = columns[i].cut(row[i], width).ljust(width)
            colour = colours[n] if colours is not None and i == colour_column else None
            if colour:
                text = cell.rstrip()
                cell = f"\x1b[{colour}m{text}\x1b[0m" + cell[len(text) :]
            cells.append(cell)
        print(GAP.join(cells).rstrip(), file=out)


def _line(cells: list[str], widths: list[int]) -> str:
    return GAP.join(cut_end(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
