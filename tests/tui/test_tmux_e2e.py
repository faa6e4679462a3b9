"""End to end in a real terminal: tmux runs `apikey-tui`, keys are typed, the pane is read."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import apikey_tui
from apikey_tui import keyformat
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier

KEY = re.compile(r"ak[a-z2-7]{16}\.[a-z2-7]{59}")


TMUX_ENV = {
    "PATH": os.environ["PATH"],
    "HOME": os.environ.get("HOME", "/"),
    "LANG": "C.UTF-8",
    "TERM": "xterm-256color",
}


def app_env(url: str) -> dict[str, str]:
    """The app's environment: the database, and the source under test first on the path.

    Without PYTHONPATH the pane would run whichever apikey_tui the venv has installed (another
    checkout's), not this tree's.
    """
    source = str(Path(apikey_tui.__file__).resolve().parents[1])
    return {
        "APIKEY_TUI_DATABASE_URL": url,
        "TERM": "xterm-256color",
        "PATH": os.environ["PATH"],
        "PYTHONPATH": source,
    }


class Tmux:
    """A private tmux server (its own socket) with one 100x30 pane."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            pytest.fail("tmux is not installed (.ci/run installs it)", pytrace=False)
        self.base = [tmux, "-L", f"apikey-test-{uuid.uuid4().hex[:8]}"]
        exports = " ".join(f"{k}={v}" for k, v in env.items())
        shell = f"env {exports} {' '.join(command)}"
        self.run("new-session", "-d", "-s", "e2e", "-x", "100", "-y", "30", shell)
        self.run("set-option", "-t", "e2e", "remain-on-exit", "on")
        # As the docs advise (guide/app.md): without it tmux drops the app's OSC 52 copy.
        self.run("set-option", "-g", "set-clipboard", "on")

    def run(self, *args: str) -> str:
        # The server (and so the app in its pane) gets only this environment, never the caller's:
        # run from a tmux pane, the pane's COLUMNS=200 and LINES=50 reached the app, which then
        # drew for a terminal twice the size of its own.
        return subprocess.run(
            [*self.base, *args],
            env=TMUX_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout

    def send(self, *keys: str) -> None:
        for key in keys:
            self.run("send-keys", "-t", "e2e", key)
            time.sleep(0.15)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "e2e")

    def wait_for(self, test: Callable[[str], bool], what: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if test(screen):
                return screen
            time.sleep(0.2)
        pytest.fail(f"waited {timeout}s for {what}; the pane shows:\n{self.screen()}")

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, check=False, timeout=20)


@pytest.fixture
def tmux_app(tmp_path: Path) -> Iterator[tuple[Tmux, str]]:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    KeyStore.open(url).close()
    command = [sys.executable, "-m", "apikey_tui", "--owner", "alice"]
    env = app_env(url)
    tmux = Tmux(command, env)
    yield tmux, url
    tmux.close()


def test_create_a_key_with_two_scopes_in_a_real_terminal(tmux_app: tuple[Tmux, str]) -> None:
    """Typed keys create a key with two scopes; the revealed key works and is listed by the CLI."""
    tmux, url = tmux_app
    tmux.wait_for(lambda s: "No API keys for alice yet" in s, "the empty table")
    tmux.send("n")
    tmux.wait_for(lambda s: "New API key" in s, "the create dialog")
    tmux.send("e2e-key", "Tab", "Space", "Down", "Space", "Tab", "Enter")
    screen = tmux.wait_for(lambda s: KEY.search(s) is not None, "the one-time reveal")
    match = KEY.search(screen)
    assert match is not None
    key = match.group(0)
    keyformat.parse(key)
    tmux.send("c")
    tmux.wait_for(lambda s: "Sent through tmux" in s, "the copy note")
    tmux.send("Enter")
    public_id = keyformat.parse(key).public_id
    # The row, by its public id (scopes may be cut with "…"; the CLI checks them exactly below).
    tmux.wait_for(lambda s: "e2e-key" in s and public_id in s, "the new row")
    tmux.send("q")
    tmux.wait_for(lambda s: "Pane is dead" in s or not s.strip(), "the app to exit", timeout=10)
    history = tmux.run("capture-pane", "-p", "-S", "-", "-t", "e2e")
    assert key not in history  # the alternate screen leaves no secret in the scrollback

    listing = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", url, "keys", "list",
         "--owner", "alice", "--json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    [entry] = json.loads(listing.stdout)
    assert entry["name"] == "e2e-key" and entry["scopes"] == ["project", "serving"]
    assert entry["public_id"] == keyformat.parse(key).public_id
    verifier = Verifier.from_url(url)
    assert verifier.verify(f"ApiKey {key}", ["serving", "project"]).key_name == "e2e-key"
    verifier.close()


USE_ONE_KEY = """
import sys
from apikey_tui.verifier import Verifier
verifier = Verifier.from_url(sys.argv[1])
print(verifier.verify("ApiKey " + sys.stdin.read().strip()).key_name)
verifier.flush()
verifier.close()
"""


def _line_of(screen: str, name: str) -> str:
    return next((line for line in screen.splitlines() if f" {name} " in line), "")


def test_d_deletes_the_selected_key_after_a_service_used_it(tmp_path: Path) -> None:
    """A service records use of the selected key; d then names that key, and y deletes it."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    store = KeyStore.open(url)
    names = ("aa", "bb", "cc")
    plaintexts = {n: store.create_key("alice", n, ["project"]).plaintext for n in names}
    store.close()
    command = [sys.executable, "-m", "apikey_tui", "--owner", "alice"]
    env = app_env(url)
    tmux = Tmux(command, env)
    try:
        before = tmux.wait_for(lambda s: " cc " in s, "the three keys")
        tmux.send("Down")  # the cursor moves from aa to bb
        used = subprocess.run(
            [sys.executable, "-c", USE_ONE_KEY, url], input=plaintexts["bb"],
            capture_output=True, text=True, check=True, timeout=60,
        )  # fmt: skip
        assert used.stdout.strip() == "bb"
        # The app polls the change marker and redraws bb's row with its last-used time.
        tmux.wait_for(lambda s: _line_of(s, "bb") != _line_of(before, "bb"), "bb's new row")
        tmux.send("d")
        screen = tmux.wait_for(lambda s: "Delete key" in s, "the delete confirmation")
        assert "Delete key 'bb' of alice?" in screen
        tmux.send("y")
        tmux.wait_for(lambda s: " bb " not in s and "Deleted key 'bb'" in s, "bb to go")
    finally:
        tmux.close()
    store = KeyStore.open(url)
    try:
        assert [k.name for k in store.list_keys("alice")] == ["aa", "cc"]
    finally:
        store.close()


def test_typing_right_after_slash_goes_into_the_filter(tmux_app: tuple[Tmux, str]) -> None:
    """'/dis' typed in one burst filters by 'dis': the 'd' never reaches the table (Delete)."""
    tmux, url = tmux_app
    store = KeyStore.open(url)
    store.create_key("alice", "ci-deploy", ["project"])
    store.create_key("alice", "reports", ["project"])
    store.disable_key("alice", "ci-deploy")
    store.close()
    tmux.send("F5")
    tmux.wait_for(lambda s: " reports " in s and " ci-deploy " in s, "the two keys")
    tmux.run("send-keys", "-t", "e2e", "/dis")  # one write: the keys arrive together
    screen = tmux.wait_for(lambda s: "1 key" in s or "Delete key" in s, "the filter or a dialog")
    assert "Delete key" not in screen and " ci-deploy " in screen and " reports " not in screen


def test_a_name_typed_in_the_burst_that_opens_the_dialog_is_kept(
    tmux_app: tuple[Tmux, str],
) -> None:
    """'nburst-key' in one write opens the create dialog with the name 'burst-key' typed in:
    no key of the burst is lost before the dialog's field has the focus."""
    tmux, _ = tmux_app
    tmux.wait_for(lambda s: "No API keys for alice yet" in s, "the empty table")
    tmux.run("send-keys", "-t", "e2e", "nburst-key")  # one write: the keys arrive together
    screen = tmux.wait_for(lambda s: "burst-key" in s, "the name in the dialog", timeout=10)
    assert "New API key" in screen
    assert any("Name:" in line and "burst-key" in line for line in screen.splitlines())


def test_keys_that_open_dialogs_are_text_in_the_filter(tmux_app: tuple[Tmux, str]) -> None:
    """In the filter, 'n', 'x', 'o' and ':' (which open dialogs at once in the table) are text:
    '/nxo:' in one write filters by 'nxo:' and opens nothing."""
    tmux, _ = tmux_app
    tmux.wait_for(lambda s: "No API keys for alice yet" in s, "the empty table")
    tmux.run("send-keys", "-t", "e2e", "/nxo:")
    screen = tmux.wait_for(lambda s: "nxo:" in s, "the typed filter", timeout=10)
    assert "New API key" not in screen and "Switch owner" not in screen


@pytest.mark.parametrize(
    "burst", [["d", "Enter"], ["-l", "dy"], ["r", "Enter"]], ids=["d-enter", "dy", "r-enter"]
)
def test_keys_typed_with_the_one_that_asks_never_answer_the_confirmation(
    tmux_app: tuple[Tmux, str], burst: list[str]
) -> None:
    """'d' and Enter (or 'y', or 'r' and Enter) in one write open the confirmation and leave it
    open: a key typed before the question was on screen never answers it."""
    tmux, url = tmux_app
    store = KeyStore.open(url)
    before = store.create_key("alice", "victim", ["project"]).info
    store.close()
    tmux.send("F5")
    tmux.wait_for(lambda s: " victim " in s, "the key")
    tmux.run("send-keys", "-t", "e2e", *burst)  # one write: the keys arrive together
    screen = tmux.wait_for(lambda s: "key 'victim' of alice?" in s, "the confirmation")
    time.sleep(0.5)  # had the burst answered it, the dialog would be gone by now
    assert "key 'victim' of alice?" in tmux.screen(), screen
    tmux.send("Escape")
    store = KeyStore.open(url)
    try:
        assert store.get_key("alice", "victim").public_id == before.public_id
    finally:
        store.close()


@pytest.mark.parametrize(
    ("view", "burst", "landed"),
    [("c", ":ev", "ev"), ("U", ":sc", "sc"), ("a", "/web", "web")],
    ids=["catalog-jump", "usage-jump", "trail-filter"],
)
def test_text_typed_right_after_colon_or_slash_lands_in_every_view(
    tmux_app: tuple[Tmux, str], view: str, burst: str, landed: str
) -> None:
    """In the scope catalog, the Usage view and the audit trail, ':ev' or '/web' in one write
    puts the letters in the prompt or filter that ':' or '/' opens (none is lost)."""
    tmux, _ = tmux_app
    tmux.wait_for(lambda s: "No API keys for alice yet" in s, "the empty table")
    tmux.send(view)
    time.sleep(1.0)  # the view is on screen
    tmux.run("send-keys", "-t", "e2e", "-l", burst)
    screen = tmux.wait_for(lambda s: f"▊  {landed}" in s or f"{landed}▏" in s or f" {landed} " in s,
                           f"{landed!r} in the field", timeout=10)  # fmt: skip
    assert landed in screen


def test_tab_and_space_in_one_write_choose_a_scope(tmux_app: tuple[Tmux, str]) -> None:
    """'ci', Tab and Space in one write leave the name 'ci' and choose the first scope: the space
    never lands in the name the Tab left."""
    tmux, _ = tmux_app
    tmux.wait_for(lambda s: "No API keys for alice yet" in s, "the empty table")
    tmux.send("n")
    tmux.wait_for(lambda s: "New API key" in s, "the create dialog")
    tmux.run("send-keys", "-t", "e2e", "ci", "Tab", "Space")  # one write: the keys arrive together
    screen = tmux.wait_for(lambda s: "[x] project" in s, "the chosen scope", timeout=10)
    assert any("Name:" in line and " ci " in line for line in screen.splitlines()), screen
