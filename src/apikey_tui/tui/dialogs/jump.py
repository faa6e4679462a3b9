"""The `:` jump, k9s style: type a view's name (or the start of one) and go there."""

from __future__ import annotations

from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Static

from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.text import literal


def resolve(text: str, names: Sequence[str]) -> tuple[str | None, str | None]:
    """(the view text names, None) or (None, why not): a whole name, or a start only one has."""
    wanted = text.strip().removeprefix(":").strip().lower()
    if not wanted:
        return None, None
    if wanted in names:
        return wanted, None
    starting = [name for name in names if name.startswith(wanted)]
    if len(starting) == 1:
        return starting[0], None
    listed = ", ".join(f":{name}" for name in (starting or names))
    if starting:
        return None, f"{wanted!r} could be {listed}"
    return None, f"no view {wanted!r}: {listed}"


class JumpDialog(TypeAheadDialog[str | None]):
    """A one-line prompt at the bottom; dismisses with a view's name, or None (Escape)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self._names = list(names)

    def compose(self) -> ComposeResult:
        with Vertical(id="jump"):
            yield Static("", id="jump-error", classes="error")
            yield Input(
                placeholder=" ".join(f":{name}" for name in self._names),
                suggester=SuggestFromList(self._names, case_sensitive=False),
                id="view",
            )

    def on_mount(self) -> None:
        self.focus_first(self.query_one("#view", Input))

    @on(Input.Submitted)
    def _go(self, event: Input.Submitted) -> None:
        name, problem = resolve(event.value, self._names)
        if name is not None:
            self.dismiss(name)
        elif problem is None:
            self.dismiss(None)  # Enter on nothing: as Escape
        else:
            self.query_one("#jump-error", Static).update(literal(problem))

    def action_cancel(self) -> None:
        self.dismiss(None)
