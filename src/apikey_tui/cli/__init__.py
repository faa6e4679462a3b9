"""The `apikey-tui` command: the terminal app with no subcommand, a scriptable CLI with one."""

from apikey_tui.cli.commands import build_parser
from apikey_tui.cli.entry import main
from apikey_tui.cli.parser import subcommands

__all__ = ["build_parser", "main", "subcommands"]
