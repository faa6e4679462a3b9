"""The CLI's one way to write a command's result: JSON or text on stdout, flushed, and one line
(exit 1) when stdout cannot take it (closed, a full disk); a reader that went away is quiet."""

from __future__ import annotations

import argparse
import errno
import io
import os
import sys
from collections.abc import Callable

from apikey_tui.errors import ApiKeyError

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import Any, TextIO

    from _typeshed import SupportsWrite

# Every command's exit codes: done, refused (or failed), a usage error.
EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


class OutputError(ApiKeyError):
    """stdout could not be written (a full disk, /dev/full, stdout closed): one line, exit 1."""


class NoStdout(io.StringIO):
    """Where output goes when the process has no stdout; anything written there is an error.
    (Its own type: a StringIO that a caller set as sys.stdout is a stdout like any other.)"""


def write_result(args: argparse.Namespace, data: Any, human: Callable[[TextIO], None]) -> None:
    """Write a command's result to stdout and flush it, so that a failure shows now (OSError)."""
    # Started with stdout closed (`>&-`), Python has no sys.stdout: that matters only to a
    # command with something to say there.
    out: TextIO = sys.stdout if sys.stdout is not None else NoStdout()
    if getattr(args, "json", False):
        import json  # only for --json: `--help` does without it

        json.dump(data, out, indent=2)
        out.write("\n")
    else:
        human(out)
    if isinstance(out, NoStdout) and out.getvalue():
        raise OSError(errno.EBADF, "stdout is closed")
    out.flush()


def emit(args: argparse.Namespace, data: Any, human: Callable[[TextIO], None]) -> int:
    """Write the result (JSON with --json, else human(out)); a failure is one OutputError."""
    try:
        write_result(args, data, human)
    except BrokenPipeError:
        raise  # a reader that went away: quiet (main)
    except OSError as exc:
        raise stdout_failed(exc, "could not write to stdout") from None
    return EXIT_OK


def flush_stdout() -> None:
    """Flush stdout now, so that a failure shows as one line, not at interpreter exit."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise stdout_failed(exc, "could not write to stdout") from None


def stdout_failed(exc: OSError, what: str, then: str = "") -> OutputError:
    """The one line for stdout that failed; stdout is dropped first (_drop_stdout)."""
    drop_stdout()
    return OutputError(f"{what} ({exc.strerror or exc}){then}")


def drop_stdout() -> None:
    """Point stdout at devnull after it failed, so that the flush at exit cannot fail again
    (as the Python docs advise for a broken pipe); what it still buffered is discarded."""
    if sys.stdout is not None:  # else fd 1 may be a database socket by now: leave it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def usage_error(message: str) -> int:
    """Say a usage error that argparse could not see (two options that do not go together)."""
    print(f"apikey-tui {message} (see --help)", file=sys.stderr)
    return EXIT_USAGE


def write_help(message: str, file: SupportsWrite[str] | None) -> None:
    """Write help or a usage error; a failure is one OutputError (argparse would swallow it,
    so --help into /dev/full exited 0 unwritten)."""
    try:
        if file is None:  # sys.stdout is None when stdout is closed
            raise OSError(errno.EBADF, "stdout is closed")
        file.write(message)
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise stdout_failed(exc, "could not write to stdout") from None
