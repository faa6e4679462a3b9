"""The edit-scopes dialog: a key's scopes as a multi-select; dismisses with the new set or None."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.scope_picker import ScopePicker
from apikey_tui.tui.text import literal

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyInfo, ScopeInfo


@dataclass(frozen=True)
class ScopeChange:
    """The scopes the admin chose for a key; the caller confirms and does the change."""

    key: KeyInfo
    scopes: tuple[str, ...]

    @property
    def added(self) -> tuple[str, ...]:
        return tuple(s for s in self.scopes if s not in self.key.scopes)

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(s for s in self.key.scopes if s not in self.scopes)


class EditScopesDialog(TypeAheadDialog[ScopeChange | None]):
    """Save is enabled only when some scope is chosen and the choice differs from today's."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, key: KeyInfo, catalog: list[ScopeInfo]) -> None:
        super().__init__()
        self._key, self._catalog = key, catalog

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(literal(self._title()), classes="dialog-title")
            yield Static("Select only the APIs this key needs (Space toggles)", classes="label")
            yield ScopePicker(self._catalog, self._key.scopes, id="scopes")
            yield Static("", id="scope-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Save", variant="primary", id="save", disabled=True)
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_first(self.query_one("#scopes", ScopePicker))
        self.on_resize()

    def _title(self) -> str:
        return f"Scopes of key {self._key.name!r} of {self._key.owner}"

    def on_resize(self) -> None:
        # Border 2, padding 2, title 2, label 2, scope error 1, buttons 4; a long key name
        # wraps the title onto more lines, and the picker gives them up (Save stays on screen).
        title = self.query_one(".dialog-title", Static)
        width = title.content_region.width or max(min(72, self.app.size.width) - 6, 1)
        lines = len(Text(self._title()).wrap(self.app.console, width))
        self.query_one("#scopes", ScopePicker).fit_to(self.app.size.height, 12 + lines)

    def _chosen(self) -> tuple[str, ...]:
        return self.query_one("#scopes", ScopePicker).selected

    @on(ScopePicker.Changed)
    def _revalidate(self) -> None:
        chosen = self._chosen()
        problem = "" if chosen else "select at least one scope"
        self.query_one("#scope-error", Static).update(problem)
        self.query_one("#save", Button).disabled = not chosen or chosen == self._key.scopes

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        chosen = self._chosen()
        if chosen and chosen != self._key.scopes:
            self.dismiss(ScopeChange(self._key, chosen))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
