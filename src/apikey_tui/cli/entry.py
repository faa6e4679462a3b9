"""`main`: parse, run the handler, and make every failure one line and an exit code."""

from __future__ import annotations

import os
import sys

from apikey_tui.cli.commands import build_parser

# Only argparse, a few light standard modules and small modules of ours at import time:
# `--help`, `--version` and usage errors must cost about what starting Python costs (not even
# typing, json or shutil: tests/test_completion.py keeps the list). SQLAlchemy, SQLModel and
# Alembic are imported by the handlers that use a database, inside them.
from apikey_tui.cli.output import (
    EXIT_REFUSED,
    EXIT_USAGE,
    OutputError,
    drop_stdout,
    flush_stdout,
)
from apikey_tui.cli.records import Call
from apikey_tui.errors import ApiKeyError, InvalidInputError, KeyNotFoundError
from apikey_tui.names import printable

# typing costs 3 ms to import, a fifth of starting Python: `--help` does without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from apikey_tui.cli.records import Command

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a tool that the signal ended would report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (0 done, 1 refused, 2 usage)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if sys.stderr is None:  # started with stderr closed: print(file=None) would use stdout
        sys.stderr = open(os.devnull, "w")
    if not all(_is_utf8(argument) for argument in arguments):
        print("apikey-tui: an argument is not valid UTF-8 text", file=sys.stderr)
        return EXIT_USAGE
    try:
        try:
            code = _run(arguments)
        except SystemExit:  # argparse's --help, --version and usage errors: written first
            flush_stdout()
            raise
        flush_stdout()  # a reader that went away shows here, not at interpreter exit
    except BrokenPipeError:
        # `keys list | head`: stop quietly.
        drop_stdout()
        return EXIT_BROKEN_PIPE
    except ApiKeyError as exc:  # may quote database content: shown escaped, never obeyed
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug: its message or a traceback's could quote a secret
        internal_error(exc)
        return EXIT_REFUSED
    return code


def _run(arguments: list[str]) -> int:
    """Parse, then run the record's handler; the store it opened is closed after it."""
    args = build_parser(arguments).parse_args(arguments)
    record: Command = args.record
    call = Call(record, args)
    try:
        return record.run(call) if record.run is not None else EXIT_USAGE
    except (OutputError, BrokenPipeError, KeyboardInterrupt):
        raise  # stdout failed (exit 1), a reader went away (quiet), Ctrl-C: as main says
    except InvalidInputError as exc:
        # Input the rules refuse (a name, a pair, a URL, an owner that does not exist) is a
        # usage error, like a bad option, whichever layer found it: one place, every command.
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except ApiKeyError as exc:
        hint = ""
        if isinstance(exc, KeyNotFoundError) and "owner" not in args:  # --owner: SUPPRESS
            # The owner was assumed (the login name): the key is often another owner's.
            hint = "; another owner's? give --owner OWNER (`keys list --all` lists all keys)"
        elif record.refused_exit == EXIT_REFUSED:
            raise
        print(f"apikey-tui: {printable(str(exc))}{hint}", file=sys.stderr)
        return record.refused_exit
    except Exception as exc:
        if record.bug_exit == EXIT_REFUSED:
            raise
        internal_error(exc)
        return record.bug_exit
    finally:
        call.close()


def internal_error(exc: BaseException) -> None:
    """Say on stderr that a bug stopped the command: where, never its message."""
    print(
        f"apikey-tui: internal error ({_where(exc)}); no details are shown, as they could "
        "hold a secret. Please report it.",
        file=sys.stderr,
    )


def _where(exc: BaseException) -> str:
    """An exception's type and innermost place, for a bug report: never its message."""
    import traceback  # only when something went wrong

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8, kept as lone surrogates
        return False
    return True
