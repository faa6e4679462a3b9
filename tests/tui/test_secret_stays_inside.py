"""The one-time key leaves the app only by the admin's copy: no screenshot, log or traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual import constants
from textual.pilot import Pilot
from textual.widgets import Static

from apikey_tui import keyformat
from apikey_tui.store import KeyStore
from apikey_tui.tui.app import ApiKeysApp
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog
from tests.tui.conftest import make_app
from tests.tui.test_app import open_create, screen_lines, settle

SIZE = (100, 30)


def pieces(secret: str, size: int = 8) -> list[str]:
    """Every run of size characters of secret: a picture holding any part of it is caught."""
    return [secret[i : i + size] for i in range(len(secret) - size + 1)]


def holds_secret(text: str, key: str) -> bool:
    secret = keyformat.parse(key).secret
    return any(piece in text for piece in pieces(secret))


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
