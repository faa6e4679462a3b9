"""A yes/no confirmation that names exactly what will happen; dismisses with True or False."""

from __future__ import annotations

import math
from collections.abc import Sequence

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from apikey_tui.tui.text import literal
from apikey_tui.tui.textual_private import event_clock


class ConfirmDialog(ModalScreen[bool]):
    """Ask before a destructive action; Cancel has the focus, so a stray Enter changes nothing.

    Keys typed in the burst that opened the dialog (`d` and Enter over SSH) reach it before
    anyone could read it, and Textual's first focus went to the first button, Delete. Cancel
    is focused from the start, and a key read before the dialog was mounted (by its own time,
    not the time it is handled) is dropped by the app (`read_before_shown`): the question
    stays until it is answered.
    """

    AUTO_FOCUS = "#cancel"  # the screen's first focus, at once (a focus() call waits a turn)
    BINDINGS = [
        Binding("escape", "answer(False)", "Cancel"),
        Binding("y", "answer(True)", "Yes"),
        Binding("left,right", "other_button", "Other button", show=False),
    ]

    def __init__(self, title: str, body: str | Sequence[str], confirm_label: str) -> None:
        """body: a paragraph, or lines (each shown literally, on a line of its own)."""
        super().__init__()
        self._title, self._body, self._confirm_label = title, body, confirm_label
        # When it was mounted, on Textual's event clock: only a key read after can answer.
        self._shown_at = math.inf

    @property
    def confirm_label(self) -> str:
        """What the confirm button does ('Delete', 'Rotate' …): names a failure too."""
        return self._confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog danger"):
            yield Static(literal(self._title), classes="dialog-title")
            # Not focusable: Tab, Left and Right move between the two buttons only.
            with VerticalScroll(classes="dialog-scroll", can_focus=False):
                lines = [self._body] if isinstance(self._body, str) else self._body
                yield Static(Content("\n").join(map(literal, lines)), classes="dialog-body")
            with Horizontal(classes="buttons"):
                yield Button(self._confirm_label, variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._shown_at = event_clock()

    def read_before_shown(self, key: events.Key) -> bool:
        """Whether key was read before the dialog was mounted: no answer to the question.

        By the key's own time: the burst that opened the dialog was read before the app
        handled its first key, so before this mount, however late a slow machine handles the
        rest of it (a flag set at the first paint let a late Enter press Cancel). The mount,
        not the paint: a key read after the paint is someone's answer."""
        return key.time < self._shown_at

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id == "confirm")

    def action_other_button(self) -> None:
        """Move the focus to the button that does not have it (Cancel when neither does)."""
        other = "confirm" if self.focused is not None and self.focused.id == "cancel" else "cancel"
        self.query_one(f"#{other}", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
