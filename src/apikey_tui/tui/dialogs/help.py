"""The help screen: every key of every view and dialog, read from their bindings, and the rules.

The rows of the key table and the key detail are the action list's (tui.key_actions); the
others are generated from the classes' BINDINGS, so a key added to a view shows up here by
itself (with its binding's description until TEXTS says more). The app, which knows every
view, says which sections there are; a test checks that every class with bindings has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from apikey_tui.tui.key_actions import Where, by_id

CLOSE_HINT = "Escape, ? or q closes · ↑ ↓ PgUp PgDn scroll"

# How keys are written: what is printed on the keycap, not Textual's key names.
_KEY_NAMES = {
    "up": "↑",
    "down": "↓",
    "left": "←",
    "right": "→",
    "pageup": "PgUp",
    "pagedown": "PgDn",
    "home": "Home",
    "end": "End",
    "escape": "Escape",
    "enter": "Enter",
    "space": "Space",
    "colon": ":",
    "tab": "Tab",
    "slash": "/",
    "question_mark": "?",
    "f5": "F5",
}

OTHER_BUTTON = "the other button (Cancel is focused first)"

# What a binding does, in more words than its footer label; keyed by (class name, action).
# Rows with the same text in a section are merged: "↑ k / ↓ j  previous / next key".
TEXTS = {
    ("KeysScreen", "focus_table"): "filter: clear it; again: back to the table",
    ("KeyFilter", "clear_or_leave"): "filter: clear it; again: back to the table",
    ("KeyTable", "move(-1)"): "previous / next key",
    ("KeyTable", "move(1)"): "previous / next key",
    ("KeyTable", "page(-1)"): "a page up / down",
    ("KeyTable", "page(1)"): "a page up / down",
    ("KeyTable", "first"): "first / last key",
    ("KeyTable", "last"): "first / last key",
    ("ApiKeysApp", "quit"): "quit",
    ("LiveScreen", "back"): "back to the key table",
    ("LiveScreen", "reload"): "reload now",
    ("LiveScreen", "app.help"): "this help",
    ("ScopeCatalogScreen", "add"): "add a scope",
    ("ScopeCatalogScreen", "describe"): "describe the selected scope",
    ("ScopeCatalogScreen", "remove"): "remove it (asks; refused while keys hold it)",
    ("ScopeCatalogScreen", "focus_filter"): "filter by scope name or description",
    ("ScopeCatalogScreen", "back"): "from the filter: the scopes; else back",
    ("ScopeCatalogScreen", "list_cursor('down')"): "next / previous scope (as ↓ / ↑)",
    ("ScopeCatalogScreen", "list_cursor('up')"): "next / previous scope (as ↓ / ↑)",
    ("AuditTrailScreen", "list_cursor('down')"): "next / previous event (as ↓ / ↑)",
    ("AuditTrailScreen", "list_cursor('up')"): "next / previous event (as ↓ / ↑)",
    ("AuditTrailScreen", "focus_filter"): "filters: key, actor, action (Tab between)",
    ("AuditTrailScreen", "leaks_only"): "only leak events (key.leak); again: every event",
    ("AuditTrailScreen", "back"): "from a filter: the events; else back",
    ("OwnersScreen", "owner_keys"): "the selected owner's keys",
    ("OwnersScreen", "edit_pool"): "set its limit pool, which all its keys draw from",
    ("OwnersScreen", "offboard"): "offboard a person: shows what happens, asks first",
    ("OwnersScreen", "undo"): "undo the last pool change or offboarding",
    ("OwnersScreen", "list_cursor('down')"): "next / previous owner (as ↓ / ↑)",
    ("OwnersScreen", "list_cursor('up')"): "next / previous owner (as ↓ / ↑)",
    ("OwnersScreen", "back"): "back to the key table",
    ("CreateKeyDialog", "cancel"): "cancel: nothing is written",
    ("EditScopesDialog", "cancel"): "cancel: nothing is written",
    ("ScopePicker", "select"): "choose or drop a scope ([x]: chosen)",
    ("ScopePicker", "cursor_up"): "previous / next scope",
    ("ScopePicker", "cursor_down"): "previous / next scope",
    ("RevealSecretDialog", "copy"): "copy the key to your clipboard (OSC 52)",
    ("RevealSecretDialog", "done"): "close; asks again if never copied",
    ("ConfirmDialog", "answer(False)"): "no: nothing is done",
    ("ConfirmDialog", "answer(True)"): "yes: do it",
    ("ConfirmDialog", "other_button"): OTHER_BUTTON,
    ("SwitchOwnerDialog", "cancel"): "cancel: nothing is written",
    ("AskValueDialog", "cancel"): "cancel: nothing is done",
    ("ScopeFormDialog", "cancel"): "cancel: nothing is written",
    (
        "TypeAheadDialog",
        "next_field",
    ): "next / previous field, at once: keys typed behind it go there",
    ("TypeAheadDialog", "previous_field"): (
        "next / previous field, at once: keys typed behind it go there"
    ),
    ("HelpScreen", "close"): "close this help",
    ("HelpScreen", "scroll_down"): "scroll",
    ("HelpScreen", "scroll_up"): "scroll",
}

ABOUT = Content.from_markup(
    "A key lets a program call the service with [b]Authorization: ApiKey <key>[/b] instead of a "
    "username and password. It reaches only the APIs in its scopes; a served model needs both "
    "[b]serving[/b] and [b]project[/b]."
)

RULES = """\
1. Treat a key like a password.
2. Select only the APIs the key needs.
3. A stolen key is deleted and recreated (r).
4. Store the key somewhere safe when it is shown.
5. A lost key cannot be recovered: only its hash is stored."""

Row = tuple[str, str]  # keys, what they do


def described_bindings(owner: type) -> list[tuple[Binding, str]]:
    """A class's bindings (its own and inherited, the nearest first) with what each does."""
    found: dict[str, tuple[Binding, str]] = {}
    for cls in owner.__mro__:
        for binding in own_bindings(cls):
            if binding.action not in found:
                text = TEXTS.get((cls.__name__, binding.action), binding.description)
                found[binding.action] = (binding, text)
    return list(found.values())


