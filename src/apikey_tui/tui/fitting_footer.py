"""The footer of every screen: compact below 80 columns, so "q Quit" is never pushed off."""

from __future__ import annotations

from textual import events
from textual.widgets import Footer

COMPACT_BELOW = 80  # columns: at 70 the roomy footer lost its last key, "q Quit"


class FittingFooter(Footer):
    """Textual's footer, dropping the padding around each key when the terminal is narrow."""

    def on_resize(self, event: events.Resize) -> None:
        self.compact = event.size.width < COMPACT_BELOW
