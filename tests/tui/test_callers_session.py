"""The suite means the same from inside a tmux pane over SSH as from CI (the caller's session)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
# Tests that once read the caller's session: the reveal's copy note ($TMUX) and the real
# terminal (a nested pane, the caller's COLUMNS and LINES).
SENSITIVE = [
    "tests/tui/test_app.py::test_create_reveal_copy_acknowledge",
    "tests/tui/test_lifecycle_app.py::test_rotate_reveals_once_and_the_old_secret_works_in_grace",
    "tests/tui/test_views.py::test_recreate_from_the_detail_reveals_and_shows_the_new_id",
    "tests/tui/test_tmux_e2e.py::test_create_a_key_with_two_scopes_in_a_real_terminal",
]
# What an admin's session may set besides what tmux itself sets in its pane.
OVER_SSH = {
    "COLUMNS": "200",
    "LINES": "50",
    "NO_COLOR": "1",
    "LOGNAME": "someone.else",
    "SSH_CONNECTION": "198.51.100.4 52144 192.0.2.1 22",
    "SSH_CLIENT": "198.51.100.4 52144 22",
    "APIKEY_TUI_DATABASE_URL": "sqlite:////nonexistent/keys.db",
}


def test_tui_tests_pass_when_run_from_a_tmux_pane_over_ssh(tmp_path: Path) -> None:
    """TUI tests that read $TMUX, the terminal size or the login pass in a real tmux pane."""
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is not installed (.ci/run installs it)"
    server = [tmux, "-L", f"apikey-session-{uuid.uuid4().hex[:8]}"]
    done, output = tmp_path / "exit-status", tmp_path / "output"
    tests = shlex.join([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SENSITIVE])
    command = f"cd {shlex.quote(str(ROOT))} && {tests} > {output} 2>&1; echo $? > {done}"
    env = {**os.environ, **OVER_SSH}
    subprocess.run(
        [*server, "new-session", "-d", "-x", "200", "-y", "50", command],
        env=env,
        stdin=subprocess.DEVNULL,
        check=True,
        timeout=20,
    )
    try:
        deadline = time.monotonic() + 300
        while not done.exists() or not done.read_text().strip():
            assert time.monotonic() < deadline, "the tests in the tmux pane never finished"
            time.sleep(0.5)
    finally:
        subprocess.run([*server, "kill-server"], capture_output=True, check=False, timeout=20)
    assert done.read_text().strip() == "0", output.read_text()[-3000:]
    assert f"{len(SENSITIVE)} passed" in output.read_text()
