"""A confirmation that also asks for one value (a grace, an expiry, a reason), checked as typed.

The title names the key; the value is read by the same parser the CLI uses (names.*), so the
app and the command line accept exactly the same text. Dismisses with the parsed value, or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.text import literal

T = TypeVar("T")


@dataclass(frozen=True)
class Answer(Generic[T]):
    """What the admin confirmed: the parsed value (wrapped, so a value of 0 or '' is a yes), and
    the text it was read from (to ask again with it, should the store refuse the value)."""

    value: T
    text: str = ""


class AskValueDialog(TypeAheadDialog[Answer[T] | None], Generic[T]):
    """Title naming the key, what will happen, one input; the confirm button needs a valid value."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        title: str,
        body: str,
        *,
        prompt: str,
        parse: Callable[[str], T],
        confirm_label: str,
        value: str = "",
        placeholder: str = "",
        max_length: int = 0,
        refused: str = "",
    ) -> None:
        super().__init__()
        self._title, self._body, self._prompt = title, body, prompt
        self._parse, self._confirm_label = parse, confirm_label
        self._value, self._placeholder, self._max_length = value, placeholder, max_length
        self._refused = refused  # why the store refused this text last time, shown until edited

    def again(self, text: str, refused: str) -> AskValueDialog[T]:
        """This dialog once more, holding text and saying why the store refused it."""
        return AskValueDialog(
            self._title,
            self._body,
            prompt=self._prompt,
            parse=self._parse,
            confirm_label=self._confirm_label,
            value=text,
            placeholder=self._placeholder,
            max_length=self._max_length,
            refused=refused,
        )

    @property
    def confirm_label(self) -> str:
        """What the confirm button does ('Delete', 'Rotate' …): names a failure too."""
        return self._confirm_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog danger"):
            yield Static(literal(self._title), classes="dialog-title")
            with VerticalScroll(classes="dialog-scroll", can_focus=False):
                yield Static(literal(self._body), classes="dialog-body")
                yield Static(literal(self._prompt), classes="label")
                yield Input(
                    self._value,
                    placeholder=self._placeholder,
                    id="value",
                    max_length=self._max_length,
                )
                yield Static("", id="value-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button(self._confirm_label, variant="error", id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_first(self.query_one("#value", Input))
        self._revalidate()

    def _answer(self) -> tuple[Answer[T] | None, str | None]:
        """(the parsed value, None) or (None, what is wrong)."""
        text = self.query_one("#value", Input).value
        try:
            return Answer(self._parse(text), text), None
        except InvalidInputError as exc:
            return None, str(exc)

    @on(Input.Changed)
    def _revalidate(self) -> None:
        _, problem = self._answer()
        # An empty box is not yet a mistake: the button waits, and nothing is shown in red.
        text = self.query_one("#value", Input).value
        if self._refused and text == self._value:  # the store's refusal, until it is edited
            problem = problem or self._refused
        empty = not text.strip()
        self.query_one("#value-error", Static).update(literal("" if empty else problem or ""))
        self.query_one("#confirm", Button).disabled = problem is not None

    @on(Input.Submitted)
    @on(Button.Pressed, "#confirm")
    def _confirm(self) -> None:
        answer, _ = self._answer()
        if answer is not None:
            self.dismiss(answer)
        else:
            self._revalidate()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
