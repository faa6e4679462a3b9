"""The command tree: the program, its groups and own commands, over each module's records.

A command's facts (words, help, arguments, examples, handler, database rule) are in its record,
beside its handler; here they are put in the order `--help` lists them.
"""

from __future__ import annotations

import argparse
import sys

from apikey_tui import SCHEMA_VERSION, __version__
from apikey_tui.cli import arguments as a
from apikey_tui.cli import key_commands as change
from apikey_tui.cli import key_listing as listing
from apikey_tui.cli import network_commands as networking
from apikey_tui.cli import owner_commands as owners
from apikey_tui.cli import usage_commands as usage
from apikey_tui.cli.admin_commands import (
    DB_GRANT_VERIFIER,
    DB_UPGRADE,
    EVENTS,
    POLICY_SET,
    POLICY_SHOW,
    SCOPES_ADD,
    SCOPES_DESCRIBE,
    SCOPES_LIST,
    SCOPES_REMOVE,
)
from apikey_tui.cli.arguments import Version
from apikey_tui.cli.leak_commands import SCAN, SERVE_LEAKS
from apikey_tui.cli.output import EXIT_USAGE, emit
from apikey_tui.cli.parser import build
from apikey_tui.cli.records import DEFAULT_ONLY, NO_DATABASE, Arg, Call, Command
from apikey_tui.cli.serve_auth import COMMAND as SERVE_AUTH

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Collection

KEYS = (
    change.CREATE,
    listing.LIST,
    listing.SHOW,
    change.DELETE,
    change.RECREATE,
    change.SET_SCOPES,
    change.SET_LIMITS,
    owners.SET_META,
    owners.SET_TAGS,
    owners.TRANSFER,
    networking.SET_NETWORKS,
    networking.NETWORKS,
    change.ROTATE,
    change.SET_EXPIRY,
    change.DISABLE,
    change.ENABLE,
    usage.USAGE,
    usage.RIGHTSIZE,
    usage.NEAR_LIMITS,
)


def run_app(call: Call) -> int:
    """Open the terminal app on the store (created only at the default location)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # else it waits forever for keys
        print(
            "apikey-tui: the terminal app needs a terminal on stdin and stdout; "
            "scripts use the subcommands (see --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    owner = None if getattr(call.args, "all", False) else call.owner
    # Imported here so that scripts and services never pay for the terminal framework. Neither
    # imports SQLAlchemy: the first rows are painted before it when they can be read without it.
    from apikey_tui.config import chosen_database_url
    from apikey_tui.tui.app import run_app as run
    from apikey_tui.tui.first_rows import OpeningStore, read_first_rows
    from apikey_tui.tui.key_table import CHUNK

    url = chosen_database_url(getattr(call.args, "database_url", None))
    first = read_first_rows(url, owner, CHUNK)
    if first is not None:  # the store opens in a thread once these rows are on screen
        return run(OpeningStore(first, call.store), owner=owner)
    store = call.store()  # refused before the screen changes
    return run(store, owner=owner)


def run_completion(call: Call) -> int:
    """Print the completion script for the shell named (no database, no parser: the records)."""
    from apikey_tui.cli.completion import script

    text = script(ROOT, call.args.shell)
    return emit(argparse.Namespace(), None, lambda out: print(text, end="", file=out))


COMPLETION = Command(
    "completion",
    help="print the shell completion script for bash, zsh or fish",
    run=run_completion,
    database=NO_DATABASE,
    arguments=(Arg("shell", choices=["bash", "zsh", "fish"]),),
    examples=(
        "apikey-tui completion bash > ~/.local/share/bash-completion/completions/apikey-tui",
        "apikey-tui completion zsh > ~/.zfunc/_apikey-tui   # with fpath+=(~/.zfunc)",
        "apikey-tui completion fish > ~/.config/fish/completions/apikey-tui.fish",
    ),
)


def _listed(commands: tuple[Command, ...]) -> str:
    """'a, b and c': the keys line of `apikey-tui --help` names every action, new ones too."""
    names = [command.name for command in commands]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


ROOT = Command(
    "",
    help="",
    description="Manage API keys. With no subcommand, open the terminal app.",
    run=run_app,
    database=DEFAULT_ONLY,
    arguments=(
        *a.COMMON,
        Arg(
            "--version",
            action=Version,
            nargs=0,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            version=f"apikey-tui {__version__} (database schema {SCHEMA_VERSION})",
            help="show program's version number and exit",
        ),
        Arg("--all", action="store_true", default=argparse.SUPPRESS, help="all owners' keys"),
    ),
    examples=(
        "apikey-tui                                  # the terminal app: your keys",
        "apikey-tui --all                            # every owner's keys",
        "apikey-tui keys create ci --scope project   # a key, printed once",
    ),
    children=(
        Command(
            "keys",
            help=f"{_listed(KEYS)} keys",
            children=KEYS,
            examples=(
                "apikey-tui keys list --all",
                "apikey-tui keys create ci --scope project --expires 90d",
            ),
        ),
        Command(
            "owners",
            help="people, teams and service accounts: members, metadata, shared limits, networks",
            children=(
                owners.OWNERS_LIST,
                listing.OWNER_SHOW,
                owners.OWNERS_ADD,
                owners.OWNERS_CHANGE,
                owners.OWNERS_MEMBERS,
                owners.OWNERS_REMOVE,
                change.OWNER_SET_LIMITS,
                networking.OWNER_SET_NETWORKS,
            ),
            examples=(
                "apikey-tui owners add payments --kind team --member alice",
                "apikey-tui owners set-limits svc-batch 100/s 1000000/30d",
            ),
        ),
        owners.OFFBOARD,
        Command(
            "policy",
            help="the key lifetime policy of the database",
            children=(POLICY_SHOW, POLICY_SET),
            examples=("apikey-tui policy show",),
        ),
        Command(
            "scopes",
            help="the scope catalog: the APIs keys may reach",
            children=(SCOPES_LIST, SCOPES_ADD, SCOPES_DESCRIBE, SCOPES_REMOVE),
            examples=("apikey-tui scopes list",),
        ),
        EVENTS,
        Command(
            "db",
            help="the database: schema upgrades, verifier privileges",
            children=(DB_UPGRADE, DB_GRANT_VERIFIER, usage.COMPACT),
            examples=("apikey-tui db upgrade",),
        ),
        SERVE_AUTH,
        SCAN,
        SERVE_LEAKS,
        COMPLETION,
    ),
)


def build_parser(
    words: Collection[str] | None = None, *, width: int | None = None
) -> argparse.ArgumentParser:
    """The parser of every command, or of those `words` name (parser.build)."""
    return build(ROOT, words, width=width)


def leaves() -> list[Command]:
    """Every command that runs a handler of its own (the program, with no subcommand, too)."""
    return [command for command in ROOT.walk() if command.run is not None]
