"""The create-key dialog: owner (in all-owners mode), a validated name, scopes, an expiry and
limits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Input, Static

from apikey_tui.errors import (
    ApiKeyError,
    InvalidInputError,
    LifetimePolicyError,
    UnknownScopeError,
)
from apikey_tui.limits.model import Limit, check_limits, parse_limit
from apikey_tui.names import check_owner, key_name_problem, read_expiry
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
    expires_text: str = ""  # what was typed for it, to ask again should the store refuse it
    limits: tuple[Limit, ...] = ()  # none by default
    limits_text: str = ""  # what was typed for them, as expires_text


def parse_limits(text: str) -> tuple[Limit, ...]:
    """The limits typed for a key: N/DURATION words as `--limit` reads each, or none (or
    blank) for none. The rules of a key's set of limits (one per window, at most 8) are the
    store's: it refuses, and the dialog that asked comes back saying why."""
    words = text.split()
    if [word.lower() for word in words] == ["none"]:
        return ()
    if any(word.lower() == "none" for word in words):
        raise InvalidInputError("give limits, or none alone")
    return tuple(parse_limit(word) for word in words)


def read_limits(text: str) -> tuple[tuple[Limit, ...], str | None]:
    """(the limits text asks for, None) or ((), why not): `parse_limits`, as the form checks."""
    try:
        return parse_limits(text), None
    except InvalidInputError as exc:
        return (), str(exc)


def limits_refused(request: NewKeyRequest) -> bool:
    """Whether the store's refusal of request was of its limits (their set breaks a rule)."""
    try:
        check_limits(request.limits)
    except InvalidInputError:
        return True
    return False


