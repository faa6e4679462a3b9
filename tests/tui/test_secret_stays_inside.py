"""The one-time key leaves the app only by the admin's copy: no screenshot, log or traceback."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
from textual import constants
from textual.pilot import Pilot
from textual.widgets import Static

from apikey_tui import keyformat
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.store import KeyStore, policy
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from apikey_tui.tui.keys_screen import KeysScreen
from tests.conftest import readable
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import open_create, screen_lines, settle

SIZE = (100, 30)


def pieces(secret: str, size: int = 8) -> list[str]:
    """Every run of size characters of secret: a picture holding any part of it is caught."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def holds_secret(text: str, key: str) -> bool:
    secret = keyformat.parse(key).secret
    return any(piece in text for piece in pieces(secret))


def leaked(secrets: list[str], text: str) -> list[str]:
    """The secrets of which any 12 characters in a row are in text (a wrapped line is caught)."""
    return [s for s in secrets if any(piece in text for piece in pieces(s, 12))]


async def reveal_a_key(pilot: Pilot[Any]) -> str:
    """Create a key in the app; returns its plaintext, which the open reveal shows."""
    await settle(pilot)
    await open_create(pilot, "ci-deploy", ["project"])
    await pilot.press("enter")
    await settle(pilot)
    assert isinstance(pilot.app.screen, RevealSecretDialog)
    await pilot.press("c")
    key: str = pilot.app.clipboard
    return key


