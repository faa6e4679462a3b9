"""The README's command tour, held to the real parser: it names no command or option gone."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from apikey_tui.cli import build_parser
from apikey_tui.cli.records import Command

README = Path(__file__).resolve().parent.parent / "README.md"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    # argparse has no public list of subcommands: the CLI's parser keeps those it built.
    return dict(getattr(parser, "commands", {}))


def _options(parser: argparse.ArgumentParser) -> set[str]:
    # The parser's own record (its default) holds the arguments it was built from.
    record: Command = parser.get_default("record")
    return {"-h", "--help", *(flag for arg in record.flat() for flag in arg.flags)}


def _command_lines() -> list[str]:
    """Each `apikey-tui …` line of the README's shell blocks, continuation lines joined."""
    lines: list[str] = []
    in_shell = False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            in_shell = line.strip() == "```sh"
            continue
        text = line.split("#", 1)[0].rstrip()
        if not in_shell or not text:
            continue
        if line[0].isspace() and lines:
            lines[-1] += " " + text.strip()
        else:
            found = re.search(r"\bapikey-tui\b.*", text)
            if found:
                lines.append(found.group(0))
    return lines


def test_the_readme_shows_commands() -> None:
    """The README's shell blocks hold a tour of the CLI (at least the key commands)."""
    assert sum(line.startswith("apikey-tui keys ") for line in _command_lines()) >= 5


@pytest.mark.parametrize("line", _command_lines())
def test_each_readme_command_exists_with_its_options(line: str) -> None:
    """Every subcommand and --option a README command line names is one the parser has."""
    root = build_parser()
    words = line.split()[1:]
    # `policy show | policy set …` and `scopes list|add …` name several actions of one command.
    parsers = [root]
    known = _options(root)
    command = _subparsers(root).get(words[0]) if words else None
    if command is not None:
        parsers, known = [command], known | _options(command)
        actions = _subparsers(command)
        if actions:
            named = [
                actions[word]
                for token in words[1:]
                for word in token.strip("[]").split("|")
                if word in actions
            ]
            assert named, f"{line!r} names no action of {words[0]!r}"
            parsers = named
    for parser in parsers:
        known |= _options(parser)
    for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
        assert flag in known, f"{line!r}: {flag} is not an option of the parser"


def test_the_release_names_its_schema_and_the_changelog_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--version names the release and the schema it writes; the changelog's newest entry is
    that release with that schema, and every schema up to it was written by some release."""
    from apikey_tui import SCHEMA_VERSION, __version__
    from apikey_tui.cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert (
        capsys.readouterr().out == f"apikey-tui {__version__} (database schema {SCHEMA_VERSION})\n"
    )
    changelog = (README.parent / "docs" / "changelog.md").read_text()
    entries = re.findall(
        r"^## (\d+\.\d+\.\d+) \(database schemas? ([\d, and]+)\)$", changelog, re.M
    )
    assert entries[0] == (__version__, str(SCHEMA_VERSION))
    written = {int(n) for _, schemas in entries for n in re.findall(r"\d+", schemas)}
    assert written == set(range(1, SCHEMA_VERSION + 1))
    versions = README.parent / "src" / "apikey_tui" / "db" / "migrations" / "versions"
    assert list(versions.glob(f"v{SCHEMA_VERSION:04d}_*.py"))  # its migration exists
