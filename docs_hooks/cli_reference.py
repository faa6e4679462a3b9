"""mkdocs hook: write every subcommand's --help into docs/reference/cli.md, so it cannot drift."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from mkdocs.exceptions import PluginError

from apikey_tui.cli import build_parser, subcommands
from apikey_tui.cli.commands import leaves
from apikey_tui.cli.records import DATABASE_RULES

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

PAGE = "reference/cli.md"
MARKER = "<!-- cli-reference -->"
DATABASES = "<!-- cli-databases -->"
WIDTH = 100  # less argparse's margin of 2, as for a terminal of 102 columns
# Python 3.14 colours --help when the build runs in a terminal; the page wants the plain text.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def render(parser: argparse.ArgumentParser) -> str:
    """Markdown for the parser and each subcommand: a heading, then its --help verbatim."""
    sections = []
    for _, sub in subcommands(parser):
        text = ANSI.sub("", sub.format_help()).rstrip()
        sections.append(f"### `{sub.prog}`\n\n```text\n{text}\n```\n")
    return "\n".join(sections)


def databases() -> str:
    """A table of each command's database rule, from its record (what a missing file does)."""
    rows = [
        f"| `{f'apikey-tui {command.words}'.strip()}` | {DATABASE_RULES[command.database]} |"
        for command in leaves()
    ]
    return "\n".join(["| command | a missing SQLite file |", "| --- | --- |", *rows])


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Put the rendered reference where the CLI page's marker stands."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE} lost its marker {MARKER!r}: the CLI reference has no place")
    if DATABASES not in markdown:
        raise PluginError(f"{PAGE} lost its marker {DATABASES!r}: the database rules have no place")
    markdown = markdown.replace(DATABASES, databases())
    # A fixed width: the page must not depend on the terminal that happened to build it.
    return markdown.replace(MARKER, render(build_parser(width=WIDTH)))
