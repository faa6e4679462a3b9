"""The create-key dialog: owner (in all-owners mode), a validated name, scopes and an expiry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Static

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import check_expiry, check_owner, key_name_problem, parse_expiry
from apikey_tui.store import ScopeInfo
from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.text import literal

if TYPE_CHECKING:
    from apikey_tui.names import Expiry


@dataclass(frozen=True)
class NewKeyRequest:
    """What the admin asked for; the caller does the creating."""

    owner: str
    name: str
    scopes: tuple[str, ...]
    expires: Expiry | None = None  # None: the default (none, or the lifetime policy's maximum)


def expiry_problem(text: str, now: datetime) -> tuple[Expiry | None, str | None]:
    """(the expiry text asks for, None) or (None, why not): as `keys create --expires` reads it.

    Blank is the default. The CLI's bounds hold (a duration or date at most 100 years away); a
    moment not in the future is refused here rather than by the store, so what was typed stays.
    """
    if not text.strip():
        return None, None
    try:
        expiry = parse_expiry(text)
        if isinstance(expiry, datetime):
            check_expiry(expiry, now)
    except InvalidInputError as exc:
        return None, str(exc)
    if expiry == timedelta(0) or (isinstance(expiry, datetime) and expiry <= now):
        return None, f"expiry {text.strip()!r} is not in the future"
    return expiry, None


class CreateKeyDialog(TypeAheadDialog[NewKeyRequest | None]):
    """Validates as the admin types; Create is enabled only for a valid name and some scope."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        scopes: list[ScopeInfo],
        *,
        owner: str,
        ask_owner: bool,
        taken: Callable[[str, str], bool],
        clock: Callable[[], datetime],
    ) -> None:
        super().__init__()
        self._scopes, self._owner, self._ask_owner, self._taken = scopes, owner, ask_owner, taken
        self._clock = clock  # the store's: an expiry is judged on the clock that will keep it

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("New API key", classes="dialog-title")
            # Scrolls when the terminal is short; the buttons below stay on screen.
            with VerticalScroll(classes="dialog-scroll"):
                # Each label stands left of its input, on the same line: no extra row at 80x24.
                if self._ask_owner:
                    # Bordered: a filled-in owner must look like the input it is, not a label.
                    # Focus leaves its text unselected (Shift+Tab from the name lands here):
                    # a keystroke adds to the owner instead of silently replacing it.
                    with Horizontal(classes="field tall"):
                        yield Static("Owner:", classes="field-label")
                        yield Input(
                            self._owner,
                            placeholder="the user the key stands in for",
                            id="owner",
                            select_on_focus=False,
                        )
                else:
                    with Horizontal(classes="field dim"):
                        yield Static("Owner:", classes="field-label")
                        yield Static(literal(self._owner))
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
                # After the scopes: Tab still goes name, scopes, then here, then Create.
                with Horizontal(classes="field"):
                    yield Static("Expires:", classes="field-label")
                    yield Input(
                        placeholder="blank: the default; 90d, 2030-01-31 or never",
                        id="expires",
                        compact=True,
                    )
                expires_error = Static("", id="expires-error", classes="error")
                expires_error.display = False
                yield expires_error
            with Horizontal(classes="buttons"):
                yield Button("Create", variant="primary", id="create", disabled=True)
                # Tab never lands on Cancel, so Enter cannot throw the input away by accident:
                # Escape cancels (or a click); Tab moves between the name, the scopes and Create.
                cancel = Button("Cancel (Esc)", id="cancel")
                cancel.can_focus = False
                yield cancel

    def on_mount(self) -> None:
        self.focus_first(self.query_one("#name", Input))
        self.on_resize()

    def on_resize(self) -> None:
        # Border 2, title 2, owner 2 (4 as a bordered input), name 1, its error 1, label 1,
        # scope error 1, expires 1, buttons 3 (the expiry's error shows only when there is
        # one: the middle scrolls then).
        around = 16 if self._ask_owner else 14
        self.query_one("#scopes", ScopePicker).fit_to(self.app.size.height, around)

    def _owner_value(self) -> str:
        return self.query_one("#owner", Input).value.strip() if self._ask_owner else self._owner

    def _expiry(self) -> tuple[Expiry | None, str | None]:
        return expiry_problem(self.query_one("#expires", Input).value, self._clock())

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
        expiry_error = self.query_one("#expires-error", Static)
        _, expires_problem = self._expiry()
        expiry_error.update(literal(expires_problem or ""))
        expiry_error.display = expires_problem is not None
        problems = (name_problem, scope_problem, expires_problem)
        self.query_one("#create", Button).disabled = any(problems)

    @on(Input.Submitted)
    @on(Button.Pressed, "#create")
    def _create(self) -> None:
        name_problem, scope_problem = self._problems()
        expires, expires_problem = self._expiry()
        if name_problem or scope_problem or expires_problem:
            self._revalidate()
            self.query_one("#name-error", Static).update(literal(name_problem or ""))
            return
        scopes = self.query_one("#scopes", ScopePicker).selected
        name = self.query_one("#name", Input).value
        self.dismiss(NewKeyRequest(self._owner_value(), name, scopes, expires))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
