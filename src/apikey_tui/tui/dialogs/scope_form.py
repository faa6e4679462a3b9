"""The scope form: add a scope (name and description) or describe one; dismisses with ScopeEdit."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import DESCRIPTION_MAX, SCOPE_NAME_MAX, check_description, check_scope_name
from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.text import literal


@dataclass(frozen=True)
class ScopeEdit:
    """A scope name and its description, as the admin entered them; the caller writes them."""

    name: str
    description: str
    new: bool


class ScopeFormDialog(TypeAheadDialog[ScopeEdit | None]):
    """For a new scope, the name is checked as typed (rules, and taken); the description always.

    name=None asks for a new scope's name; a name describes that existing scope.
    """

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self, name: str | None = None, description: str = "", *, taken: Collection[str] = ()
    ) -> None:
        super().__init__()
        self._name, self._description, self._taken = name, description, taken

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            if self._name is None:
                yield Static("New scope", classes="dialog-title")
                yield Input(
                    placeholder="scope name, e.g. serving:admin",
                    id="scope-name",
                    max_length=SCOPE_NAME_MAX,
                )
                yield Static("", id="name-error", classes="error")
            else:
                yield Static(literal(f"Describe scope {self._name!r}"), classes="dialog-title")
            yield Static("What the scope gives access to", classes="label")
            yield Input(
                self._description,
                placeholder="e.g. Served models: predictions",
                id="description",
                max_length=DESCRIPTION_MAX,
            )
            yield Static("", id="description-error", classes="error")
            with Horizontal(classes="buttons"):
                label = "Add" if self._name is None else "Save"
                yield Button(label, variant="primary", id="save", disabled=self._name is None)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_first(
            self.query_one("#scope-name" if self._name is None else "#description", Input)
        )

    def _name_value(self) -> str:
        if self._name is not None:
            return self._name
        return self.query_one("#scope-name", Input).value.strip()

    def _problems(self) -> tuple[str | None, str | None]:
        """(name problem, description problem), each None when fine."""
        name_problem = None
        if self._name is None:
            name = self._name_value()
            try:
                check_scope_name(name)
            except InvalidInputError as exc:
                name_problem = str(exc)
            if name_problem is None and name in self._taken:
                name_problem = f"the catalog already has a scope {name!r}"
        try:
            check_description(self.query_one("#description", Input).value)
        except InvalidInputError as exc:
            return name_problem, str(exc)
        return name_problem, None

    @on(Input.Changed)
    def _revalidate(self) -> None:
        name_problem, description_problem = self._problems()
        if self._name is None:
            typed = bool(self.query_one("#scope-name", Input).value)
            shown = literal(name_problem or "") if typed else ""
            self.query_one("#name-error", Static).update(shown)
        self.query_one("#description-error", Static).update(literal(description_problem or ""))
        self.query_one("#save", Button).disabled = bool(name_problem or description_problem)

    @on(Input.Submitted)
    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        name_problem, description_problem = self._problems()
        if name_problem or description_problem:
            self._revalidate()
            if self._name is None:
                self.query_one("#name-error", Static).update(literal(name_problem or ""))
            return
        description = self.query_one("#description", Input).value.strip()
        self.dismiss(ScopeEdit(self._name_value(), description, new=self._name is None))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
