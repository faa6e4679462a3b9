"""The CLI's one confirmation: in a terminal a destructive command asks first, defaulting to no."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import TextIO


def confirmed(
    question: str,
    *,
    assume_yes: bool,
    stdin: TextIO | None = None,
    stderr: TextIO | None = None,
) -> bool:
    """Whether to go on with a destructive command.

    `--yes` (assume_yes) always goes on. Without a terminal on both stdin and stderr the command
    goes on as before, so scripts and pipes keep working (gh's rule). In a terminal the question
    is asked on stderr (stdout holds only data) and only 'y' or 'yes' goes on: Enter, anything
    else, end of input or Ctrl-C is no.
    """
    stdin = sys.stdin if stdin is None else stdin
    stderr = sys.stderr if stderr is None else stderr
    if assume_yes or not (_tty(stdin) and _tty(stderr)):
        return True
    print(f"{question} [y/N] ", end="", file=stderr, flush=True)
    try:
        answer = stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if not answer.endswith("\n"):
        print(file=stderr)  # end of input or Ctrl-C: end the prompt's line
    return answer.strip().lower() in {"y", "yes"}


def _tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream is no terminal
        return False
