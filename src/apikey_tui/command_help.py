"""The CLI's `--help` extras: examples for each command, and a group's help naming its commands."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Iterator

# Each command's examples, by its words after `apikey-tui`. A test asks every command for some.
EXAMPLES: dict[str, list[str]] = {
    "": [
        "apikey-tui                                  # the terminal app: your keys",
        "apikey-tui --all                            # every owner's keys",
        "apikey-tui keys create ci --scope project   # a key, printed once",
    ],
    "keys": [
        "apikey-tui keys list --all",
        "apikey-tui keys create ci --scope project --expires 90d",
    ],
    "keys create": [
        "KEY=$(apikey-tui keys create ci --scope project)",
        "apikey-tui keys create model-client --scope serving,project --expires 90d",
        "apikey-tui keys create batch --scope project --owner svc-batch --json",
    ],
    "keys list": [
        "apikey-tui keys list",
        "apikey-tui keys list --all --expiring 14d      # for cron: silent when none",
        "apikey-tui keys list --filter prod --limit 20",
        "apikey-tui keys list --json | jq -r '.[] | select(.state != \"active\") | .name'",
    ],
    "keys show": ["apikey-tui keys show ci", "apikey-tui keys show ci --owner svc-batch --json"],
    "keys delete": [
        "apikey-tui keys delete ci          # asks first in a terminal",
        "apikey-tui keys delete ci --yes    # does not ask",
    ],
    "keys recreate": ["KEY=$(apikey-tui keys recreate ci --yes)   # a stolen key: new secret"],
    "keys set-scopes": ["apikey-tui keys set-scopes ci --scope project --scope serving"],
    "keys rotate": [
        "KEY=$(apikey-tui keys rotate ci --grace 24h)   # the old secret works one more day",
        "apikey-tui keys rotate ci --end-grace          # the old secret stops now",
    ],
    "keys set-expiry": [
        "apikey-tui keys set-expiry ci 90d",
        "apikey-tui keys set-expiry ci 2030-01-31",
        "apikey-tui keys set-expiry ci never",
    ],
    "keys disable": ["apikey-tui keys disable ci --reason 'seen in a pastebin'"],
    "keys enable": ["apikey-tui keys enable ci"],
    "keys usage": ["apikey-tui keys usage ci --since 7d", "apikey-tui keys usage ci --json"],
    "keys rightsize": [
        "apikey-tui keys rightsize --all              # for cron: silent when none",
        "apikey-tui keys rightsize ci --window 90d --apply   # asks first in a terminal",
        "apikey-tui keys rightsize --all --apply --yes --json",
    ],
    "policy": ["apikey-tui policy show"],
    "policy show": ["apikey-tui policy show --json"],
    "policy set": [
        "apikey-tui policy set max-lifetime 365d",
        "apikey-tui policy set max-lifetime none",
    ],
    "scopes": ["apikey-tui scopes list"],
    "scopes list": ["apikey-tui scopes list --json"],
    "scopes add": ["apikey-tui scopes add serving --description 'the model serving API'"],
    "scopes describe": ["apikey-tui scopes describe serving 'served models: predict, explain'"],
    "scopes remove": ["apikey-tui scopes remove legacy"],
    "events": ["apikey-tui events --limit 20", "apikey-tui events --json | jq '.[0]'"],
    "db": ["apikey-tui db upgrade"],
    "db compact": ["apikey-tui db compact                # hourly from cron: silent when idle"],
    "db upgrade": ["apikey-tui db upgrade --database-url postgresql+psycopg://admin@db/keys"],
    "db grant-verifier": [
        "apikey-tui db grant-verifier svc_reader            # print the grants",
        "apikey-tui db grant-verifier svc_reader --apply    # run them",
    ],
    "serve-auth": [
        "apikey-tui serve-auth --port 9180 --rules rules.toml",
        "apikey-tui serve-auth --workers 4 --database-url postgresql+psycopg://svc@db/keys",
    ],
    "scan": [
        "apikey-tui scan src/",
        "git diff --cached | apikey-tui scan --offline -",
        "apikey-tui scan --git . --disable --yes",
    ],
    "serve-leaks": ["apikey-tui serve-leaks --github-keys github-keys.json --port 9181"],
    "completion": [
        "apikey-tui completion bash > ~/.local/share/bash-completion/completions/apikey-tui",
        "apikey-tui completion zsh > ~/.zfunc/_apikey-tui   # with fpath+=(~/.zfunc)",
        "apikey-tui completion fish > ~/.config/fish/completions/apikey-tui.fish",
    ],
}


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped as usual; indented lines (the examples) kept exactly as written."""

    def __init__(self, prog: str, *, width: int | None = None, **options: int) -> None:
        # argparse asks shutil for the width, and shutil imports bz2, lzma and zlib: 2.6 ms, a
        # sixth of starting Python. The same reading as shutil.get_terminal_size, without them.
        super().__init__(prog, width=_columns() - 2 if width is None else width, **options)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for block in text.split("\n\n"):
            lines = block.splitlines()
            if any(line.startswith(" ") for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                flat = " ".join(block.split())
                paragraphs.append(
                    textwrap.fill(flat, width, initial_indent=indent, subsequent_indent=indent)
                )
        return "\n\n".join(paragraphs)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size reads it: $COLUMNS, stdout's, or 80."""
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


def subcommands(
    parser: argparse.ArgumentParser, words: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(words after the program's name, parser) for the parser and every subcommand under it."""
    yield words, parser
    for name, sub in _choices(parser).items():
        yield from subcommands(sub, f"{words} {name}".strip())


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    # argparse has no public list of subcommands; its _SubParsersAction holds them (the docs'
    # CLI reference hook reads them the same way).
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def finish(parser: argparse.ArgumentParser) -> None:
    """Give every command its examples and a group's help the names of all its commands.

    Run once every command is registered, so that one added later (by another module) is
    named too.
    """
    for words, sub in subcommands(parser):
        examples = EXAMPLES.get(words)
        if examples and not sub.epilog:
            sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = "{" + ",".join(action.choices) + "}"
            _name_actions(action)


def _name_actions(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # The one-line help a group shows in `apikey-tui --help` lists all its actions, so that a
    # new one can never be missing from it ("create, list, … and enable keys").
    for pseudo in commands._choices_actions:
        group = commands.choices[pseudo.dest]
        names = list(_choices(group))
        if pseudo.dest == "keys" and names:
            listed = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
            pseudo.help = f"{listed} keys"
