"""Screenshots of the app with every secret on screen blanked: the picture, less the key."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from textual.app import App
from textual.geometry import Region
from textual.strip import Strip

from apikey_tui.tui.textual_private import LayoutUpdate, screen_update

MASK = "•"


def _masked(text: str) -> str:
    return "".join(ch if ch.isspace() else MASK * cell_len(ch) for ch in text)


def blanked(update: LayoutUpdate, hidden: Iterable[Region]) -> LayoutUpdate:
    """The update with every cell inside the hidden regions masked (styles kept)."""
    lines = [Strip.join(line) for line in update.strips]
    origin = update.region
    for region in hidden:
        for y in range(region.y, region.bottom):
            row = y - origin.y
            if not 0 <= row < len(lines):
                continue
            strip = lines[row]
            start, end = region.x - origin.x, region.right - origin.x
            middle = Strip(
                Segment(_masked(segment.text), segment.style) for segment in strip.crop(start, end)
            )
            lines[row] = Strip.join([strip.crop(0, start), middle, strip.crop(end)])
    return LayoutUpdate([[line] for line in lines], origin)


def export_svg(app: App[Any], hidden: Iterable[Region], *, title: str, simplify: bool) -> str:
    """App.export_screenshot (same console, same frame), with the hidden regions masked."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(blanked(screen_update(app, simplify=simplify), hidden))
    return console.export_svg(title=title)
