"""The owner switch: one owner's keys (a validated name) or every owner's; dismisses OwnerChoice."""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import OWNER_MAX, check_owner
from apikey_tui.tui.text import literal


@dataclass(frozen=True)
class OwnerChoice:
    """Whose keys to show: an owner, or None for every owner."""

    owner: str | None


class SwitchOwnerDialog(ModalScreen[OwnerChoice | None]):
    """Show is enabled only for a valid owner name; 'All owners' needs no name."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str | None, suggestion: str) -> None:
        super().__init__()
        self._current, self._suggestion = current, suggestion

    def compose(self) -> ComposeResult:
        shown = "all owners" if self._current is None else f"owner {self._current}"
        with Vertical(classes="dialog"):
            yield Static("Switch owner", classes="dialog-title")
            yield Static(literal(f"Now showing the keys of {shown}."), classes="dim")
            yield Input(
                self._current or self._suggestion,
                placeholder="owner (the user the keys stand in for)",
                id="owner",
                max_length=OWNER_MAX,
            )
            yield Static("", id="owner-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Show owner", variant="primary", id="show")
                yield Button("All owners", id="all")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#owner", Input).focus()

    def _problem(self) -> str | None:
        try:
            check_owner(self.query_one("#owner", Input).value.strip())
        except InvalidInputError as exc:
            return str(exc)
        return None

    @on(Input.Changed)
    def _revalidate(self) -> None:
        problem = self._problem()
        self.query_one("#owner-error", Static).update(literal(problem or ""))
        self.query_one("#show", Button).disabled = problem is not None

    @on(Input.Submitted)
    @on(Button.Pressed, "#show")
    def _show_owner(self) -> None:
        if self._problem() is None:
            self.dismiss(OwnerChoice(self.query_one("#owner", Input).value.strip()))
        else:
            self._revalidate()

    @on(Button.Pressed, "#all")
    def _all_owners(self) -> None:
        self.dismiss(OwnerChoice(None))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
