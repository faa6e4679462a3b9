"""The app's actions on keys, declared once: bindings, the command palette and the help derive.

Harlequin's habit: one list of records. A screen's BINDINGS come from `bindings(TABLE)` or
`bindings(DETAIL)`, the palette offers `actions(where)` on that screen, and the help shows each
record's keys and description, so no action can be bound, yet missing from the palette or help.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding, BindingType
from textual.widget import Widget
from textual.widgets import Input

Where = Literal["table", "detail"]
TABLE: Where = "table"
DETAIL: Where = "detail"


@dataclass(frozen=True)
class KeyAction:
    """One action: its Textual action, keys, words for the footer, palette and help, and screens.

    id is the Textual action: `action_<id>` on each screen in `screens`, or the app's own
    action when it starts with 'app.'.
    """

    id: str
    keys: str  # Textual key names, comma-separated
    label: str  # the footer's word
    title: str  # the command palette's entry
    description: str  # what it does: the help's row and the palette's line under the title
    screens: frozenset[Where]
    footer: bool = True  # the footer is full at 80 columns: the rest are in help and palette
    view: str = ""  # the view it opens, for the `:` jump (`:scopes`); "" for none
    # Moves the focus where the next keys go (the filter, or a dialog that takes text): runs
    # as the key arrives (a Textual priority binding), before keys typed in the same burst
    # ('/dis' or 'nci-deploy' over SSH) are handed on; see `typed_as_text` and TypeAheadDialog.
    at_once: bool = False


_BOTH = frozenset({TABLE, DETAIL})
_TABLE = frozenset({TABLE})
_DETAIL = frozenset({DETAIL})

# fmt: off
ACTIONS: tuple[KeyAction, ...] = (
    KeyAction(
        "create", "n", "New", "Create key", "create a key; it is shown once", _TABLE, at_once=True,
    ),
    KeyAction(
        "edit_scopes", "e", "Edit scopes", "Edit scopes",
        "edit the key's scopes (asks first, audited)", _DETAIL, at_once=True,
    ),
    KeyAction("delete", "d", "Delete", "Delete key", "delete the key (asks first)", _BOTH),
    KeyAction(
        "recreate", "r", "Recreate", "Recreate key",
        "recreate a stolen key: new secret (asks first)", _BOTH,
    ),
    KeyAction(
        "rotate", "R", "Rotate", "Rotate key",
        "rotate: new secret; the old one works for a grace", _BOTH, footer=False, at_once=True,
    ),
    KeyAction(
        "end_grace", "O", "End grace", "End grace",
        "end the grace: the old secret stops now (asks first)", _BOTH, footer=False,
    ),
    KeyAction(
        "toggle_disabled", "x", "Disable/enable", "Disable or enable key",
        "disable (with a reason) or enable the key (asks first)", _BOTH, footer=False,
        at_once=True,
    ),
    KeyAction(
        "set_expiry", "E", "Set expiry", "Set expiry",
        "set the expiry: 90d, a date or never (asks first)", _BOTH, footer=False, at_once=True,
    ),
    KeyAction(
        "focus_filter", "slash", "Filter", "Filter keys",
        "filter by name, public id, scope, owner or state", _TABLE, at_once=True,
    ),
    KeyAction(
        "sort", "s", "Sort", "Sort keys",
        "sort by the next column (or click a header)", _TABLE, footer=False,
    ),
    KeyAction(
        "reload", "f5", "Reload", "Reload keys",
        "reload now (changes also show up by themselves)", _TABLE,
    ),
    KeyAction(
        "app.help", "question_mark", "Help", "Help",
        "this help: every key, then the security rules", _TABLE,
    ),
    KeyAction(
        "details", "enter", "Details", "Key details",
        "the selected key in full (see Key detail)", _TABLE, footer=False,
    ),
    KeyAction(
        "app.scope_catalog", "c", "Scopes", "Scope catalog",
        "the scope catalog: add, describe, remove", _TABLE, footer=False, view="scopes",
    ),
    KeyAction(
        "app.audit_trail", "a", "Audit trail", "Audit trail",
        "the audit trail: every change, newest first", _TABLE, footer=False, view="events",
    ),
    KeyAction(
        "app.key_table", "", "Keys", "Key table",
        "back to the key table", _DETAIL, footer=False, view="keys",
    ),
    KeyAction(
        "app.jump", "colon", "Jump", "Jump to a view",
        "jump to a view: :keys, :scopes, :events, :usage, :owners", _BOTH, footer=False,
        at_once=True,
    ),
    KeyAction(
        "app.switch_owner", "o", "Owner", "Switch owner",
        "switch owner, or show every owner's keys", _TABLE, footer=False, at_once=True,
    ),
    KeyAction(
        "toggle_mark", "space", "Mark", "Mark or unmark key",
        "mark / unmark: d x E R O then act on all marked keys", _TABLE, footer=False,
    ),
    KeyAction(
        "undo", "u", "Undo", "Undo",
        "undo the last disable, enable, expiry, limits, metadata, networks, scopes, tags or "
        "transfer change (asks first)", _BOTH,
        footer=False,
    ),
    KeyAction(
        "copy_name", "y", "Copy name", "Copy key name",
        "copy the name (y) or public id (Y), never the secret", _BOTH, footer=False,
    ),
    KeyAction(
        "copy_public_id", "Y", "Copy id", "Copy public id",
        "copy the name (y) or public id (Y), never the secret", _BOTH, footer=False,
    ),
    # Issue 26: after the keys above, so help's first page at 80x24 keeps them.
    KeyAction(
        "reverse_sort", "S", "Reverse", "Reverse sort",
        "reverse the sort (or click the header again)", _TABLE, footer=False,
    ),
    KeyAction(
        "toggle_times", "t", "Times", "Absolute or relative times",
        "show times absolute (UTC) or relative", _TABLE, footer=False,
    ),
    KeyAction(
        "unmark_all", "M", "Unmark all", "Unmark all keys", "unmark every marked key", _TABLE,
        footer=False,
    ),
    # Usage (issue 18): last, so help's first page at 80x24 keeps the table's own keys.
    KeyAction(
        "app.usage", "U", "Usage", "Usage",
        "usage: busiest keys, 403s, wrong secrets, right-size proposals", _BOTH, footer=False,
        view="usage",
    ),
    # Limits (issue 28): after Usage, so help's first page at 80x24 is as it was.
    KeyAction(
        "edit_limits", "L", "Limits", "Edit limits",
        "set the key's limits: 600/m 10000/d or none (asks first, audited)", _DETAIL,
        footer=False, at_once=True,
    ),
    KeyAction(
        "apply_rightsize", "p", "Right-size", "Apply right-size proposal",
        "drop the scopes the key never used in 30 days (asks first, audited)", _DETAIL,
        footer=False,
    ),
    # Networks (issue 29): last, so help's earlier pages are as they were.
    KeyAction(
        "apply_networks", "N", "Networks", "Apply networks proposal",
        "allow only the networks the key was used from in 30 days, in shadow mode (asks "
        "first, audited)", _DETAIL, footer=False,
    ),
    # Owners (issue 30): after networks, so help's earlier pages are as they were.
    KeyAction(
        "app.owners", "", "Owners", "Owners",
        "owners: kinds, members, key counts; limit pools, offboarding", _BOTH, footer=False,
        view="owners",
    ),
    KeyAction(
        "transfer", "T", "Transfer", "Transfer key",
        "give the key to another owner: same secret, clients keep working (asks first)",
        _DETAIL, footer=False, at_once=True,
    ),
    KeyAction(
        "edit_tags", "g", "Tags", "Edit tags",
        "set the key's tags: env=prod team=pay or none (audited, u undoes)", _DETAIL,
        footer=False, at_once=True,
    ),
)
# fmt: on


def actions(where: Where) -> list[KeyAction]:
    """The actions a screen offers, in the list's order."""
    return [action for action in ACTIONS if where in action.screens]


