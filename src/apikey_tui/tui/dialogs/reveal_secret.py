"""The one-time reveal of a new key, with a copy prompt and an explicit acknowledgement."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from apikey_tui.store import CreatedKey
from apikey_tui.tui.text import literal

WARNING = (
    "This is the only time this key is shown. It cannot be recovered: store it like a "
    "password (a password manager or your CI's secret store). If it is lost or stolen, recreate it."
)
NOT_COPIED = (
    "You have not copied the key and it cannot be shown again. Press Enter again to close anyway."
)


def copy_note(env: Mapping[str, str] | None = None) -> str:
    """Say where an OSC 52 copy goes from here: there is no success signal, so be specific."""
    env = os.environ if env is None else env
    if env.get("TMUX"):
        try:
            setting = subprocess.run(
                ["tmux", "show-options", "-gv", "set-clipboard"],
                capture_output=True, text=True, timeout=2, check=False,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            setting = "unknown"
        if setting != "on":
            return (
                f"tmux has set-clipboard {setting!r}, so the copy probably did not reach your "
                "terminal. Run 'tmux set -g set-clipboard on' or select the key with the mouse."
            )
        return "Copied through tmux to your terminal (it also stays in tmux's paste buffer here)."
    if env.get("SSH_CONNECTION") or env.get("SSH_CLIENT"):
        return (
            "Copied over SSH to your own computer's clipboard (OSC 52), if your terminal allows it."
        )
    return "Copied to your terminal's clipboard (OSC 52), if your terminal allows it."


class RevealSecretDialog(ModalScreen[None]):
    """Shows the key once; closing needs Enter, and twice when it was never copied."""

    AUTO_FOCUS = None
    BINDINGS = [
        Binding("c", "copy", "Copy key"),
        Binding("enter", "done", "I have stored it"),
        Binding("escape", "done", "Close", show=False),
    ]

    def __init__(self, created: CreatedKey, *, recreated: bool = False) -> None:
        super().__init__()
        self._created = created
        self._recreated = recreated
        self._copied = False
        self._warned = False

    def compose(self) -> ComposeResult:
        info = self._created.info
        verb = "recreated (the old key no longer works)" if self._recreated else "created"
        with Vertical(classes="dialog reveal"):
            yield Static(
                literal(f"Key {info.name!r} of {info.owner} {verb}"), classes="dialog-title"
            )
            yield Static(literal(self._created.plaintext), id="secret")
            yield Static(WARNING, classes="warning")
            yield Static("", id="copy-status")
            with Horizontal(classes="buttons"):
                buttons = [
                    Button("Copy key (c)", variant="primary", id="copy"),
                    Button("Stored it (Enter)", id="done"),
                ]
                for button in buttons:
                    # A focused button would take Enter away from the acknowledgement binding.
                    button.can_focus = False
                    yield button

    @on(Button.Pressed, "#copy")
    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self._created.plaintext)
        self._copied = True
        # Confirmed inside the dialog: a toast would cover the key.
        self.query_one("#copy-status", Static).update(f"Copied. {copy_note()}")
        self.query_one("#copy-status", Static).remove_class("error")

    @on(Button.Pressed, "#done")
    def action_done(self) -> None:
        if not self._copied and not self._warned:
            self._warned = True
            self.query_one("#copy-status", Static).update(NOT_COPIED)
            self.query_one("#copy-status", Static).add_class("error")
            return
        self.dismiss(None)
