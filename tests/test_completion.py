"""`apikey-tui completion SHELL`: scripts from the parser that bash, zsh and fish really load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import apikey_tui

SOURCE = str(Path(apikey_tui.__file__).resolve().parents[1])


def _script(shell: str, tmp_path: Path) -> Path:
    """The script as the installed command prints it (this tree's source first on the path)."""
    env = {**os.environ, "PYTHONPATH": SOURCE}
    done = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "completion", shell],
        capture_output=True, text=True, check=True, timeout=60, env=env,
    )  # fmt: skip
    path = tmp_path / f"completion.{shell}"
    path.write_text(done.stdout)
    return path


def _shell(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (.ci/run installs it)", pytrace=False)
    return found


# Loads the script, asks `complete -p` which function completes apikey-tui, and runs it the way
# bash's programmable completion does (COMP_WORDS, COMP_CWORD; arguments: command, word, previous).
BASH_DRIVER = """
source "$1"; shift
spec=$(complete -p apikey-tui) || exit 3
function=${spec##*-F }; function=${function%% *}
COMP_WORDS=(apikey-tui "$@"); COMP_CWORD=$#
COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
"$function" apikey-tui "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\\n' "${COMPREPLY[@]}"
"""


def _bash(script: Path, *words: str) -> list[str]:
    done = subprocess.run(
        [_shell("bash"), "--norc", "-c", BASH_DRIVER, "bash", str(script), *words],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return done.stdout.split()


def test_bash_completes_keys_cr_to_keys_create(tmp_path: Path) -> None:
    """Loaded into bash and run through `complete`, `apikey-tui keys cr` completes to create."""
    script = _script("bash", tmp_path)
    assert _bash(script, "keys", "cr") == ["create"]


def test_bash_completes_options_values_and_skips_option_arguments(tmp_path: Path) -> None:
    """Options of the command at hand, an option's choices, and an option's value never taken
    for a command."""
    script = _script("bash", tmp_path)
    assert "--yes" in _bash(script, "keys", "delete", "--")
    assert _bash(script, "serve-leaks", "--action", "") == ["disable", "delete"]
    assert _bash(script, "--owner", "keys", "k") == ["keys"]
    assert _bash(script, "completion", "") == ["bash", "zsh", "fish"]


def test_fish_completes_keys_cr_to_keys_create(tmp_path: Path) -> None:
    """fish, with the script sourced, completes `apikey-tui keys cr` to create (with its help)."""
    script = _script("fish", tmp_path)
    asks = "complete -C 'apikey-tui keys cr'; complete -C 'apikey-tui keys delete --y'"
    done = subprocess.run(
        [_shell("fish"), "--no-config", "-c", f"source {script}; {asks}"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].startswith("create\t") and lines[1].startswith("--yes\t"), lines


def test_zsh_script_offers_the_subcommands_of_the_words_typed(tmp_path: Path) -> None:
    """zsh loads the script; its function offers `create` after `keys cr` (zsh's own helpers
    stubbed to print what they are given: zsh filters by the prefix itself)."""
    script = _script("zsh", tmp_path)
    driver = f"""
compdef() {{ }}
_describe() {{ print -l -- "${{(@P)4}}" }}
compadd() {{ print -l -- "${{@[2,-1]}}" }}
_files() {{ print FILES }}
source {script}
words=(apikey-tui keys cr); CURRENT=3; _apikey_tui
print SPLIT
words=(apikey-tui serve-leaks --action ''); CURRENT=4; _apikey_tui
"""
    done = subprocess.run(
        [_shell("zsh"), "-f", "-c", driver], capture_output=True, text=True, check=True, timeout=30
    )
    offered, choices = done.stdout.split("SPLIT\n")
    assert "create:create a key; print it once" in offered.splitlines()
    assert choices.split() == ["disable", "delete"]


# What `--help` and a usage error must not import: the completion generator and the database
# and app libraries (seconds), and the standard library's typing, json, shutil and http (about
# 8 ms together, half of starting Python: the issue holds `--help` to 3x `python -c pass`).
HEAVY = ("apikey_tui.cli.completion", "sqlalchemy", "textual", "typing", "json", "shutil", "http")


@pytest.mark.parametrize(
    "argv", [["--help"], ["keys", "--help"], ["keys", "create", "x"]], ids=" ".join
)
def test_help_and_usage_errors_import_nothing_heavy(argv: list[str]) -> None:
    """`--help`, a group's help and a usage error load none of HEAVY (so they stay cheap)."""
    code = (
        "import sys\n"
        "from apikey_tui.cli import main\n"
        "try: main(sys.argv[1:])\n"
        "except SystemExit: pass\n"
        f"print(*sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
    )
    env = {**os.environ, "PYTHONPATH": SOURCE}
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, env=env
    )
    assert done.stderr.splitlines()[-1] == ""
    assert "apikey-tui" in done.stdout + done.stderr  # it did answer (help, or a one-line error)


def test_a_positionals_choices_are_offered_once(tmp_path: Path) -> None:
    """After `policy set max-lifetime` (or `completion bash`) the choice is not offered again,
    in bash, zsh and fish: each position has its own, and those have one."""
    script = _script("bash", tmp_path)
    assert _bash(script, "policy", "set", "") == ["max-lifetime"]
    assert _bash(script, "policy", "set", "max-lifetime", "") == []
    assert _bash(script, "completion", "bash", "") == []
    fish = _script("fish", tmp_path)
    asks = (
        "complete -C 'apikey-tui completion '; echo SPLIT; "
        "complete -C 'apikey-tui completion bash '"
    )
    done = subprocess.run(
        [_shell("fish"), "--no-config", "-c", f"source {fish}; {asks}"],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    first, again = done.stdout.split("SPLIT\n")
    assert first.split() == ["bash", "fish", "zsh"] and "bash" not in again.split(), done.stdout
    zsh = _script("zsh", tmp_path)
    driver = f"""
compdef() {{ }}
compadd() {{ print -l -- "${{@[2,-1]}}" }}
_files() {{ print FILES }}
source {zsh}
words=(apikey-tui completion ''); CURRENT=3; _apikey_tui
print SPLIT
words=(apikey-tui completion bash ''); CURRENT=4; _apikey_tui
"""
    done = subprocess.run(
        [_shell("zsh"), "-f", "-c", driver], capture_output=True, text=True, check=True, timeout=30
    )
    first, again = done.stdout.split("SPLIT\n")
    assert first.split() == ["bash", "zsh", "fish"] and again.split() == ["FILES"], done.stdout