def bindings(where: Where) -> list[BindingType]:
    """A screen's key bindings for its actions (a view reached only by `:` has no key)."""
    return [
        Binding(a.keys, a.id, a.label, show=a.footer, priority=a.at_once)
        for a in actions(where)
        if a.keys
    ]


_AT_ONCE = frozenset(a.id.removeprefix("app.") for a in ACTIONS if a.at_once)


def typed_as_text(action: str, focused: Widget | None, at_once: Collection[str] = _AT_ONCE) -> bool:
    """Whether a key that runs at once is text instead: while a text field has the focus.

    A priority binding outruns the focused widget, so `n` or `/` typed into the filter would
    open a dialog; screens and the app refuse such actions here (check_action) and the key
    reaches the field. action: as check_action gets it, without 'app.'; at_once: the actions
    bound with priority (the list's, or a view's own: LiveScreen.check_action).
    """
    return action in at_once and isinstance(focused, Input)


def views() -> dict[str, KeyAction]:
    """The views `:` jumps to, by name ('keys', 'scopes' …), in the list's order."""
    return {a.view: a for a in ACTIONS if a.view}


def app_binding(action_id: str) -> Binding:
    """The binding of one of the app's own actions ('app.jump'), for every screen."""
    action = next(a for a in ACTIONS if a.id == action_id)
    return Binding(action.keys, action.id, action.label, show=False, priority=action.at_once)


def by_id(where: Where) -> dict[str, KeyAction]:
    """The actions a screen offers, by their Textual action."""
    return {action.id: action for action in actions(where)}
