"""The create-key dialog: owner (in all-owners mode), a validated name and a scope multi-select."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import check_owner, key_name_problem
from apikey_tui.store import ScopeInfo
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.text import literal


@dataclass(frozen=True)
class NewKeyRequest:
    """What the admin asked for; the caller does the creating."""

    owner: str
    name: str
    scopes: tuple[str, ...]


class CreateKeyDialog(ModalScreen[NewKeyRequest | None]):
    """Validates as the admin types; Create is enabled only for a valid name and some scope."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        scopes: list[ScopeInfo],
        *,
        owner: str,
        ask_owner: bool,
        taken: Callable[[str, str], bool],
    ) -> None:
        super().__init__()
        self._scopes, self._owner, self._ask_owner, self._taken = scopes, owner, ask_owner, taken

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("New API key", classes="dialog-title")
            # Scrolls when the terminal is short; the buttons below stay on screen.
            with VerticalScroll(classes="dialog-scroll"):
                # Each label stands left of its input, on the same line: no extra row at 80x24.
                if self._ask_owner:
                    with Horizontal(classes="field"):
                        yield Static("Owner:", classes="field-label")
                        yield Input(
                            self._owner,
                            placeholder="the user the key stands in for",
                            id="owner",
                            compact=True,
                        )
                else:
                    yield Static(literal(f"Owner: {self._owner}"), classes="dim")
                with Horizontal(classes="field"):
                    yield Static("Name:", classes="field-label")
                    yield Input(
                        placeholder="a unique name, e.g. ci-deploy",
                        id="name",
                        max_length=64,
                        compact=True,
                    )
                yield Static("", id="name-error", classes="error")
                yield Static(
                    "Scope: select only the APIs this key needs (Space toggles)", classes="label"
                )
                yield ScopePicker(self._scopes, id="scopes")
                yield Static("", id="scope-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Create", variant="primary", id="create", disabled=True)
                # Tab never lands on Cancel, so Enter cannot throw the input away by accident:
                # Escape cancels (or a click); Tab moves between the name, the scopes and Create.
                cancel = Button("Cancel (Esc)", id="cancel")
                cancel.can_focus = False
                yield cancel

    def on_mount(self) -> None:
        self.query_one("#name", Input).focus()
        self.on_resize()

    def on_resize(self) -> None:
        # Border 2, title 2, owner 2, name 1, its error 1, label 1, scope error 1, buttons 3.
        self.query_one("#scopes", ScopePicker).fit_to(self.app.size.height, 13)

    def _owner_value(self) -> str:
        return self.query_one("#owner", Input).value.strip() if self._ask_owner else self._owner

    def _problems(self) -> tuple[str | None, str | None]:
        """(name problem, scope problem), each None when fine."""
        name = self.query_one("#name", Input).value
        owner = self._owner_value()
        problem = key_name_problem(name)
        if problem is None and self._ask_owner:
            try:
                check_owner(owner)
            except InvalidInputError as exc:
                problem = str(exc)
        if problem is None and self._taken(owner, name):
            problem = f"{owner} already has a key named {name!r}"
        chosen = self.query_one("#scopes", ScopePicker).selected
        return problem, None if chosen else "select at least one scope"

    @on(Input.Changed)
    @on(ScopePicker.Changed)
    def _revalidate(self) -> None:
        name_problem, scope_problem = self._problems()
        typed = bool(self.query_one("#name", Input).value)
        # An untouched empty name is not yet an error; an emptied one is.
        self.query_one("#name-error", Static).update(literal(name_problem or "") if typed else "")
        self.query_one("#scope-error", Static).update(scope_problem or "")
        self.query_one("#create", Button).disabled = bool(name_problem or scope_problem)

    @on(Input.Submitted)
    @on(Button.Pressed, "#create")
    def _create(self) -> None:
        name_problem, scope_problem = self._problems()
        if name_problem or scope_problem:
            self._revalidate()
            self.query_one("#name-error", Static).update(literal(name_problem or ""))
            return
        scopes = self.query_one("#scopes", ScopePicker).selected
        name = self.query_one("#name", Input).value
        self.dismiss(NewKeyRequest(self._owner_value(), name, scopes))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
