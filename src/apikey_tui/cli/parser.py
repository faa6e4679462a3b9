"""The argparse parser, built from the command records: only the parts a command line names."""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap

from apikey_tui.cli.output import EXIT_USAGE, write_help
from apikey_tui.cli.records import Arg

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Collection, Iterator
    from typing import Any, NoReturn

    from _typeshed import SupportsWrite

    from apikey_tui.cli.records import Command

PROG = "apikey-tui"


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit 2), and whose --help
    that cannot be written is one line and exit 1, as for any command's output."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The subcommands built (cli.parser.subcommands walks them), by name.
        self.commands: dict[str, Parser] = {}
        # Anything like '-5d' is a value, as '-5' already is: `--expires -5d` is then refused
        # for what it is (with what a duration looks like), not as "expected one argument".
        # The CLI's one reach into argparse's privates (test_cli.py's negative durations fail
        # if an upgrade breaks it).
        self._negative_number_matcher = re.compile(r"-\d")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see --help)\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            write_help(message, sys.stderr)
        raise SystemExit(status)

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        write_help(self.format_help(), sys.stdout if file is None else file)

    def print_usage(self, file: SupportsWrite[str] | None = None) -> None:
        write_help(self.format_usage(), sys.stdout if file is None else file)


class Unbuilt:
    """Stands for a subcommand the command line does not name: never parsed, so never built.

    argparse builds one full parser per subcommand, each costing about as much as its `gettext`
    lookups and actions; thirty of them were a third of `apikey-tui --help`.
    """


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help lines wrapped at spaces only: a command's name is never cut at its hyphen
    ('set-\nlimits'). argparse offers no option for it; _split_lines is its one hook, and
    tests/test_cli_terminal.py (every keys action on the keys line) fails if it goes."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap  # only when a help is shown

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def build(
    root: Command, words: Collection[str] | None = None, *, width: int | None = None
) -> argparse.ArgumentParser:
    """The parser of every command under root, or of those `words` name (a command line's
    words: a command not among them is never the one parsed, which keeps `--help` and usage
    errors fast).

    width: the help's width (default: the terminal's, as argparse reads it, less 2).
    """
    named = None if words is None else frozenset(words)
    room = _columns() - 2 if width is None else width

    def formatter(prog: str) -> argparse.HelpFormatter:
        # Raw: the examples keep their layout; descriptions are wrapped below, at this width.
        return _Formatter(prog, width=room)

    def make(record: Command, **kwargs: Any) -> Parser:
        examples = "\n".join(f"  {line}" for line in record.examples)
        parser = Parser(
            description=_wrap(record.description, room) or None,
            epilog=f"examples:\n{examples}" if examples else None,
            formatter_class=formatter,
            **kwargs,
        )
        parser.set_defaults(record=record)
        for item in record.arguments:
            if isinstance(item, Arg):
                parser.add_argument(*item.flags, **item.options)
                continue
            if item.exclusive:
                group: Any = parser.add_mutually_exclusive_group(required=item.required)
            else:
                group = parser.add_argument_group(item.title)
            for arg in item.arguments:
                group.add_argument(*arg.flags, **arg.options)
        if record.children:
            names = [child.name for child in record.children]
            commands = parser.add_subparsers(  # type: ignore[call-overload]
                # the root's may be absent (the app); a group's action may not
                dest="action" if record.words else "command",
                metavar="ACTION" if record.words else "{" + ",".join(names) + "}",
                required=bool(record.words),
                parser_class=subparser,
            )
            for child in record.children:
                built = commands.add_parser(child.name, help=child.help, record=child)
                if isinstance(built, Parser):
                    parser.commands[child.name] = built
        return parser

    def subparser(*, record: Command, **kwargs: Any) -> Parser | Unbuilt:
        if named is None or record.name in named:
            return make(record, **kwargs)
        return Unbuilt()

    return make(root, prog=PROG)


def subcommands(
    parser: argparse.ArgumentParser, words: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(words after the program's name, parser) for the parser and every subcommand built."""
    yield words, parser
    for name, sub in getattr(parser, "commands", {}).items():
        yield from subcommands(sub, f"{words} {name}".strip())


def _wrap(text: str, width: int) -> str:
    """A description as argparse fills it: one paragraph, at the help's width."""
    flat = " ".join(text.split())
    return textwrap.fill(flat, max(width, 11)) if flat else ""


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size reads it: $COLUMNS, stdout's, or 80.

    argparse asks shutil for the width, and shutil imports bz2, lzma and zlib: 2.6 ms, a sixth
    of starting Python. The same reading, without them.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80