def expiry_problem(text: str, now: datetime) -> tuple[Expiry | None, str | None]:
    """(the expiry text asks for, None) or (None, why not): blank is the default; otherwise as
    `keys create --expires` reads it and the store would take it (names.read_expiry), so a
    moment not in the future is refused here, while what was typed stays."""
    if not text.strip():
        return None, None
    try:
        return read_expiry(text, now), None
    except InvalidInputError as exc:
        return None, str(exc)


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
        typed: NewKeyRequest | None = None,
        refused: tuple[str, str] | None = None,
    ) -> None:
        """typed: the form as filled in before; refused: (field id, why the store refused it),
        shown on that field until it is edited."""
        super().__init__()
        self._scopes, self._owner, self._ask_owner, self._taken = scopes, owner, ask_owner, taken
        self._clock = clock  # the store's: an expiry is judged on the clock that will keep it
        self._typed, self._refused = typed, refused

    def again(self, request: NewKeyRequest, error: ApiKeyError) -> CreateKeyDialog:
        """This dialog once more, filled in as request, saying why the store refused it."""
        if isinstance(error, LifetimePolicyError):
            field = "expires"
        elif isinstance(error, UnknownScopeError):
            field = "scopes"
        elif isinstance(error, InvalidInputError) and limits_refused(request):
            field = "limits"
        else:
            field = "name"
        return CreateKeyDialog(
            self._scopes,
            owner=request.owner,
            ask_owner=self._ask_owner,
            taken=self._taken,
            clock=self._clock,
            typed=request,
            refused=(field, str(error)),
        )

    def _refusal(self, field: str, value: object) -> str | None:
        """The store's refusal of field, while it holds what was refused."""
        if self._refused is None or self._refused[0] != field or self._typed is None:
            return None
        was = {
            "name": (self._typed.owner, self._typed.name),
            "expires": self._typed.expires_text,
            "scopes": self._typed.scopes,
            "limits": self._typed.limits_text,
        }[field]
        return self._refused[1] if value == was else None

    def compose(self) -> ComposeResult:
        typed = self._typed
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
                        typed.name if typed else "",
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
                        typed.expires_text if typed else "",
                        placeholder="blank: the default; 90d, 2030-01-31 or never",
                        id="expires",
                        compact=True,
                    )
                expires_error = Static("", id="expires-error", classes="error")
                expires_error.display = False
                yield expires_error
                with Horizontal(classes="field"):
                    yield Static("Limits:", classes="field-label")
                    yield Input(
                        typed.limits_text if typed else "",
                        placeholder="blank: none; e.g. 600/m 10000/d",
                        id="limits",
                        compact=True,
                    )
                limits_error = Static("", id="limits-error", classes="error")
                limits_error.display = False
                yield limits_error
            with Horizontal(classes="buttons"):
                yield Button("Create", variant="primary", id="create", disabled=True)
                # Tab never lands on Cancel, so Enter cannot throw the input away by accident:
                # Escape cancels (or a click); Tab moves between the name, the scopes and Create.
                cancel = Button("Cancel (Esc)", id="cancel")
                cancel.can_focus = False
                yield cancel

    def on_mount(self) -> None:
        if self._typed is not None:
            picker = self.query_one("#scopes", ScopePicker)
            for scope in self._typed.scopes:
                picker.select(scope)
        # Asked again after a refusal: the field the store refused has the focus.
        field = "name" if self._refused is None else self._refused[0]
        self.focus_first(self.query_one(f"#{field}"))
        self.on_resize()
        if self._typed is not None:
            self._revalidate()

    def on_resize(self) -> None:
        # Border 2, title 2, owner 2 (4 as a bordered input), name 1, its error 1, label 1,
        # scope error 1, expires 1, limits 1, buttons 3 (the expiry's and the limits' errors
        # show only when there is one: the middle scrolls then).
        around = 17 if self._ask_owner else 15
        self.query_one("#scopes", ScopePicker).fit_to(self.app.size.height, around)

    def _owner_value(self) -> str:
        return self.query_one("#owner", Input).value.strip() if self._ask_owner else self._owner

    def _expiry(self) -> tuple[Expiry | None, str | None]:
        text = self.query_one("#expires", Input).value
        expires, problem = expiry_problem(text, self._clock())
        return expires, problem or self._refusal("expires", text)

    def _limits(self) -> tuple[tuple[Limit, ...], str | None]:
        text = self.query_one("#limits", Input).value
        limits, problem = read_limits(text)
        return limits, problem or self._refusal("limits", text)

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
        problem = problem or self._refusal("name", (owner, name))
        chosen = self.query_one("#scopes", ScopePicker).selected
        scope_problem = None if chosen else "select at least one scope"
        return problem, scope_problem or self._refusal("scopes", chosen)

    @on(Input.Changed)
    @on(ScopePicker.Changed)
    def _revalidate(self) -> None:
        name_problem, scope_problem = self._problems()
        typed = bool(self.query_one("#name", Input).value)
        # An untouched empty name is not yet an error; an emptied one is. Nor is the untouched
        # scope list: the Owner field's first value (every owner shown) is no admin's input.
        self.query_one("#name-error", Static).update(literal(name_problem or "") if typed else "")
        self.query_one("#scope-error", Static).update(scope_problem or "" if typed else "")
        expiry_error = self.query_one("#expires-error", Static)
        _, expires_problem = self._expiry()
        expiry_error.update(literal(expires_problem or ""))
        expiry_error.display = expires_problem is not None
        limits_error = self.query_one("#limits-error", Static)
        _, limits_problem = self._limits()
        limits_error.update(literal(limits_problem or ""))
        limits_error.display = limits_problem is not None
        problems = (name_problem, scope_problem, expires_problem, limits_problem)
        self.query_one("#create", Button).disabled = any(problems)

    @on(Input.Submitted)
    @on(Button.Pressed, "#create")
    def _create(self) -> None:
        name_problem, scope_problem = self._problems()
        expires, expires_problem = self._expiry()
        limits, limits_problem = self._limits()
        if name_problem or scope_problem or expires_problem or limits_problem:
            self._revalidate()
            self.query_one("#name-error", Static).update(literal(name_problem or ""))
            self.query_one("#scope-error", Static).update(scope_problem or "")
            return
        scopes = self.query_one("#scopes", ScopePicker).selected
        name = self.query_one("#name", Input).value
        text = self.query_one("#expires", Input).value
        limits_text = self.query_one("#limits", Input).value
        self.dismiss(
            NewKeyRequest(self._owner_value(), name, scopes, expires, text, limits, limits_text)
        )

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
