"""mkdocs hook: write every subcommand's --help into docs/reference/cli.md, so it cannot drift."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from mkdocs.exceptions import PluginError

from apikey_tui.cli import build_parser
from apikey_tui.command_help import HelpFormatter

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

PAGE = "reference/cli.md"
MARKER = "<!-- cli-reference -->"
# A fixed width: the page must not depend on the terminal that happened to build it.
WIDTH = 100
# Python 3.14 colours --help when the build runs in a terminal; the page wants the plain text.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _subcommands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    # argparse offers no public way to list subparsers; its _SubParsersAction is the one place
    # that knows them (sphinx-argparse reads it the same way).
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _subcommands(sub)


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown for the parser and each subcommand: a heading, then its --help verbatim."""
    sections = []
    for prog, sub in _subcommands(parser):
        # The program's own formatter (examples kept as written), at a fixed width.
        sub.formatter_class = partial(HelpFormatter, width=WIDTH)
        text = ANSI.sub("", sub.format_help()).rstrip()
        sections.append(f"### `{prog}`\n\n```text\n{text}\n```\n")
    return "\n".join(sections)


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put the rendered reference where the CLI page's marker stands."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE} lost its marker {MARKER!r}: the CLI reference has no place")
    return markdown.replace(MARKER, render(build_parser()))
