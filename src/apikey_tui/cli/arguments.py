"""The arguments several commands share, and the types that check values while parsing."""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime, timedelta

from apikey_tui.cli.output import write_help
from apikey_tui.cli.records import Arg, Group
from apikey_tui.clock import system_clock
from apikey_tui.errors import InvalidInputError
from apikey_tui.integrations import HTTP_PARSERS
from apikey_tui.names import (
    check_expiry,
    check_owner,
    check_reason,
    parse_duration,
    parse_expiry,
)

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from apikey_tui.limits.model import Limit
    from apikey_tui.names import Expiry
    from apikey_tui.networks import Cidr

LIMIT_MAX = 10_000


def owner(text: str) -> str:
    """An owner (argparse type): `--owner "$UNSET"` must not silently mean "me"."""
    try:
        return check_owner(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reason(text: str) -> str:
    """Why a key is disabled (argparse type): refused before anything is read or shown."""
    try:
        return check_reason(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration(text: str) -> timedelta:
    """A duration such as 90d; a malformed one is a usage error (2), as any bad option value."""
    try:
        return parse_duration(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def filter_text(text: str) -> str:
    """A filter (argparse type): its FIELD:VALUE terms read as the store reads them; a term no
    key can meet (`state:disbled`, `kind:teams`, `owner:`) is a usage error, never 'no keys'."""
    from apikey_tui.store import key_filter  # SQLAlchemy: only when a filter is given

    try:
        found = key_filter.problem(key_filter.parse(text))
    except InvalidInputError as exc:
        found = str(exc)
    if found is not None:
        raise argparse.ArgumentTypeError(found)
    return text


def span(text: str) -> timedelta:
    """A duration longer than 0 (a window to look back over)."""
    value = duration(text)
    if value <= timedelta(0):
        raise argparse.ArgumentTypeError(f"expected a span longer than 0, got {text[:30]!a}")
    return value


def expiry(text: str) -> Expiry:
    """A duration from now, an ISO date or date and time, or never."""
    try:
        value = parse_expiry(text)
        # A date past the bound is malformed as a duration past it is (the store refuses both
        # too); judged here, on the clock the CLI's store reads, to be a usage error like it.
        return check_expiry(value, system_clock()) if isinstance(value, datetime) else value
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def max_lifetime(text: str) -> timedelta | None:
    """A duration, or none."""
    return None if text.strip().lower() == "none" else duration(text)


def limit(text: str) -> int:
    """A whole number from 1 to LIMIT_MAX."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= LIMIT_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {LIMIT_MAX}, got {text[:30]!a}"
        )
    return value


def percent(text: str) -> int:
    """A whole percentage from 1 to 100."""
    value = int(text) if text.strip().isdigit() else 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage from 1 to 100, got {text[:30]!a}")
    return value


def rate_limit(text: str) -> Limit:
    """A limit N/DURATION (10/s, 600/1m, 100000/30d): a malformed one is a usage error (2)."""
    from apikey_tui.limits.model import parse_limit  # the limits package only when used

    try:
        return parse_limit(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def limits_or_none(text: str) -> Limit | None:
    """A limit, or the word none (no limits: `set-limits NAME none`)."""
    return None if text.strip().lower() == "none" else rate_limit(text)


LIMIT = Arg(
    "--limit",
    action="append",
    type=rate_limit,
    default=[],
    metavar="N/DURATION",
    help="at most N requests per window (10/s, 600/1m, 100000/30d); repeat it for several",
)
LIMITS = Arg(
    "limits",
    nargs="+",
    type=limits_or_none,
    metavar="N/DURATION",
    help="the limits, each N/DURATION (10/s, 600/1m, 100000/30d), or none to lift them all",
)


def pair(text: str) -> tuple[str, str]:
    """KEY=VALUE (a value may be empty or hold '='); its rules are checked where it is used."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text[:40]!a}")
    return name, value


def pair_or_none(text: str) -> tuple[str, str] | None:
    """KEY=VALUE, or the word none (`set-meta NAME none`)."""
    return None if text.strip().lower() == "none" else pair(text)


META = Arg(
    "--meta",
    action="append",
    type=pair,
    default=[],
    metavar="KEY=VALUE",
    help="metadata services read as caller.meta (≤ 16 entries, ≤ 1024 bytes as JSON); repeat it",
)
TAG = Arg(
    "--tag",
    action="append",
    type=pair,
    default=[],
    metavar="KEY=VALUE",
    help="a tag for admins' filters (tag:env=prod); services never see it; repeat it",
)


def network(text: str) -> Cidr:
    """A network 10.0.0.0/8, 2001:db8::/32 or an address: a malformed one is a usage error."""
    from apikey_tui.networks import parse_cidr

    try:
        return parse_cidr(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


ALLOW_FROM = Arg(
    "--allow-from",
    action="append",
    type=network,
    default=[],
    metavar="CIDR",
    help="only from this network (10.0.0.0/8, 2001:db8::/32, an address); repeat it for several",
)
DENY_FROM = Arg(
    "--deny-from",
    action="append",
    type=network,
    default=[],
    metavar="CIDR",
    help="never from this network, even inside an allowed one; repeatable",
)


def networks_mode(flag: str) -> Arg:
    """--networks-mode (keys create) or --mode (set-networks): enforce or shadow."""
    return Arg(
        flag,
        choices=("enforce", "shadow"),
        help="enforce refuses (403, the default); shadow admits and records what it would refuse",
    )


def count(text: str) -> int:
    """A whole number from 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, got {text[:30]!a}")
    return value


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """Seconds, more than 0 (or 0 too)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > 0 or (allow_zero and value == 0))):
            least = "0 or more" if allow_zero else "more than 0"
            raise argparse.ArgumentTypeError(f"expected {least} seconds, got {text[:30]!a}")
        return value

    return parse


# SUPPRESS lets the shared options stand before or after the subcommand without the subparser's
# defaults overwriting what was given before it.
DATABASE = (
    Arg(
        "--database-url",
        default=argparse.SUPPRESS,
        help="SQLAlchemy URL (default: $APIKEY_TUI_DATABASE_URL, else a SQLite file in "
        "$XDG_DATA_HOME/apikey-tui)",
    ),
)
# --database-url, and the owner and --json of the commands that read or write keys.
COMMON = (
    *DATABASE,
    Arg(
        "--owner",
        type=owner,
        default=argparse.SUPPRESS,
        help="the user the keys stand in for (default: your login name)",
    ),
    Arg("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out"),
)
NAME = Arg("name")
SCOPE = Arg(
    "--scope",
    action="append",
    default=[],
    required=True,  # none at all is a usage error (2); an unknown one is refused (1)
    metavar="SCOPE",
    help="an API the key may reach; repeat it or separate with commas (at least one)",
)
YES = Arg(
    "-y",
    "--yes",
    action="store_true",
    help="do not ask first (in a terminal it asks, defaulting to no; a script is never asked)",
)


def expires(*, rotating: bool = False) -> Arg:
    """--expires, with the default that applies (a new key's, or a rotated one's)."""
    default = (
        "the lifetime the key had, from now" if rotating else "no expiry"
    ) + "; under a max-lifetime policy at most its maximum"
    return Arg(
        "--expires",
        type=expiry,
        metavar="WHEN",
        help=f"a duration from now (90d), an ISO date or date and time, or never (default: "
        f"{default})",
    )


def server(*, port: int) -> tuple[Arg | Group, ...]:
    """--host and --port, and the connection group: keep-alive and header timeouts, --http."""
    return (
        Arg("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)"),
        Arg("--port", type=int, default=port, help=f"listen port (default {port})"),
        Group(
            Arg(
                "--keep-alive-timeout",
                type=count,
                default=5,
                metavar="SECONDS",
                help="close a connection idle this long, a new one included (default 5; keep it "
                "longer than the proxy's idle timeout for its upstream connections)",
            ),
            Arg(
                "--header-timeout",
                type=count,
                default=10,
                metavar="SECONDS",
                help="close a connection whose request has not arrived whole this long after its "
                "first byte (default 10)",
            ),
            Arg(
                "--http",
                choices=HTTP_PARSERS,
                default="auto",
                help="the HTTP parser (default auto: httptools when installed, as [serve] does, "
                "else h11)",
            ),
            title="connections",
        ),
    )


class Version(argparse.Action):
    """--version: the line written as help is (argparse's own would swallow a failed write)."""

    def __init__(self, option_strings: list[str], version: str, **kwargs: Any) -> None:
        super().__init__(option_strings, **kwargs)  # nargs=0, given by its record
        self.version = version

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        write_help(self.version + "\n", sys.stdout)
        parser.exit()


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of server(), as auth_server.serve takes them."""
    return {
        "host": args.host,
        "port": args.port,
        "keep_alive_timeout": args.keep_alive_timeout,
        "header_timeout": args.header_timeout,
        "http": args.http,
    }