@dataclass(frozen=True)
class Section:
    """A titled table of keys: a screen's actions, the own bindings of some classes, and keys
    no binding names."""

    title: str
    owners: tuple[type, ...]
    extra: tuple[Row, ...] = ()
    where: Where | None = None  # the screen whose actions (tui.key_actions) come first

    def rows(self) -> list[Row]:
        """The actions, one row per other binding, then the extras; same text: one row."""
        listed = by_id(self.where) if self.where is not None else {}
        # a view reached only by the `:` jump shows as what to type (':keys')
        rows = [
            (key_text(Binding(a.keys or f":{a.view}", a.id)), a.description)
            for a in listed.values()
        ]
        rows += [
            (key_text(binding), TEXTS.get((owner.__name__, binding.action), binding.description))
            for owner in self.owners
            for binding in own_bindings(owner)
            if binding.action not in listed
        ]
        merged: dict[str, list[str]] = {}
        for keys, text in [*rows, *self.extra]:
            if keys not in merged.setdefault(text, []):
                merged[text].append(keys)
        return [(" / ".join(keys), text) for text, keys in merged.items()]


def own_bindings(owner: type) -> list[Binding]:
    """The bindings a class declares itself (not those it inherits), as Binding objects."""
    found: Iterable[BindingType] = owner.__dict__.get("BINDINGS", [])
    result = []
    for item in found:
        binding = item if isinstance(item, Binding) else Binding(*item)
        result.append(binding)
    return result


def key_text(binding: Binding) -> str:
    """'up,k' -> '↑ k'; 'question_mark' -> '?'; a binding's key_display wins."""
    if binding.key_display:
        return binding.key_display
    return " ".join(_KEY_NAMES.get(k.strip(), k.strip()) for k in binding.key.split(","))


def help_text(sections: Sequence[Section]) -> str:
    """The help as plain text, one 'keys  what they do' line per row (for tests and search)."""
    lines = []
    for section in sections:
        lines.append(section.title)
        lines.extend(f"  {keys}  {text}" for keys, text in section.rows())
    return "\n".join([*lines, "Security rules", RULES, ABOUT.plain])


def section_table(rows: Sequence[Row]) -> Table:
    """Keys in a bold column, what they do beside them, wrapping under itself."""
    grid = Table.grid(padding=(0, 2), expand=True)
    grid.add_column(no_wrap=True, min_width=14)
    grid.add_column(ratio=1)
    for keys, text in rows:
        grid.add_row(Text(keys, style="bold"), Text(text))
    return grid


class HelpScreen(ModalScreen[None]):
    """Every key, then the security rules; Escape, q or ? closes it, the arrows scroll it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
        Binding("question_mark", "close", "Close", show=False),
        Binding("down,j", "scroll_down", "Scroll", show=False),
        Binding("up,k", "scroll_up", "Scroll", show=False),
    ]

    def __init__(self, sections: Sequence[Section]) -> None:
        super().__init__()
        self._sections = sections

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Static(f"Keys · {CLOSE_HINT}", id="help-hint", classes="dialog-title")
            with VerticalScroll(id="help-body"):
                for section in self._sections:
                    yield Static(section.title, classes="help-section")
                    yield Static(section_table(section.rows()), classes="help-keys")
                yield Static("Security rules", classes="help-section")
                yield Static(RULES, classes="help-keys")
                yield Static(ABOUT, classes="help-keys")

    def on_mount(self) -> None:
        self.query_one("#help-body", VerticalScroll).focus()

    def action_scroll_down(self) -> None:
        self.query_one("#help-body", VerticalScroll).scroll_down()

    def action_scroll_up(self) -> None:
        self.query_one("#help-body", VerticalScroll).scroll_up()

    def action_close(self) -> None:
        self.dismiss(None)
