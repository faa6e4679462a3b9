"""The owner switch: pick an owner that has keys (with their counts), type a new one, or choose
every owner's keys; dismisses OwnerChoice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Input, OptionList, Static
from textual.widgets.option_list import Option

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import OWNER_MAX, check_owner, printable
from apikey_tui.tui.dialogs.type_ahead import TypeAheadDialog
from apikey_tui.tui.text import literal
from apikey_tui.tui.workers import Failure, WorkerHost

OwnerCounts = Callable[[], list[tuple[str, int]]]


@dataclass(frozen=True)
class OwnerChoice:
    """Whose keys to show: an owner, or None for every owner."""

    owner: str | None


def _keys(count: int) -> str:
    return f"{count:,} key" if count == 1 else f"{count:,} keys"


class SwitchOwnerDialog(WorkerHost, TypeAheadDialog[OwnerChoice | None]):
    """The owners that have keys, with their counts, narrowed by what is typed; free text still
    names a new owner, and the dialog says plainly when the typed owner has no keys (a typo must
    not look like a real owner). Show is enabled only for a valid owner name; 'All owners'
    needs no name. ↓ moves from the name into the list; Enter there shows that owner.

    Enter in the name takes the one owner that matches what is typed (as fzf and k9s do: 'ali'
    then Enter is alice); the Show owner button takes the text as typed, a new owner included.
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "to_owners", "the owners' list", show=False),
    ]

    def __init__(self, current: str | None, suggestion: str, owners: OwnerCounts) -> None:
        super().__init__()
        self._current, self._suggestion, self._read_owners = current, suggestion, owners
        self._counts: dict[str, int] | None = None  # None until read

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
            yield Static("Reading the owners…", id="owner-note", classes="dim")
            yield OptionList(id="owners")
            with Horizontal(classes="buttons"):
                yield Button("Show owner", variant="primary", id="show")
                yield Button("All owners", id="all")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.focus_first(self.query_one("#owner", Input))
        self._load()

    @work(thread=True, exit_on_error=False, description="Reading the owners")
    def _load(self) -> None:
        """Read the owners off the event loop (a GROUP BY on the owner index)."""
        counts = self._read_owners()
        self.app.call_from_thread(self._loaded, counts)

    def work_failed(self, failure: Failure) -> None:
        """The owners were not read (the one boundary: workers.WorkerHost)."""
        note = f"Owners not read: {failure.line()}"
        self.query_one("#owner-note", Static).update(literal(note))

    def _loaded(self, counts: list[tuple[str, int]]) -> None:
        self._counts = dict(counts)
        self._revalidate()

    def _typed(self) -> str:
        return self.query_one("#owner", Input).value.strip()

    def _problem(self) -> str | None:
        try:
            check_owner(self._typed())
        except InvalidInputError as exc:
            return str(exc)
        return None

    def _matches(self, typed: str) -> list[str]:
        """The owners with keys whose name holds typed (none before they are read)."""
        return [o for o in self._counts or {} if typed.lower() in o.lower()]

    def _fill(self, typed: str) -> None:
        """The owners whose name holds typed (every owner for the current or no text)."""
        assert self._counts is not None
        everyone = not typed or typed in (self._current, self._suggestion)
        found = list(self._counts) if everyone else self._matches(typed)
        width = max((len(printable(o)) for o in found), default=0)
        listing = self.query_one("#owners", OptionList)
        listing.clear_options()
        for owner in found:
            name = printable(owner)
            line = Text(name.ljust(width) + "  ")
            line.append(_keys(self._counts[owner]), style="dim")
            listing.add_option(Option(line, id=owner))
        listing.display = bool(found)

    @on(Input.Changed)
    def _revalidate(self) -> None:
        problem = self._problem()
        self.query_one("#owner-error", Static).update(literal(problem or ""))
        self.query_one("#show", Button).disabled = problem is not None
        if self._counts is None:
            return
        typed = self._typed()
        self._fill(typed)
        note = self.query_one("#owner-note", Static)
        if problem is not None or not typed:
            note.update(f"{len(self._counts):,} owners have keys.")
        elif typed in self._counts:
            note.update(literal(f"{typed} has {_keys(self._counts[typed])}."))
        elif len(matches := self._matches(typed)) == 1:
            note.update(
                literal(
                    f"Enter shows {matches[0]}, the one owner that matches; Show owner makes "
                    f"{typed} a new owner, with no keys yet."
                )
            )
        else:
            note.update(
                literal(f"{typed} has no keys in this database: a new owner (is it spelled right?)")
            )

    def action_to_owners(self) -> None:
        """↓ from the name: into the owners' list, on its first owner."""
        listing = self.query_one("#owners", OptionList)
        if listing.display and listing.option_count:
            self.set_focus(listing)  # at once: an Enter typed right after ↓ picks from the list
            if listing.highlighted is None:
                listing.highlighted = 0

    @on(OptionList.OptionSelected, "#owners")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(OwnerChoice(event.option.id))

    @on(Input.Submitted)
    def _enter(self) -> None:
        typed = self._typed()
        matches = self._matches(typed)
        if self._counts is not None and typed not in self._counts and len(matches) == 1:
            self.dismiss(OwnerChoice(matches[0]))
        else:
            self._show_owner()

    @on(Button.Pressed, "#show")
    def _show_owner(self) -> None:
        if self._problem() is None:
            self.dismiss(OwnerChoice(self._typed()))
        else:
            self._revalidate()

    @on(Button.Pressed, "#all")
    def _all_owners(self) -> None:
        self.dismiss(OwnerChoice(None))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
