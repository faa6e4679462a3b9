"""Counts as a line of block characters: the CLI's per-day line and the app's 7-day column."""

from __future__ import annotations

from collections.abc import Sequence

SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[int]) -> str:
    """Values as a line of block characters, the highest as a full block, zero as the lowest."""
    top = max(values, default=0)
    if top == 0:
        return SPARKS[0] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, v * (len(SPARKS) - 1) // top)] for v in values)
