"""ScopePicker: the scope multi-select of the create and edit-scopes dialogs.

Every row says `[x]` or `[ ]`, so a chosen scope differs from the others by more than colour
(a monochrome terminal, a colour-blind admin, a screenshot in a ticket), and each scope's
description wraps under itself instead of being cut. Textual's SelectionList cannot do the
second: it draws its checkbox assuming one line per option. This is an OptionList whose
prompts are rebuilt, marker included, whenever a scope is toggled.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from apikey_tui.names import printable

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import ScopeInfo

CHOSEN, NOT_CHOSEN = "[x]", "[ ]"  # ASCII: the same in every terminal, font and tmux
_NAME_WIDTH_MAX = 24  # a longer scope name folds; the description keeps room to be read
_MIN_HEIGHT = 4  # border and two lines: below that the dialog scrolls instead


class ScopePicker(OptionList):
    """Space or Enter (or a click) toggles the highlighted scope; posts Changed."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "select", "Toggle scope", show=False),
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
    ]

    class Changed(Message):
        """The set of chosen scopes changed."""

        def __init__(self, picker: ScopePicker) -> None:
            super().__init__()
            self.picker = picker

        @property
        def control(self) -> ScopePicker:
            return self.picker

    def __init__(
        self, scopes: Iterable[ScopeInfo], chosen: Iterable[str] = (), *, id: str | None = None
    ) -> None:
        self._scopes = {s.name: s for s in scopes}
        self._chosen = {name for name in chosen if name in self._scopes}
        names = [printable(name) for name in self._scopes]
        self._name_width = min(max((cell_len(n) for n in names), default=0), _NAME_WIDTH_MAX)
        super().__init__(*(Option(self._prompt(name), id=name) for name in self._scopes), id=id)

    # --- what the dialogs use -----------------------------------------------------------------

    @property
    def selected(self) -> tuple[str, ...]:
        """The chosen scopes, sorted by name."""
        return tuple(sorted(self._chosen))

    def is_chosen(self, name: str) -> bool:
        return name in self._chosen

    def select(self, name: str) -> None:
        self._set(name, True)

    def deselect(self, name: str) -> None:
        self._set(name, False)

    def toggle(self, name: str) -> None:
        self._set(name, name not in self._chosen)

    def deselect_all(self) -> None:
        for name in list(self._chosen):
            self._set(name, False)

    def fit_to(self, terminal_height: int, other_rows: int) -> None:
        """Grow to what the dialog leaves of the terminal: more scopes in view on a tall one."""
        self.styles.max_height = max(terminal_height - other_rows, _MIN_HEIGHT)

    # --- drawing and toggling -----------------------------------------------------------------

    def _prompt(self, name: str) -> Table:
        """One scope: marker, name, and the description wrapping in its own column."""
        chosen = name in self._chosen
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(no_wrap=True)
        grid.add_column(width=self._name_width, overflow="fold")
        grid.add_column(ratio=1, overflow="fold")
        grid.add_row(
            Text(CHOSEN if chosen else NOT_CHOSEN, style="bold" if chosen else ""),
            Text(printable(name), style="bold"),
            Text(printable(self._scopes[name].description)),
        )
        return grid

    def _set(self, name: str, chosen: bool) -> None:
        if name not in self._scopes:
            raise KeyError(name)
        if (name in self._chosen) == chosen:
            return
        if chosen:
            self._chosen.add(name)
        else:
            self._chosen.discard(name)
        self.replace_option_prompt(name, self._prompt(name))
        self.post_message(self.Changed(self))

    def action_select(self) -> None:
        """Toggle the highlighted scope (Enter, Space, or a click on it)."""
        if self.highlighted is not None:
            option_id = self.get_option_at_index(self.highlighted).id
            if option_id is not None:
                self.toggle(option_id)
