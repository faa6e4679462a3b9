"""The help screen: what each key does and the spec's security rules."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# API keys

A key lets a program call the service with `Authorization: ApiKey <key>` instead of a
username and password. It reaches only the APIs in its **scope**; a served model needs
both `serving` and `project`.

| key | action |
|---|---|
| `n` | create a key (name, scopes, then the key is shown **once**) |
| `d` | delete the selected key: services refuse it at once |
| `r` | recreate the selected key (stolen key): new secret, same name and scopes |
| `/` | filter the table; `Escape` goes back to the table |
| `s` | sort by the next column (or click a column header) |
| `F5` | reload now (changes from elsewhere also appear within seconds) |
| `Enter` | the key in full; there `e` edits its scopes, `r` and `d` as above |
| `c` | scope catalog: `n` add, `e` describe, `d` remove a scope |
| `a` | audit trail, newest first, live; `/` filters by key, actor, action |
| `o` | switch owner, or show all owners |
| `Escape` | back from a view; in a dialog, cancel |
| `Ctrl+P` | command palette: every action, and the theme (light or dark) |
| `?` | this help |
| `q` | quit |

## Security rules

1. Treat a key like a password.
2. Select only the APIs the key needs.
3. A stolen key is deleted and recreated (`r`).
4. Store the key somewhere safe when it is shown.
5. A lost key cannot be recovered: only its hash is stored.
"""


class HelpScreen(ModalScreen[None]):
    """Static help text; any of Escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("q", "close", "Close", show=False),
        Binding("question_mark", "close", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help"):
            yield Markdown(HELP)

    def action_close(self) -> None:
        self.dismiss(None)