@pytest.mark.parametrize("width", [70, 100])
async def test_no_screenshot_holds_the_revealed_key(
    tui_store: KeyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """Palette, action, deliver, save and export: each picture shows the key blanked, not it."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # the palette's Screenshot saves to ~/Downloads
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    downloads = home / "Downloads"
    downloads.mkdir(parents=True)
    shots = tmp_path / "shots"
    shots.mkdir()
    app = make_app(tui_store)
    async with app.run_test(size=(width, 30), notifications=True) as pilot:
        key = await reveal_a_key(pilot)
        reveal = app.screen
        assert isinstance(reveal, RevealSecretDialog)

        # The command palette, as the admin would use it.
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"screenshot")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.5)
        await settle(pilot)
        # Every other route Textual offers.
        pictures = {"export": app.export_screenshot()}
        app.save_screenshot(filename="save.svg", path=str(shots))
        app.deliver_screenshot(filename="deliver.svg", path=str(shots))
        app.action_screenshot(filename="action.svg", path=str(shots))
        await app.run_action(f"screenshot('binding.svg', '{shots}')")
        await pilot.pause(0.5)
        await settle(pilot)
        for folder in (downloads, shots):
            for path in folder.iterdir():
                pictures[path.name] = path.read_text()
        assert {"save.svg", "deliver.svg", "action.svg", "binding.svg"} <= set(pictures)
        assert any(name.endswith(".svg") for name in pictures if "apikey" in name.lower())
        for name, picture in pictures.items():
            assert not holds_secret(picture, key), f"{name} holds part of the key"
            assert "••••••••" in picture, f"{name}: the key's place is not blanked"

        # The screen itself is untouched: the key is still shown whole, and stays until closed
        # (once Textual's "Saved screenshot" toasts, which lie over it, are gone).
        app.clear_notifications()
        await pilot.pause()
        assert app.screen is reveal
        lines = screen_lines(app, reveal.query_one("#secret", Static).region)
        assert "".join(line.strip() for line in lines) == key


async def test_textual_log_and_python_logging_never_hold_the_key(
    tui_store: KeyStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With Textual's log file on (TEXTUAL_LOG), creating, copying and closing logs no secret."""
    log_file = tmp_path / "textual.log"
    monkeypatch.setattr(constants, "LOG_FILE", str(log_file))
    caplog.set_level("DEBUG")
    app: ApiKeysApp = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        key = await reveal_a_key(pilot)
        await pilot.press("enter")
        await settle(pilot)
        app.log("a line, so the test knows the log file is written")
    written = log_file.read_text()
    assert "a line, so the test knows" in written
    assert not holds_secret(written, key)
    assert not holds_secret(caplog.text, key)


# --- an error the app did not foresee ----------------------------------------------------------


class Recorded:
    """The secrets a rotation made before it failed: its plaintext, argon2 hash, fingerprint."""

    def __init__(self) -> None:
        self.values: list[str] = []

    def found_in(self, text: str) -> list[str]:
        return leaked(self.values, text)


async def test_an_overflow_while_rotating_is_one_line_and_the_app_goes_on(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A rotation whose expiry overflows (9999-12-31) says so in one line, logs no secret, lives."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    made = Recorded()
    generate, hash_secret = keyformat.generate, SecretHasher.hash

    def recording_generate() -> tuple[keyformat.ParsedKey, str]:
        parts, plaintext = generate()
        made.values += [plaintext, parts.secret, fingerprint(parts.public_id, parts.secret)]
        return parts, plaintext

    def recording_hash(hasher: SecretHasher, secret: str) -> str:
        made.values.append(hash_secret(hasher, secret))
        return made.values[-1]

    def overflow(*args: object, **kwargs: object) -> None:
        raise OverflowError("date value out of range")  # as `now + lifetime` past year 9999

    monkeypatch.setattr(keyformat, "generate", recording_generate)
    monkeypatch.setattr(SecretHasher, "hash", recording_hash)
    monkeypatch.setattr(policy, "expiry", overflow)
    caplog.set_level("ERROR", logger="apikey_tui.tui")
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        await pilot.press("enter")  # the grace proposed, 24h
        await settle(pilot)
        assert len(made.values) == 4, "the rotation made its secrets, then failed"
        assert isinstance(app.screen, KeysScreen), "the app goes on"
        [note] = [n for n in toasts.shown if n.severity == "error"]
        assert "\n" not in note.message
        assert note.message.startswith("Rotate (key 'ci-deploy' of alice) failed")
        assert "OverflowError" in note.message
        assert not made.found_in(note.message)
        await pilot.press("q")
    assert app.return_code == 0
    [record] = [r for r in caplog.records if r.name == "apikey_tui.tui"]
    assert record.exc_info is not None and record.exc_info[0] is OverflowError
    assert "OverflowError" in caplog.text and not made.found_in(caplog.text)
    assert tui_store.get_key("alice", "ci-deploy").old_public_id is None  # nothing was changed


CRASH = """
import os, sys
from apikey_tui import keyformat
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.tui import keys_screen

def keys_loaded(self, message):
    # A handler on the event loop fails while secrets are in its locals, as a rotation's would.
    parts, plaintext = keyformat.generate()
    secret_hash = SecretHasher("cheapest").hash(parts.secret)
    secret_fingerprint = fingerprint(parts.public_id, parts.secret)
    with open(os.environ["SECRETS_OUT"], "w") as out:
        out.write("\\n".join([plaintext, secret_hash, secret_fingerprint]))
    raise OverflowError("date value out of range")

keys_screen.KeysScreen.on_keys_loaded = keys_loaded
from apikey_tui.cli import main
sys.exit(main())
"""


def run_in_a_terminal(args: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int, str]:
    """Run a command on a pseudo-terminal of 80x24 (the app needs one); (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(
        args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready = readable(master, 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the terminal's last writer has gone
                    break
                if not data:
                    break
                output += data
            elif process.poll() is not None:
                break
        else:
            process.kill()
            pytest.fail(
                f"still running after {timeout}s; it wrote:\n{output.decode(errors='replace')}"
            )
    finally:
        os.close(master)
    return process.wait(timeout=10), output.decode(errors="replace")


def test_an_unforeseen_error_exits_non_zero_with_one_line_and_no_secret(
    tui_store: KeyStore, tmp_path: Path
) -> None:
    """The real `apikey-tui` on a terminal: a crash prints one line, no traceback, exits 1."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    secrets_out = tmp_path / "secrets"
    state = tmp_path / "state"
    env = {
        **os.environ,
        "SECRETS_OUT": str(secrets_out),
        "XDG_STATE_HOME": str(state),
        "LOGNAME": "alice",
    }
    code, output = run_in_a_terminal(
        [sys.executable, "-c", CRASH, "--database-url", tui_store.label], env
    )
    secrets = secrets_out.read_text().splitlines()
    assert len(secrets) == 3
    assert leaked(secrets, output) == [], "the plaintext, hash or fingerprint was printed"
    assert code != 0
    assert "Traceback" not in output and "plaintext" not in output
    after = output[output.rindex("\x1b") :] if "\x1b" in output else output  # after the app
    lines = [line for line in after.splitlines() if "apikey-tui:" in line]
    assert len(lines) == 1 and "OverflowError" in lines[0], output[-2000:]
    log = state / "apikey-tui" / "app.log"
    assert log.stat().st_mode & 0o777 == 0o600
    written = log.read_text()
    assert "OverflowError" in written and "Traceback" in written
    assert leaked(secrets, written) == []


@pytest.mark.parametrize(
    ("method", "keys", "doing"),
    [
        ("key_window", [], "Reading the keys"),  # the table's own worker
        ("list_scopes", [], "Reading the keys"),  # the screen's load worker
        ("change_marker", [], "Reading the keys"),  # load and poll
        ("key_detail", ["enter"], "Reading this view"),  # every LiveScreen's read
        ("scope_usage", ["c"], "Reading this view"),
        ("events", ["a"], "Reading this view"),
    ],
)
async def test_an_unforeseen_error_in_any_read_is_one_line_and_the_app_goes_on(
    tui_store: KeyStore, monkeypatch: pytest.MonkeyPatch, method: str, keys: list[str], doing: str
) -> None:
    """Each worker that reads the store turns an unexpected error into one line, never a crash."""
    tui_store.create_key("alice", "ci-deploy", ["project"])
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await settle(pilot)
        await pilot.press(*keys)
        await settle(pilot)

        def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("a bug")

        monkeypatch.setattr(tui_store, method, broken)
        await pilot.press("f5")  # every view reloads on F5
        await pilot.pause(app.poll_seconds * 2)  # and polls
        await settle(pilot)
        notes = [n.message for n in toasts.shown if n.severity == "error"]
        assert any(
            n.startswith(f"{doing} failed on an unexpected error (RuntimeError)") for n in notes
        ), notes
        assert all("\n" not in n for n in notes)
        assert app.return_code is None, "the app goes on"
