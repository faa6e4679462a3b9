"""Subcommand parsers built only when the command line names them, so `--help` stays cheap."""

from __future__ import annotations

import argparse
from collections.abc import Collection

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli.py
if TYPE_CHECKING:
    from typing import Any


class Unbuilt:
    """The parser of a subcommand the command line does not name: it takes every call and keeps
    only what `--help` shows of it (its name, its help line, the names of its own subcommands).

    argparse builds one full parser per subcommand, and each costs about as much as all of its
    `gettext` lookups and actions; thirty of them were a third of `apikey-tui --help`.
    """

    def __init__(self) -> None:
        self._actions: list[argparse.Action] = []
        self.epilog: str | None = None
        self.formatter_class: Any = None

    def add_subparsers(self, **kwargs: Any) -> LazyCommands:
        commands = LazyCommands([], prog="", parser_class=argparse.ArgumentParser, **kwargs)
        commands.named = frozenset()
        self._actions.append(commands)
        return commands

    def __getattr__(self, name: str) -> Any:
        # add_argument, set_defaults, add_mutually_exclusive_group(...).add_argument, …
        return self._ignore

    def _ignore(self, *_args: Any, **_kwargs: Any) -> Unbuilt:
        return self


class LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """A subparsers action that builds a subcommand's parser only if `named` holds its name.

    `named` None (the default) builds every one: the CLI reference, completion and tests see the
    whole parser. The command line's own words are the names it may need: a subcommand that is
    not among them is never the one parsed, so its parser is never used.
    """

    named: frozenset[str] | None = None

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        aliases: Collection[str] = kwargs.get("aliases", ())
        if self.named is None or name in self.named or any(a in self.named for a in aliases):
            parser = super().add_parser(name, **kwargs)
            parser.named_words = self.named
            return parser
        if "help" in kwargs:
            self._choices_actions.append(self._ChoicesPseudoAction(name, aliases, kwargs["help"]))
        unbuilt = Unbuilt()
        for word in (name, *aliases):
            self._name_parser_map[word] = unbuilt
        return unbuilt
