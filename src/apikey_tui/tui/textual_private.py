"""Every reach into Textual's private API, named here and nowhere else.

Each has no public way yet; tests/tui/test_textual_private.py fails on the Textual upgrade that
moves or renames one, so an upgrade breaks a test, not the app (or its secrecy) in silence.
"""

from __future__ import annotations

from typing import Any, TypeVar

from textual import events
from textual._compositor import LayoutUpdate
from textual._time import get_time as event_clock  # the clock of each Message.time
from textual.app import App
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.worker import WorkerFailed

R = TypeVar("R")

__all__ = [
    "EarlyKeyScreen",
    "LayoutUpdate",
    "QuietCrashes",
    "event_clock",
    "forget_clipboard",
    "forward_key",
    "screen_update",
]


def forget_clipboard(app: App[Any]) -> None:
    """Empty the app's own copy of what it last copied (App.clipboard): after a reveal closes,
    the secret must live nowhere. copy_to_clipboard("") would also empty the terminal's."""
    app._clipboard = ""


def screen_update(app: App[Any], *, simplify: bool) -> LayoutUpdate:
    """The whole screen as App.export_screenshot draws it (the screens under a dialog too)."""
    update = app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens, simplify=simplify
    )
    assert isinstance(update, LayoutUpdate)  # a full update is always a whole layout
    return update


def forward_key(widget: Widget, key: events.Key) -> None:
    """Hand key to widget as the app hands it a key it routes (marked as forwarded: a key that
    bubbles back up is not routed again)."""
    widget._forward_event(key)


class EarlyKeyScreen(ModalScreen[R]):
    """A dialog that sees first each event the app routes to it (Textual's one entry for that
    is Screen._forward_event), and may keep it: `early_key`."""

    def early_key(self, event: events.Event) -> bool:
        """Whether the screen keeps event (it then goes no further)."""
        return False

    def _forward_event(self, event: events.Event) -> None:
        if not self.early_key(event):
            super()._forward_event(event)


class QuietCrashes(App[None]):
    """An app that never prints a traceback: Textual's prints every frame's locals (in a
    rotation, the new key's plaintext). `crashed` is told of the error instead."""

    def crashed(self, error: BaseException) -> None:
        """An error nothing caught (a worker's, unwrapped); the app then exits with 1."""

    def _handle_exception(self, error: Exception) -> None:
        self.crashed(error.error if isinstance(error, WorkerFailed) else error)
        super()._handle_exception(error)  # return code 1, the error kept for tests, then exit

    def _fatal_error(self) -> None:
        # Textual's own renders a rich traceback with locals, to print at exit: exit without.
        self._close_messages_no_wait()

    def _print_error_renderables(self) -> None:
        # Whatever Textual kept to print at exit (a panic's renderables) stays unprinted.
        self._exit_renderables.clear()
