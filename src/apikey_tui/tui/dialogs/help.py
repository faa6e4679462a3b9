"""The help screen: every key of every view and dialog, read from their bindings, and the rules.

The rows are generated from the classes' BINDINGS, so a key added to a view shows up here by
itself (with its binding's description until TEXTS says more); a test checks that every class
with bindings has a section.
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
    "tab": "Tab",
    "slash": "/",
    "question_mark": "?",
    "f5": "F5",
}

_OTHER_BUTTON = "the other button (Cancel is focused first)"

# What a binding does, in more words than its footer label; keyed by (class name, action).
# Rows with the same text in a section are merged: "↑ k / ↓ j  previous / next key".
TEXTS = {
    ("KeysScreen", "create"): "create a key; it is shown once",
    ("KeysScreen", "delete"): "delete the selected key (asks first)",
    ("KeysScreen", "recreate"): "recreate a stolen key: new secret (asks first)",
    ("KeysScreen", "rotate"): "rotate: new secret; the old one works for a grace",
    ("KeysScreen", "end_grace"): "end the grace: the old secret stops now (asks first)",
    ("KeysScreen", "toggle_disabled"): "disable (with a reason) or enable the key (asks first)",
    ("KeysScreen", "set_expiry"): "set the expiry: 90d, a date or never (asks first)",
    ("KeysScreen", "focus_filter"): "filter by name, public id, scope or owner",
    ("KeysScreen", "sort"): "sort by the next column (or click a header)",
    ("KeysScreen", "reload"): "reload now (changes also show up by themselves)",
    ("KeysScreen", "help"): "this help",
    ("KeysScreen", "details"): "the selected key in full (see Key detail)",
    ("KeysScreen", "app.scope_catalog"): "the scope catalog",
    ("KeysScreen", "app.audit_trail"): "the audit trail",
    ("KeysScreen", "app.switch_owner"): "switch owner, or show every owner's keys",
    ("KeysScreen", "focus_table"): "filter: clear it; again: back to the table",
    ("KeyFilter", "clear_or_leave"): "filter: clear it; again: back to the table",
    ("KeyTable", "move(-1)"): "previous / next key",
    ("KeyTable", "move(1)"): "previous / next key",
    ("KeyTable", "page(-1)"): "a page up / down",
    ("KeyTable", "page(1)"): "a page up / down",
    ("KeyTable", "first"): "first / last key",
    ("KeyTable", "last"): "first / last key",
    ("KeyTable", "reverse_sort"): "reverse the sort order",
    ("KeyTable", "toggle_times"): "times absolute (UTC) or relative ('3 min ago')",
    ("ApiKeysApp", "quit"): "quit",
    ("LiveScreen", "back"): "back to the key table",
    ("LiveScreen", "reload"): "reload now",
    ("LiveScreen", "help"): "this help",
    ("KeyDetailScreen", "edit_scopes"): "edit the key's scopes (asks first, audited)",
    ("KeyDetailScreen", "recreate"): "recreate the key, as in the table",
    ("KeyDetailScreen", "delete"): "delete the key, as in the table",
    ("KeyDetailScreen", "rotate"): "rotate with a grace, as in the table",
    ("KeyDetailScreen", "end_grace"): "end the old secret's grace, as in the table",
    ("KeyDetailScreen", "toggle_disabled"): "disable or enable, as in the table",
    ("KeyDetailScreen", "set_expiry"): "set the expiry, as in the table",
    ("ScopeCatalogScreen", "add"): "add a scope",
    ("ScopeCatalogScreen", "describe"): "describe the selected scope",
    ("ScopeCatalogScreen", "remove"): "remove it (asks; refused while keys hold it)",
    ("AuditTrailScreen", "focus_filter"): "filters: key, actor, action (Tab between)",
    ("AuditTrailScreen", "leaks_only"): "only leak events (key.leak); again: every event",
    ("AuditTrailScreen", "back"): "from a filter: the events; else back",
    ("CreateKeyDialog", "cancel"): "cancel: nothing is written",
    ("EditScopesDialog", "cancel"): "cancel: nothing is written",
    ("ScopePicker", "select"): "choose or drop a scope ([x]: chosen)",
    ("ScopePicker", "cursor_up"): "previous / next scope",
    ("ScopePicker", "cursor_down"): "previous / next scope",
    ("RevealSecretDialog", "copy"): "copy the key to your clipboard (OSC 52)",
    ("RevealSecretDialog", "done"): "close; asks again if never copied",
    ("ConfirmDialog", "answer(False)"): "no: nothing is done",
    ("ConfirmDialog", "answer(True)"): "yes: do it",
    ("ConfirmDialog", "other_button"): _OTHER_BUTTON,
    ("SwitchOwnerDialog", "cancel"): "cancel: nothing is written",
    ("AskValueDialog", "cancel"): "cancel: nothing is done",
    ("ScopeFormDialog", "cancel"): "cancel: nothing is written",
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


@dataclass(frozen=True)
class Section:
    """A titled table of keys: the own bindings of some classes, plus keys no binding names."""

    title: str
    owners: tuple[type, ...]
    extra: tuple[Row, ...] = ()

    def rows(self) -> list[Row]:
        """One row per binding, then the extras; rows with the same text become one row."""
        rows = [
            (key_text(binding), TEXTS.get((owner.__name__, binding.action), binding.description))
            for owner in self.owners
            for binding in own_bindings(owner)
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


def sections() -> list[Section]:
    """Every view and dialog with keys, in the order an admin meets them."""
    # Imported here: these modules import this one (for the help binding).
    from apikey_tui.tui.app import ApiKeysApp
    from apikey_tui.tui.dialogs.ask_value import AskValueDialog
    from apikey_tui.tui.dialogs.confirm import ConfirmDialog
    from apikey_tui.tui.dialogs.create_key import CreateKeyDialog
    from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog
    from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
    from apikey_tui.tui.dialogs.scope_form import ScopeFormDialog
    from apikey_tui.tui.dialogs.switch_owner import SwitchOwnerDialog
    from apikey_tui.tui.key_table import KeyFilter, KeyTable
    from apikey_tui.tui.keys_screen import KeysScreen
    from apikey_tui.tui.scope_picker import ScopePicker
    from apikey_tui.tui.screens.audit_trail import AuditTrailScreen
    from apikey_tui.tui.screens.key_detail import KeyDetailScreen
    from apikey_tui.tui.screens.live import LiveScreen
    from apikey_tui.tui.screens.scope_catalog import ScopeCatalogScreen

    return [
        Section(
            "Key table",
            (KeysScreen, KeyTable, KeyFilter, ApiKeysApp),
            (
                ("Ctrl+P", "command palette: every action, the theme"),
                ("click a header", "sort by it; again to reverse"),
            ),
        ),
        Section("Key detail (Enter)", (KeyDetailScreen,)),
        Section("Scope catalog (c)", (ScopeCatalogScreen,)),
        Section("Audit trail (a)", (AuditTrailScreen,)),
        Section("In the detail, catalog and audit trail", (LiveScreen,)),
        Section(
            "Create a key (n), edit its scopes (e)",
            (CreateKeyDialog, EditScopesDialog, ScopePicker),
            (
                ("Tab", "next: name, scopes, Create (never Cancel)"),
                ("Enter", "name: create; scopes: choose or drop"),
            ),
        ),
        Section("The one-time reveal", (RevealSecretDialog,)),
        Section(
            "Confirmations (delete, recreate, scopes, end grace, enable)",
            (ConfirmDialog,),
            (("Tab", _OTHER_BUTTON), ("Enter", "press the focused button")),
        ),
        Section("Switch owner (o), add or describe a scope", (SwitchOwnerDialog, ScopeFormDialog)),
        Section(
            "Rotate (R), disable (x), set expiry (E)",
            (AskValueDialog,),
            (("Enter", "confirm, when the value is valid"),),
        ),
        Section(
            "This help",
            (HelpScreen,),
            (("PgUp / PgDn", "a page up / down"), ("Home / End", "the top / the end")),
        ),
    ]


def help_text() -> str:
    """The help as plain text, one 'keys  what they do' line per row (for tests and search)."""
    lines = []
    for section in sections():
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

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Static(f"Keys · {CLOSE_HINT}", id="help-hint", classes="dialog-title")
            with VerticalScroll(id="help-body"):
                for section in sections():
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
