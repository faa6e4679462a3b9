"""The CLI in a real terminal (tmux at 80x24): `keys list` fits, `keys delete` asks first."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from apikey_tui.store import KeyStore
from tests.conftest import ACTOR, CHEAP
from tests.tui.test_tmux_e2e import Tmux, app_env

NAMES = [f"production-inference-gateway-europe-frankfurt-eu-west-{n}" for n in range(1, 4)]


@pytest.fixture
def shell_at_80(tmp_path: Path) -> Iterator[tuple[Tmux, str]]:
    """A shell in an 80x24 tmux pane whose `cli` runs this tree's apikey-tui on a database of
    alice's keys (three long names that differ only at the end, and 'ci')."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    with closing(KeyStore.open(url, hasher=CHEAP, actor=ACTOR)) as store:
        for name in [*NAMES, "ci"]:
            store.create_key("alice", name, ["project", "serving"])
    tmux = Tmux(["sh"], {**app_env(url), "PS1": "$ "})
    tmux.run("resize-window", "-t", "e2e", "-x", "80", "-y", "24")
    assert tmux.run("display-message", "-p", "-t", "e2e", "#{pane_width}").strip() == "80"
    tmux.send(f'cli() {{ {sys.executable} -m apikey_tui --owner alice "$@"; }}', "Enter")
    yield tmux, url
    tmux.close()


def test_keys_list_at_80_columns_is_one_line_per_key(shell_at_80: tuple[Tmux, str]) -> None:
    """`keys list` in an 80-column terminal prints a header and one line per key, no wrapping."""
    tmux, _ = shell_at_80
    tmux.send("clear; cli keys list; echo END", "Enter")
    screen = tmux.wait_for(lambda s: "\nEND" in s, "the listing")
    lines = screen.split("END", 1)[0].rstrip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NAME"))
    rows = lines[start + 1 :]
    assert len(rows) == 4, screen
    assert all(re.match(r"(ci|production\S*…\S*-eu-west-\d) ", row) for row in rows), screen
    assert len({row.split()[0] for row in rows}) == 4  # the cut names still differ


def test_keys_delete_answered_no_keeps_the_key(shell_at_80: tuple[Tmux, str]) -> None:
    """`keys delete ci` asks in a terminal; answering n leaves the key in the database."""
    tmux, url = shell_at_80
    tmux.send("clear; cli keys delete ci; echo EXIT=$?", "Enter")
    tmux.wait_for(lambda s: "[y/N]" in s and "Delete key 'ci' of alice" in s, "the question")
    tmux.send("n", "Enter")
    tmux.wait_for(lambda s: "EXIT=1" in s, "the command to end")
    with closing(KeyStore.open(url)) as store:
        assert store.get_key("alice", "ci").name == "ci"
