"""The one-time reveal of a new key, with a copy prompt and an explicit acknowledgement."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import NamedTuple

from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.geometry import Region
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from apikey_tui.tui.text import literal

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import CreatedKey

WARNING = (
    "This is the only time this key is shown. It cannot be recovered: store it like a "
    "password (a password manager or your CI's secret store). If it is lost or stolen, recreate it."
)
NOT_COPIED = (
    "You have not copied the key and it cannot be shown again. Press Enter again to close anyway."
)


class CopyNote(NamedTuple):
    """What the dialog can truthfully say about an OSC 52 copy, and whether it can arrive."""

    text: str
    can_arrive: bool  # False when we know the copy was dropped on the way (tmux)


def _tmux_set_clipboard() -> str:
    try:
        return subprocess.run(
            ["tmux", "show-options", "-gv", "set-clipboard"],
            capture_output=True, text=True, timeout=2, check=False,
        ).stdout.strip() or "unknown"  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def copy_note(env: Mapping[str, str] | None = None, *, again: str = "c") -> CopyNote:
    """Say where an OSC 52 copy goes from here: there is no success signal, so say one true thing.

    Never "copied" when it may not have been: OSC 52 only asks the terminal to set its clipboard.
    again: the key that copies again (the reveal's c; the key table's y or Y).
    """
    env = os.environ if env is None else env
    if env.get("TMUX"):
        setting = _tmux_set_clipboard()
        if setting == "on":
            return CopyNote(
                "Sent through tmux to your terminal's clipboard (OSC 52); tmux also keeps it "
                "in its paste buffer on this machine. Paste once to check it arrived.",
                can_arrive=True,
            )
        if setting in ("external", "off"):
            return CopyNote(
                f"Not copied: tmux (set-clipboard {setting}) drops clipboard requests from "
                f"programs. Run 'tmux set -g set-clipboard on' and press {again} again, or "
                "select it with the mouse.",
                can_arrive=False,
            )
        return CopyNote(
            "Sent through tmux (OSC 52), whose set-clipboard setting could not be read: "
            "paste once to check it arrived.",
            can_arrive=True,
        )
    if env.get("SSH_CONNECTION") or env.get("SSH_CLIENT"):
        return CopyNote(
            "Sent over SSH to the clipboard of the terminal you sit at (OSC 52). Paste once to "
            "check it arrived: some terminals refuse clipboard requests.",
            can_arrive=True,
        )
    return CopyNote(
        "Sent to your terminal's clipboard (OSC 52). Paste once to check it arrived: some "
        "terminals refuse clipboard requests.",
        can_arrive=True,
    )


# The reveal dialog is 80 columns wide at most; its border takes 2 of them.
DIALOG_WIDTH, DIALOG_BORDER = 80, 2


def chunk_width(length: int, room: int) -> int:
    """The width of each line when a key of length characters is shown in room columns.

    The whole key when it fits; otherwise equal fixed chunks (78 characters: 2 x 39 at 70
    columns, 3 x 26 at 40), so every character is on screen and the lines look deliberate.
    """
    if room >= length:
        return length
    lines = -(-length // max(room, 1))
    return -(-length // lines)


class RevealSecretDialog(ModalScreen[None]):
    """Shows the key once; closing needs Enter, and twice when it was never copied."""

    AUTO_FOCUS = None
    BINDINGS = [
        Binding("c", "copy", "Copy key"),
        Binding("enter", "done", "I have stored it"),
        Binding("escape", "done", "Close", show=False),
    ]

    def __init__(
        self, created: CreatedKey, *, recreated: bool = False, verb: str | None = None
    ) -> None:
        super().__init__()
        self._created = created
        self._recreated = recreated
        self._verb = verb  # what happened, when neither 'created' nor 'recreated' says it
        self._copied = False
        self._warned = False

    def compose(self) -> ComposeResult:
        info = self._created.info
        verb = "recreated (the old key no longer works)" if self._recreated else "created"
        verb = self._verb or verb
        with Vertical(classes="dialog reveal"):
            yield Static(
                literal(f"Key {info.name!r} of {info.owner} {verb}"), classes="dialog-title"
            )
            yield Static(literal(self._created.plaintext), id="secret")
            # Scrolls when the terminal is short; the key above and the buttons stay in view.
            with VerticalScroll(classes="dialog-scroll"):
                yield Static("", id="copy-status")
                yield Static("", id="split-note")
                yield Static(WARNING, classes="warning")
            with Horizontal(classes="buttons"):
                buttons = [
                    Button("Copy key (c)", variant="primary", id="copy"),
                    Button("Stored it (Enter)", id="done"),
                ]
                for button in buttons:
                    # A focused button would take Enter away from the acknowledgement binding.
                    button.can_focus = False
                    yield button

    def on_mount(self) -> None:
        self._fit_secret()

    def secret_region(self) -> Region:
        """Where the key is drawn on screen; the whole screen until that is known (fail closed)."""
        region = self.query_one("#secret", Static).region if self.is_mounted else None
        return region or Region(0, 0, *self.app.size)

    def on_resize(self) -> None:
        self._fit_secret()

    def _fit_secret(self) -> None:
        """Show the key on one line when it fits, else folded into equal chunks with a note.

        The folded lines are one line of text to Textual: a mouse selection inside the app
        (drag, then Ctrl+C) copies the key whole, without line breaks.
        """
        length = len(self._created.plaintext)
        room = min(self.size.width, DIALOG_WIDTH) - DIALOG_BORDER
        chunk = chunk_width(length, room)
        self.query_one("#secret", Static).styles.width = chunk
        note = self.query_one("#split-note", Static)
        note.display = chunk < length
        lines = -(-length // chunk)
        note.update(
            f"The key is split over {lines} lines to fit this terminal. Press c to copy it "
            "whole, or drag the mouse over it and press Ctrl+C: both copy it without line "
            "breaks (a terminal's own selection, e.g. with Shift, would add them)."
        )

    def action_copy_text(self) -> None:
        """Ctrl+C on a mouse selection: copied like c, and said in the same words."""
        selected = self.get_selected_text()
        if not selected:
            raise SkipAction()
        self._copy(selected, whole=selected == self._created.plaintext)

    @on(Button.Pressed, "#copy")
    def action_copy(self) -> None:
        self._copy(self._created.plaintext, whole=True)

    def _copy(self, text: str, *, whole: bool) -> None:
        self.app.copy_to_clipboard(text)
        note = copy_note()
        status = self.query_one("#copy-status", Static)
        # Said inside the dialog: a toast would cover the key.
        if not whole:
            status.update("The selection is only part of the key: press c to copy all of it.")
            status.add_class("error")
            return
        # A copy that cannot arrive does not count: closing still asks once more.
        self._copied = self._copied or note.can_arrive
        status.update(note.text)
        status.set_class(not note.can_arrive, "error")

    @on(Button.Pressed, "#done")
    def action_done(self) -> None:
        if not self._copied and not self._warned:
            self._warned = True
            self.query_one("#copy-status", Static).update(NOT_COPIED)
            self.query_one("#copy-status", Static).add_class("error")
            return
        self.dismiss(None)
