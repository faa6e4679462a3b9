"""Keys typed ahead of a dialog, in the burst that opened it, reach its first field in order."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual import events
from textual.binding import Binding, BindingType
from textual.widget import Widget

from apikey_tui.tui.textual_private import EarlyKeyScreen, forward_key

R = TypeVar("R")


class TypeAheadDialog(EarlyKeyScreen[R]):
    """A dialog that keeps the keys typed before its first field could take them.

    Over a slow SSH link `n` and the name arrive in one read. The app routes each key to the
    focused widget, and a dialog has none until its mount has run: Textual dropped those keys
    (`nmykey` opened the dialog with an empty name). They are held here and handed, in order,
    to the field `focus_first` focuses; later keys then go to that field behind them.

    Tab and Shift+Tab move the focus as they arrive (priority bindings), not after the key has
    been offered to the field and come back: Textual's own Tab ran only then, so in `Tab Space`
    sent in one read the space landed in the name just left. The keys after a Tab go to the
    field it focused.

    Not for confirmations: a key typed before a question was on screen must not answer it.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "next_field", "Next field", show=False, priority=True),
        Binding("shift+tab", "previous_field", "Previous field", show=False, priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._early: list[events.Key] | None = []  # None once the first field has them

    def early_key(self, event: events.Event) -> bool:
        # A key the app routes here while no field has the focus yet: held for the first one.
        if isinstance(event, events.Key) and self._early is not None and self.focused is None:
            self._early.append(events.Key(event.key, event.character))
            return True
        return False

    def focus_first(self, widget: Widget) -> None:
        """Focus widget now (widget.focus() waits for the queue) and give it the held keys.

        They skip the app's priority bindings (Ctrl+Q, the palette): typed ahead, they are text.
        """
        self.set_focus(widget)
        early, self._early = self._early or [], None
        for key in early:
            if key.key in _MOVES:  # a Tab typed ahead moves on, as it would have then
                self._move(_MOVES[key.key])
            elif self.focused is not None:
                forward_key(self.focused, key)

    def action_next_field(self) -> None:
        self._move(1)

    def action_previous_field(self) -> None:
        self._move(-1)

    def _move(self, step: int) -> None:
        if self._early is not None:  # before the first field: held, in order, with the text
            self._early.append(events.Key(_KEYS[step], None))
        elif step > 0:
            self.focus_next()  # at once (set_focus): the next key already goes to the new field
        else:
            self.focus_previous()


_MOVES = {"tab": 1, "shift+tab": -1}
_KEYS = {step: key for key, step in _MOVES.items()}
