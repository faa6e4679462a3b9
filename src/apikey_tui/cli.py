"""The `apikey-tui` command: the terminal app with no subcommand, a scriptable CLI with one."""

from __future__ import annotations

import argparse
import errno
import functools
import math
import os
import re
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

# Only argparse, a few light standard modules and small modules of ours at import time:
# `--help`, `--version` and usage errors must cost about what starting Python costs (not even
# typing, json or shutil: tests/test_completion.py keeps the list). SQLAlchemy, SQLModel and
# Alembic are imported by the commands that use a database, inside the functions below.
from apikey_tui import SCHEMA_VERSION, __version__
from apikey_tui.clock import system_clock
from apikey_tui.command_help import HelpFormatter, finish
from apikey_tui.command_output import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    OutputError,
    drop_stdout,
    emit,
    flush_stdout,
    stdout_failed,
    write_result,
)
from apikey_tui.errors import (
    ApiKeyError,
    DatabaseUrlError,
    InvalidInputError,
    StoreUnavailableError,
)
from apikey_tui.integrations.serve_options import add_server_options, count, server_options
from apikey_tui.lazy_commands import LazyCommands
from apikey_tui.names import (
    check_expiry,
    check_owner,
    counted,
    format_duration,
    format_moment,
    parse_duration,
    parse_expiry,
    printable,
)
from apikey_tui.prompts import confirmed

# typing costs 3 ms to import, a fifth of starting Python: `--help` does without it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from datetime import timedelta
    from typing import Any, NoReturn, TextIO

    from _typeshed import SupportsWrite

    from apikey_tui.names import Expiry
    from apikey_tui.store import CreatedKey, Deliver, KeyInfo, KeyStore

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a tool that the signal ended would report
EVENTS_LIMIT_MAX = 10_000
ONCE_WARNING = (
    "This key is shown once. Store it like a password; it cannot be recovered. "
    "If it is lost or stolen, recreate it."
)
EMPTY_HINT = "No keys. Create one with: apikey-tui keys create NAME --scope SCOPE"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit 2)."""

    named_words: frozenset[str] | None = None  # see LazyCommands: None builds every subcommand

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # From the start, not only for --help: add_argument already asks for a formatter.
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", LazyCommands)
        # Anything like '-5d' is a value, as '-5' already is: `--expires -5d` is then refused
        # for what it is (with what a duration looks like), not as "expected one argument".
        self._negative_number_matcher = re.compile(r"-\d")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see --help)\n")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows an OSError here, so --help into /dev/full exited 0 unwritten: it
        # is one line and exit 1, as for any command's output.
        if message:
            try:
                if file is None:  # argparse passes sys.stdout, None when stdout is closed
                    raise OSError(errno.EBADF, "stdout is closed")
                file.write(message)
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise stdout_failed(exc, "could not write to stdout") from None

    def add_subparsers(self, **kwargs: Any) -> Any:
        commands = super().add_subparsers(**kwargs)
        assert isinstance(commands, LazyCommands)  # registered in __init__
        commands.named = self.named_words
        return commands


def _owner(text: str) -> str:
    # Checked while parsing: `--owner "$UNSET"` must not silently mean "me".
    try:
        return check_owner(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> timedelta:
    # A malformed duration or expiry is a usage error (2), like any malformed option value.
    try:
        return parse_duration(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _expiry(text: str) -> Expiry:
    try:
        expiry = parse_expiry(text)
        # A date past the bound is malformed as a duration past it is (the store refuses both
        # too); judged here, on the clock the CLI's store reads, to be a usage error like it.
        return check_expiry(expiry, system_clock()) if isinstance(expiry, datetime) else expiry
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_lifetime(text: str) -> timedelta | None:
    return None if text.strip().lower() == "none" else _duration(text)


def _database() -> _Parser:
    """The one option every command that opens the database takes (servers take only it)."""
    # SUPPRESS lets the same options stand before or after the subcommand without the
    # subparser's defaults overwriting what was given before it.
    database = _Parser(add_help=False)
    database.add_argument(
        "--database-url",
        default=argparse.SUPPRESS,
        help="SQLAlchemy URL (default: $APIKEY_TUI_DATABASE_URL, else a SQLite file in "
        "$XDG_DATA_HOME/apikey-tui)",
    )
    return database


def _common() -> _Parser:
    """--database-url, and the owner and --json of the commands that read or write keys."""
    common = _Parser(add_help=False, parents=[_database()])
    common.add_argument(
        "--owner",
        type=_owner,
        default=argparse.SUPPRESS,
        help="the user the keys stand in for (default: your login name)",
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out")
    return common


def build_parser(words: Collection[str] | None = None) -> argparse.ArgumentParser:
    """Build the argument parser: for every subcommand, or for those `words` name (a command
    line's words: the others stay unbuilt, which keeps `--help` and usage errors fast)."""
    common = _common()
    parser = _Parser(
        prog="apikey-tui",
        parents=[common],
        description="Manage API keys. With no subcommand, open the terminal app.",
    )
    parser.named_words = None if words is None else frozenset(words)
    parser.add_argument(
        "--version",
        action="version",
        version=f"apikey-tui {__version__} (database schema {SCHEMA_VERSION})",
    )
    parser.add_argument(
        "--all", action="store_true", default=argparse.SUPPRESS, help="all owners' keys"
    )
    commands = parser.add_subparsers(dest="command")  # its metavar: command_help.finish

    keys = commands.add_parser("keys", help="keys")  # the help names every action: finish
    key_commands = keys.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = key_commands.add_parser("create", parents=[common], help="create a key; print it once")
    create.add_argument("name")
    _scope_option(create)
    _expires_option(create)
    create.set_defaults(run=_keys_create)
    listing = key_commands.add_parser("list", parents=[common], help="list keys (no secrets)")
    listing.add_argument(
        "--all", action="store_true", default=argparse.SUPPRESS, help="every owner's keys"
    )
    listing.add_argument(
        "--filter",
        default="",
        help="only keys whose owner, name, id or a scope's name contains this, or in the state"
        " it names from 3 letters on: active, unused, soon/expiring, grace, disabled,"
        " expired, leaked (as the app's /)",
    )
    listing.add_argument(
        "--expiring",
        type=_duration,
        metavar="DURATION",
        help="only keys that expire within this span (not those already expired), e.g. 14d",
    )
    listing.add_argument(
        "--unused",
        type=_duration,
        metavar="DURATION",
        help="only keys not used for this long (never used: since created or rotated), e.g. 90d",
    )
    listing.add_argument(
        "--violating-policy",
        action="store_true",
        help="only keys whose lifetime breaks the max-lifetime policy",
    )
    listing.add_argument(
        "--limit",
        type=_limit,
        metavar="N",
        help=f"at most N keys (1-{EVENTS_LIMIT_MAX}); a note on stderr says when more match",
    )
    listing.set_defaults(run=_keys_list)
    for action, run, text in (
        ("show", _keys_show, "show one key"),
        ("delete", _keys_delete, "delete a key; services refuse it at once"),
        ("recreate", _keys_recreate, "replace a stolen key: same name and scopes, new secret"),
    ):
        sub = key_commands.add_parser(action, parents=[common], help=text)
        sub.add_argument("name")
        if action != "show":
            _yes_option(sub)
        sub.set_defaults(run=run)
    rescope = key_commands.add_parser("set-scopes", parents=[common], help="replace a key's scopes")
    rescope.add_argument("name")
    _scope_option(rescope)
    rescope.set_defaults(run=_keys_set_scopes)
    rotate = key_commands.add_parser(
        "rotate",
        parents=[common],
        help="new id and secret, printed once; the old secret works until the grace ends",
    )
    rotate.add_argument("name")
    how = rotate.add_mutually_exclusive_group(required=True)
    how.add_argument(
        "--grace",
        type=_duration,
        metavar="DURATION",
        help="how long the old secret keeps working (0: it stops now, like recreate)",
    )
    how.add_argument("--end-grace", action="store_true", help="stop the old secret now")
    _expires_option(rotate, rotating=True)
    _yes_option(rotate)
    rotate.set_defaults(run=_keys_rotate)
    expiry = key_commands.add_parser(
        "set-expiry", parents=[common], help="set when a key stops working"
    )
    expiry.add_argument("name")
    expiry.add_argument("when", type=_expiry, metavar="WHEN", help="90d, an ISO date, or never")
    expiry.set_defaults(run=_keys_set_expiry)
    disable = key_commands.add_parser(
        "disable", parents=[common], help="switch a key off (reversibly); services refuse it"
    )
    disable.add_argument("name")
    disable.add_argument("--reason", default="", help="why, for the audit trail (≤ 200 chars)")
    disable.set_defaults(run=_keys_disable)
    enable = key_commands.add_parser("enable", parents=[common], help="switch a key on again")
    enable.add_argument("name")
    enable.set_defaults(run=_keys_enable)

    policy = commands.add_parser("policy", help="the key lifetime policy of the database")
    policy_commands = policy.add_subparsers(dest="action", metavar="ACTION", required=True)
    policy_commands.add_parser("show", parents=[common], help="show the policy").set_defaults(
        run=_policy_show
    )
    policy_set = policy_commands.add_parser(
        "set", parents=[common], help="set max-lifetime (new keys); lists keys that break it"
    )
    policy_set.add_argument("setting", choices=["max-lifetime"])
    policy_set.add_argument(
        "value", type=_max_lifetime, metavar="DURATION|none", help="e.g. 365d, or none"
    )
    policy_set.set_defaults(run=_policy_set)

    scopes = commands.add_parser("scopes", help="the scope catalog: the APIs keys may reach")
    scope_commands = scopes.add_subparsers(dest="action", metavar="ACTION", required=True)
    scope_commands.add_parser("list", parents=[common], help="list scopes").set_defaults(
        run=_scopes_list
    )
    add = scope_commands.add_parser("add", parents=[common], help="add a scope")
    add.add_argument("name")
    add.add_argument("--description", default="")
    add.set_defaults(run=_scopes_add)
    describe = scope_commands.add_parser("describe", parents=[common], help="describe a scope")
    describe.add_argument("name")
    describe.add_argument("description")
    describe.set_defaults(run=_scopes_describe)
    remove = scope_commands.add_parser("remove", parents=[common], help="remove an unused scope")
    remove.add_argument("name")
    remove.set_defaults(run=_scopes_remove)

    events = commands.add_parser("events", parents=[common], help="the audit trail, newest first")
    events.add_argument(
        "--limit", type=_limit, default=50, help=f"at most this many (1-{EVENTS_LIMIT_MAX})"
    )
    events.set_defaults(run=_events)

    database = commands.add_parser("db", help="the database: schema upgrades, verifier privileges")
    db_commands = database.add_subparsers(dest="action", metavar="ACTION", required=True)
    db_commands.add_parser(
        "upgrade", parents=[common], help="upgrade the schema in place (upgrade services with it)"
    ).set_defaults(run_db=_db_upgrade)
    grant = db_commands.add_parser(
        "grant-verifier",
        parents=[common],
        help="print the PostgreSQL grants a service's verifier role needs (and no more)",
    )
    grant.add_argument("role", help="the PostgreSQL role the service connects as")
    grant.add_argument("--apply", action="store_true", help="run the grants now, as the owner")
    grant.set_defaults(run_db=_db_grant_verifier)

    serve = commands.add_parser(
        "serve-auth",
        parents=[_database()],  # it serves every owner's keys and prints no JSON
        help="answer reverse proxies' forward-auth requests (nginx, Caddy, Traefik, Envoy)",
    )
    add_server_options(serve, port=9180)
    serve.add_argument(
        "--workers",
        type=count,
        default=1,
        metavar="N",
        help="worker processes, each with its own verifier (default 1)",
    )
    serve.add_argument(
        "--rules",
        metavar="FILE",
        help="route rules (TOML, docs/integrations/route-rules.md); a path no rule covers is "
        "refused, and without rules only auth URLs naming scope= pass",
    )
    serve.add_argument("--realm", default="api", help='WWW-Authenticate realm (default "api")')
    # The verifier's options: absent ones keep the verifier's defaults (docs/reference/verifier.md).
    verifier = serve.add_argument_group("the verifier (defaults as in the verifier's Options)")
    verifier.add_argument(
        "--revocation-bound",
        type=_seconds(allow_zero=True),
        metavar="SECONDS",
        help="PostgreSQL: how long a checked key is trusted while push is down (0: ask each time)",
    )
    verifier.add_argument(
        "--check-timeout",
        type=_seconds(allow_zero=False),
        metavar="SECONDS",
        help="the longest a check waits for the database or argon2 before 503",
    )
    verifier.add_argument(
        "--check-workers", type=count, metavar="N", help="threads for database reads and argon2"
    )
    verifier.add_argument(
        "--max-pending-checks",
        type=count,
        metavar="N",
        help="checks queued or running before 503 at once (at least --check-workers)",
    )
    from apikey_tui.leaks.commands import add_commands  # the standard library only, like here

    add_commands(commands, common)
    from apikey_tui.usage_commands import add_commands as add_usage_commands  # likewise

    add_usage_commands(key_commands, db_commands, common)
    completion = commands.add_parser(
        "completion", help="print the shell completion script for bash, zsh or fish"
    )
    completion.add_argument("shell", choices=["bash", "zsh", "fish"])
    finish(parser)  # last: every command is registered by now
    return parser


def _seconds(*, allow_zero: bool) -> Callable[[str], float]:
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


def _scope_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scope",
        action="append",
        default=[],
        required=True,  # none at all is a usage error (2); an unknown one is refused (1)
        metavar="SCOPE",
        help="an API the key may reach; repeat it or separate with commas (at least one)",
    )


def _yes_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="do not ask first (in a terminal it asks, defaulting to no; a script is never asked)",
    )


def _expires_option(parser: argparse.ArgumentParser, *, rotating: bool = False) -> None:
    default = (
        "the lifetime the key had, from now" if rotating else "no expiry"
    ) + "; under a max-lifetime policy at most its maximum"
    parser.add_argument(
        "--expires",
        type=_expiry,
        metavar="WHEN",
        help=f"a duration from now (90d), an ISO date or date and time, or never (default: "
        f"{default})",
    )


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= EVENTS_LIMIT_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to {EVENTS_LIMIT_MAX}, got {text[:30]!a}"
        )
    return value


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that were not UTF-8, kept as lone surrogates
        return False
    return True


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
            code = _main(arguments)
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
        _internal_error(exc)
        return EXIT_REFUSED
    return code


def _internal_error(exc: BaseException) -> None:
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


def _main(arguments: list[str]) -> int:
    args = build_parser(arguments).parse_args(arguments)
    if args.command == "completion":  # no database, no store: the parser alone
        from apikey_tui.completion import script

        text = script(build_parser(), args.shell)
        return emit(argparse.Namespace(), None, lambda out: print(text, end="", file=out))
    if hasattr(args, "run_leaks"):  # scan and serve-leaks; `scan --offline` imports no SQLAlchemy
        return _run_leaks(args)
    from apikey_tui.config import (  # SQLAlchemy: see above
        DATABASE_URL_ENV,
        current_user,
        resolve_database_url,
    )

    try:
        url = resolve_database_url(getattr(args, "database_url", None))
        owner = getattr(args, "owner", None) or current_user()
        if args.command is None:
            # The app creates a missing SQLite file only at the default location (a first run);
            # a path given by flag or environment that does not exist is a mistake, not a wish.
            default = getattr(args, "database_url", None) is None and not os.environ.get(
                DATABASE_URL_ENV
            )
            return _open_app(url, owner, all_owners=getattr(args, "all", False), create=default)
        if args.command == "serve-auth":
            return _serve_auth(url, args)
        if args.command == "db":  # works on a database of any version: opens no store
            run_db: Callable[[str, argparse.Namespace], int] = args.run_db
            return run_db(url, args)
        run: Callable[[KeyStore, argparse.Namespace, str], int] = args.run
        from apikey_tui.usage_commands import run_rightsize, run_usage

        # Commands that only read (or change keys that must exist) never create a database.
        reads = (_keys_list, _keys_show, _scopes_list, _events, _policy_show, run_usage)
        store = _open_store(url, create=run not in (*reads, run_rightsize))
        try:
            return run(store, args, owner)
        finally:
            store.close()
    except DatabaseUrlError as exc:  # a URL we cannot use is a usage error, like a bad option
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE


def _run_leaks(args: argparse.Namespace) -> int:
    def url() -> str:  # read only by the commands that open the database
        from apikey_tui.config import resolve_database_url

        return resolve_database_url(getattr(args, "database_url", None))

    run: Callable[..., int] = args.run_leaks
    try:
        return run(url, args, _open_store)
    except OutputError:
        raise  # stdout failed: exit 1 like every command (main), not a usage error
    except ApiKeyError as exc:  # a URL we cannot use, a database that cannot be asked: usage (2)
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # `scan | head`: quiet (main)
    except Exception as exc:
        if args.command != "scan":
            raise
        _internal_error(exc)  # for scan, exit 1 means "a live key was found": a bug says 2
        return EXIT_USAGE


def _open_store(url: str, *, create: bool) -> KeyStore:
    """Open the store; a read-only command (create=False) never creates a SQLite database.

    PostgreSQL opens as before: there a missing database is an error of the server, and the
    schema check without create reports a role lacking USAGE on the schema as "no tables".
    """
    from apikey_tui.config import parse_database_url
    from apikey_tui.db import ensure_schema, make_engine
    from apikey_tui.store import KeyStore

    parsed = parse_database_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return KeyStore.open(url)
    if create:
        return _create_or_open(url, path)
    if not os.path.exists(path):  # a mistyped path must not become a new, empty database
        raise StoreUnavailableError(
            f"no database at {path}; check the path, or create it with "
            "'apikey-tui keys create NAME --scope SCOPE' or 'apikey-tui db upgrade'"
        )
    engine = make_engine(url, create=False)
    try:
        ensure_schema(engine, create=False)
    except BaseException:
        engine.dispose()
        raise
    return KeyStore(engine)


def _create_or_open(url: str, path: str) -> KeyStore:
    """Open a SQLite database for a command that writes, creating it if it is missing.

    A new database is said on stderr (a mistyped path must not pass unnoticed), and a missing
    folder is created only for the default location: elsewhere it is most likely a typo.
    """
    from apikey_tui.config import default_database_path
    from apikey_tui.store import KeyStore

    where = os.path.abspath(path)
    if os.path.exists(where):
        return KeyStore.open(url)
    folder = os.path.dirname(where)
    if not os.path.isdir(folder) and where != str(default_database_path()):
        raise StoreUnavailableError(
            f"no folder {folder} for a new database at {where}; check the path, or create "
            "the folder first"
        )
    store = KeyStore.open(url)
    try:
        print(f"apikey-tui: created a new database at {where}", file=sys.stderr, flush=True)
    except OSError:  # a note nobody can read must not fail the command it precedes
        pass
    return store


def _open_app(url: str, owner: str, *, all_owners: bool, create: bool) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):  # else it waits forever for keys
        print(
            "apikey-tui: the terminal app needs a terminal on stdin and stdout; "
            "scripts use the subcommands (see --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    store = _open_store(url, create=create)  # refused before the screen changes
    try:
        # Imported here so that scripts and services never pay for the terminal framework.
        from apikey_tui.tui.app import run_app

        return run_app(store, owner=None if all_owners else owner)
    finally:
        store.close()


class _Delivery:
    """Writes a new key to stdout from inside the transaction that makes it (store.Deliver):
    a secret that could not be written is never stored, and says so in one line."""

    def __init__(self, args: argparse.Namespace, undone: str) -> None:
        self.args, self.undone, self.done = args, undone, False

    def __call__(self, created: CreatedKey) -> None:
        data = {"key": created.plaintext, **created.info.to_json()}
        try:
            write_result(self.args, data, lambda out: print(created.plaintext, file=out))
        except OSError as exc:  # a closed pipe too: nobody received the key
            undone = f": {self.undone}"
            raise stdout_failed(exc, "could not write the key to stdout", undone) from None
        self.done = True

    def run(self, make: Callable[[Deliver], CreatedKey]) -> CreatedKey:
        """Make the key with this delivery; a failure after it says the key shown is void."""
        try:
            return make(self)
        except ApiKeyError as exc:
            if not self.done or isinstance(exc, OutputError):
                raise
            # Written, then the commit failed: the secret on stdout belongs to no key.
            raise ApiKeyError(
                f"{exc}; the key written to stdout was not stored: discard it"
            ) from None


def _tell_created(created: CreatedKey, verb: str, note: str | None = None) -> int:
    """Say on stderr what was made, once the key was written and stored."""
    info = created.info
    # Everything but the key goes to stderr, so `KEY=$(apikey-tui keys create ...)` just works.
    lines = [
        f"{verb} key {info.name!r} for {printable(info.owner)} ({info.public_id}), "
        f"scopes: {', '.join(info.scopes)}.",
        ONCE_WARNING,
        _expiry_line(info),
        *([note] if note else []),
    ]
    try:
        print(*lines, sep="\n", file=sys.stderr, flush=True)
    except OSError:  # the key is stored and on stdout: unreadable notes must not fail that
        pass
    return EXIT_OK


def _expiry_line(info: KeyInfo) -> str:
    if info.expires_at is None:
        return "It never expires."
    return f"It expires at {_when(info.expires_at)}."


def _when(moment: datetime | None) -> str:
    return format_moment(moment) if moment is not None else "-"


def _key_json(info: KeyInfo, now: datetime) -> dict[str, Any]:
    """A key as JSON: its fields, and its state's kind (store.states: the app's vocabulary)."""
    from apikey_tui.store.states import marker

    return {**info.to_json(), "state": marker(info, now)[1]}


def _whose(info: KeyInfo) -> str:
    return f"key {info.name!r} of {printable(info.owner)}"


def _go_on(args: argparse.Namespace, question: str) -> bool:
    """Ask before a destructive command in a terminal (prompts.confirmed); no: say nothing
    was done. A script (no terminal) or --yes goes on, as before."""
    if confirmed(question, assume_yes=getattr(args, "yes", False)):
        return True
    print("Cancelled: nothing was done.", file=sys.stderr)
    return False


def _keys_create(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    created = _Delivery(args, "it was not created").run(
        lambda deliver: store.create_key(
            owner, args.name, args.scope, expires=args.expires, deliver=deliver
        )
    )
    return _tell_created(created, "Created")


def _keys_recreate(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    old = store.get_key(owner, args.name)
    question = (
        f"Recreate {_whose(old)} ({old.public_id})? Its secret stops working now; "
        "the new one is printed once."
    )
    if not _go_on(args, question):
        return EXIT_REFUSED
    created = _Delivery(args, f"key {args.name!r} is unchanged").run(
        lambda deliver: store.recreate_key(
            owner, args.name, expected_public_id=old.public_id, deliver=deliver
        )
    )
    return _tell_created(created, "Recreated", "The old key stopped working.")


def _keys_rotate(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    if args.end_grace and args.expires is not None:
        return _usage("keys rotate: --expires goes with --grace, not --end-grace")
    old = store.get_key(owner, args.name)
    if args.end_grace:
        question = f"End the grace of {_whose(old)}? Its old secret stops working now."
    elif args.grace:
        question = (
            f"Rotate {_whose(old)} ({old.public_id})? Its secret keeps working for "
            f"{format_duration(args.grace)}; the new one is printed once."
        )
    else:
        question = (
            f"Rotate {_whose(old)} ({old.public_id}) with no grace? Its secret stops working "
            "now; the new one is printed once."
        )
    if not _go_on(args, question):
        return EXIT_REFUSED
    if args.end_grace:
        info = store.end_grace(owner, args.name, expected_public_id=old.public_id)
        print(f"The old secret of {_whose(info)} stopped working.", file=sys.stderr)
        return emit(args, _key_json(info, store.clock()), lambda out: None)
    created = _Delivery(args, f"key {args.name!r} is unchanged").run(
        lambda deliver: store.rotate_key(
            owner,
            args.name,
            grace=args.grace,
            expires=args.expires,
            expected_public_id=old.public_id,
            deliver=deliver,
        )
    )
    note = "The old secret stopped working."
    if created.info.grace_until is not None:
        note = (
            f"The old secret ({created.info.old_public_id}) keeps working until "
            f"{_when(created.info.grace_until)}; end that sooner with --end-grace."
        )
    return _tell_created(created, "Rotated", note)


def _keys_set_expiry(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    info = store.set_expiry(owner, args.name, args.when)
    when = f"expires at {_when(info.expires_at)}" if info.expires_at else "never expires"
    print(f"Key {info.name!r} of {printable(info.owner)} now {when}.", file=sys.stderr)
    return emit(args, _key_json(info, store.clock()), lambda out: None)


def _keys_disable(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    info = store.disable_key(owner, args.name, args.reason)
    print(
        f"Disabled key {info.name!r} of {printable(info.owner)}: services refuse it (401) "
        "until it is enabled.",
        file=sys.stderr,
    )
    return emit(args, _key_json(info, store.clock()), lambda out: None)


def _keys_enable(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    info = store.enable_key(owner, args.name)
    note = " It has expired, so services still refuse it." if info.expired(store.clock()) else ""
    print(f"Enabled key {info.name!r} of {printable(info.owner)}.{note}", file=sys.stderr)
    return emit(args, _key_json(info, store.clock()), lambda out: None)


def _keys_set_scopes(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    info = store.set_key_scopes(owner, args.name, args.scope)
    # Like every other change: a note on stderr, data (JSON) on stdout only when asked for.
    print(
        f"Key {info.name!r} of {printable(info.owner)} now has the scopes "
        f"{', '.join(info.scopes)}.",
        file=sys.stderr,
    )
    return emit(args, _key_json(info, store.clock()), lambda out: None)


def _keys_list(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    everyone = getattr(args, "all", False)
    keys = store.list_keys(
        None if everyone else owner,
        args.filter,
        limit=None if args.limit is None else args.limit + 1,  # one more: are there more?
        expiring_within=args.expiring,
        unused_for=args.unused,
        violating_policy=args.violating_policy,
    )
    more = args.limit is not None and len(keys) > args.limit
    keys = keys[: args.limit] if more else keys
    if args.violating_policy and store.lifetime_policy() is None:
        print("No max-lifetime policy is set, so no key breaks it.", file=sys.stderr)
    # For cron: a filtered listing that finds nothing prints nothing (cron mails only output).
    quiet = args.expiring is not None or args.unused is not None or args.violating_policy
    now = store.clock()

    def human(out: TextIO) -> None:
        if not keys and args.filter and not quiet:
            # Keys exist maybe, none match: say so on stderr, not "create one" on stdout.
            print(f"No keys match {printable(args.filter)!r}.", file=sys.stderr)
        elif keys or not quiet:
            _print_keys(keys, out, with_owner=everyone, now=now)

    done = emit(args, [_key_json(k, now) for k in keys], human)
    if more:  # after the table (stdout is flushed): in a terminal it reads as a footnote
        print(f"Showing the first {counted(args.limit)}; more match.", file=sys.stderr)
    return done


def _keys_show(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    info = store.get_key(owner, args.name)
    now = store.clock()
    return emit(args, _key_json(info, now), lambda out: _print_key(info, out, now=now))


def _print_key(info: KeyInfo, out: TextIO, *, now: datetime) -> None:
    from apikey_tui.store.states import marker

    state = marker(info, now)[0]
    if info.disabled:
        state += f" since {_when(info.disabled_at)}"
        state += f": {info.disabled_reason}" if info.disabled_reason else ""
    rows = [
        ["owner", info.owner],
        ["name", info.name],
        ["public id", info.public_id],
        ["scopes", ", ".join(info.scopes)],
        ["state", state],
        ["expires", _when(info.expires_at) if info.expires_at else "never"],
        ["created", _when(info.created_at)],
        ["last used", _when(info.last_used_at) if info.last_used_at else "never"],
    ]
    if info.grace_until is not None:
        rows.append(["old secret", f"{info.old_public_id} works until {_when(info.grace_until)}"])
    rows = [[f"{label}:", printable(value)] for label, value in rows]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}", file=out)


def _policy_show(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    return emit(args, _policy_json(store.lifetime_policy()), _print_policy(store))


def _policy_json(maximum: timedelta | None) -> dict[str, Any]:
    return {
        "max_lifetime": format_duration(maximum) if maximum else None,
        "max_lifetime_seconds": int(maximum.total_seconds()) if maximum else None,
    }


def _print_policy(store: KeyStore) -> Callable[[TextIO], None]:
    maximum = store.lifetime_policy()
    shown = format_duration(maximum) if maximum else "none"
    return lambda out: print(f"max-lifetime {shown}", file=out)


def _policy_set(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    violating = store.set_lifetime_policy(args.value)
    if args.value is None:
        print("Removed the max-lifetime policy: new keys may live for ever.", file=sys.stderr)
    else:
        print(
            f"New and rotated keys now live at most {format_duration(args.value)}.",
            file=sys.stderr,
        )
    if violating:
        some = (
            "1 existing key breaks it and keeps"
            if len(violating) == 1
            else f"{len(violating)} existing keys break it and keep"
        )
        print(
            f"{some} working until rotated, re-expired or deleted: "
            "`apikey-tui keys list --all --violating-policy`.",
            file=sys.stderr,
        )
    now = store.clock()

    def human(out: TextIO) -> None:
        if violating:
            _print_keys(violating, out, with_owner=True, now=now)

    data = {**_policy_json(args.value), "violating": [_key_json(k, now) for k in violating]}
    return emit(args, data, human)


def _usage(message: str) -> int:
    print(f"apikey-tui {message} (see --help)", file=sys.stderr)
    return EXIT_USAGE


def _keys_delete(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    old = store.get_key(owner, args.name)
    question = f"Delete {_whose(old)} ({old.public_id})? Services refuse it at once; no undo."
    if not _go_on(args, question):
        return EXIT_REFUSED
    # Only the key the question named: one recreated meanwhile is refused (KeyChangedError).
    info = store.delete_key(owner, args.name, expected_public_id=old.public_id)
    print(
        f"Deleted key {info.name!r} of {printable(info.owner)} ({info.public_id}).", file=sys.stderr
    )
    return emit(args, info.to_json(), lambda out: None)


def _scopes_list(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    scopes = store.list_scopes()
    return emit(
        args,
        [s.to_json() for s in scopes],
        lambda out: _print_rows(
            ["SCOPE", "DESCRIPTION"], [[s.name, s.description] for s in scopes], out
        ),
    )


def _scopes_add(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    scope = store.add_scope(args.name, args.description)
    print(f"Added scope {scope.name!r}.", file=sys.stderr)
    return emit(args, scope.to_json(), lambda out: None)


def _scopes_describe(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    scope = store.describe_scope(args.name, args.description)
    print(f"Described scope {scope.name!r}.", file=sys.stderr)
    return emit(args, scope.to_json(), lambda out: None)


def _scopes_remove(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    store.remove_scope(args.name)
    print(f"Removed scope {args.name!r}.", file=sys.stderr)
    return emit(args, {"removed": args.name}, lambda out: None)


def _events(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    events = store.events(args.limit)
    rows = [
        [
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.action,
            f"{e.owner}/{e.key_name}" if e.key_name else (e.scope or ""),
            e.public_id or "",
            e.actor + (f"@{e.actor_address}" if e.actor_address else ""),
            e.detail,
        ]
        for e in events
    ]
    header = ["WHEN (UTC)", "ACTION", "KEY/SCOPE", "PUBLIC ID", "BY", "DETAIL"]
    return emit(args, [e.to_json() for e in events], lambda out: _print_rows(header, rows, out))


SCHEMA_WITH_EXPIRY = 3  # the schema version that brought disable and expiry (release 0.3.0)


def _db_upgrade(url: str, args: argparse.Namespace) -> int:
    from apikey_tui.db import make_engine, upgrade_schema

    engine = make_engine(url)
    try:
        before, after, searchable = upgrade_schema(engine)
    finally:
        engine.dispose()
    if before is None:
        message = f"Created the apikey-tui tables at schema version {after}."
    elif before == after:
        message = f"The database is already at schema version {after}."
    else:
        message = f"Upgraded the database from schema version {before} to {after}."
    print(message, file=sys.stderr)
    if before is not None and before < after:
        # A verifier checks the schema version when it starts, never again: one running through
        # the upgrade keeps its old code, and before version 3 that code reads no disabled_at
        # or expires_at, so it goes on accepting keys an admin disables or lets expire.
        stale = (
            ", and that release keeps accepting disabled and expired keys (it knows neither)"
            if before < SCHEMA_WITH_EXPIRY
            else ""
        )
        print(
            "Restart every service now, on this release: one started before the upgrade runs "
            f"its old release until it restarts{stale}. An older release started after the "
            "upgrade answers 503.",
            file=sys.stderr,
        )
    if not searchable:
        print(
            "The key filter scans every key: this database cannot hold its trigram index "
            "(SQLite without FTS5 trigrams, or a PostgreSQL role that may not create the "
            "pg_trgm extension; see docs/guide/app.md).",
            file=sys.stderr,
        )
    result = {"from_version": before, "to_version": after, "filter_index": searchable}
    return emit(args, result, lambda out: None)


def _serve_auth(url: str, args: argparse.Namespace) -> int:
    """Run the forward-auth app under uvicorn until interrupted (needs the [serve] extra)."""
    try:
        from apikey_tui.integrations import auth_server
    except ImportError:
        print(
            "apikey-tui: serve-auth needs uvicorn: pip install 'apikey-tui[serve]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from apikey_tui.config import parse_database_url
    from apikey_tui.integrations import forward_auth

    parse_database_url(url)  # a URL we cannot use is a usage error now, not a 503 per request
    options = {
        name: getattr(args, name)
        for name in ("revocation_bound", "check_timeout", "check_workers", "max_pending_checks")
        if getattr(args, name) is not None
    }
    # One verifier per process: its cache and key index are per process. With --workers, each
    # worker (a new interpreter) builds its own app from `build`.
    build = functools.partial(forward_auth.create_app, url, args.rules, realm=args.realm, **options)
    try:
        auth_server.protocol(args.http)  # --http httptools without httptools
        app = build()  # a bad rules file or verifier option: refuse to start, not guess
    except ValueError as exc:
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if args.workers == 1:
        auth_server.serve(app, **server_options(args))
    else:
        app.verifier.close()  # it only checked the settings
        auth_server.serve(build, workers=args.workers, **server_options(args))
    return EXIT_OK


SQLITE_PRIVILEGES = (
    "SQLite has no roles: file access is all-or-nothing, and whoever may write the database "
    "file (as a verifier must) has admin rights over every owner's keys; use PostgreSQL to "
    "give services less"
)


def _db_grant_verifier(url: str, args: argparse.Namespace) -> int:
    from apikey_tui.db import database_errors, ensure_schema, make_engine
    from apikey_tui.db.schema import (
        check_role_name,
        excess_privileges,
        role_exists,
        verifier_grants,
    )

    engine = make_engine(url, create=False)
    try:
        if engine.dialect.name != "postgresql":
            raise InvalidInputError(SQLITE_PRIVILEGES)
        check_role_name(args.role)
        ensure_schema(engine, create=False)  # the grants name this release's tables
        with database_errors(engine), engine.begin() as conn:
            statements = verifier_grants(conn, args.role)
            exists = role_exists(conn, args.role)
            if args.apply and not exists:
                raise InvalidInputError(
                    f"no PostgreSQL role named {args.role!r}: create it first "
                    "(CREATE ROLE ... LOGIN), then grant"
                )
            for statement in statements if args.apply else ():
                conn.exec_driver_sql(statement)
            excess = excess_privileges(conn, args.role) if exists else []
    finally:
        engine.dispose()
    if args.apply:
        print(f"Granted to {args.role} what a verifier needs:", file=sys.stderr)
    else:
        print("Run these as the owner of the apikey-tui tables (or add --apply):", file=sys.stderr)
    if excess:
        print(
            f"warning: {args.role} can also make writes a verifier never needs, which would let "
            f"a compromised service plant keys or hide its tracks: {'; '.join(excess)}. "
            "Revoke them.",
            file=sys.stderr,
        )
    data = {"role": args.role, "statements": statements, "applied": args.apply, "excess": excess}
    return emit(args, data, lambda out: print(*(f"{s};" for s in statements), sep="\n", file=out))


def _print_keys(keys: list[KeyInfo], out: TextIO, *, with_owner: bool, now: datetime) -> None:
    """Keys as a table: piped, plain columns of whole cells; in a terminal, sized to its width,
    cut as the app cuts, the state coloured. No keys: a hint on stderr, nothing on stdout."""
    from apikey_tui import terminal_table as table
    from apikey_tui.names import FAIR_WIDTHS, look_alikes, shorten
    from apikey_tui.store.states import marker

    if not keys:
        print(EMPTY_HINT, file=sys.stderr)  # stdout holds only data: `| wc -l` counts 0
        return
    markers = [marker(k, now) for k in keys]

    def minute(moment: datetime | None, none: str) -> str:
        return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else none

    def cut_apart(texts: list[str]) -> Callable[[str, int], str]:
        # both ends, and where a name differs from its look-alikes (the app's rule)
        apart = look_alikes(texts)
        return lambda text, width: shorten(text, width, apart.get(text))

    columns = [
        # A column is dropped before a name goes below 16 or the scopes below their fair width.
        table.Column("NAME", 12, cut_apart([printable(k.name) for k in keys]), fair=16),
        table.Column("PUBLIC ID", 9),
        # a fair share before names give up room: 'project serving' whole, not 'proje…'
        table.Column("SCOPES", 6, fair=FAIR_WIDTHS["scopes"]),
        table.Column("STATE", 10),  # never cut (≤ 10 cells), as the app never cuts it
        table.Column("EXPIRES (UTC)", 16),
        table.Column("CREATED (UTC)", 16),
        table.Column("LAST USED (UTC)", 16),
    ]
    rows = [
        [
            printable(k.name),
            k.public_id,
            printable(",".join(k.scopes)),
            text,
            minute(k.expires_at, "never"),
            minute(k.created_at, "-"),
            minute(k.last_used_at, "-"),
        ]
        for k, (text, _) in zip(keys, markers, strict=True)
    ]
    if with_owner:
        owners = cut_apart([printable(k.owner) for k in keys])
        columns.insert(0, table.Column("OWNER", 8, owners))
        for row, key in zip(rows, keys, strict=True):
            row.insert(0, printable(key.owner))
    room = table.terminal_width(out)
    if room is None:  # piped: whole cells, as scripts have always read them
        _print_rows([c.header for c in columns], rows, out)
        return
    at = {c.header: i for i, c in enumerate(columns)}
    # Cut first what tells keys apart least; then drop whole columns, least needed first. The
    # state is what a glance is for: it is never cut ('⚠ 20h le…' said less than a column less).
    shrink = [at[h] for h in ("SCOPES", "PUBLIC ID", "OWNER", "NAME") if h in at]
    drop = [at[h] for h in ("CREATED (UTC)", "LAST USED (UTC)", "SCOPES", "PUBLIC ID")]
    colours = None
    if table.colour_wanted(out):
        colours = [table.STATE_COLOURS.get(kind) for _, kind in markers]
    table.render(
        columns,
        rows,
        out,
        room=room,
        shrink=shrink,
        drop=drop,
        colours=colours,
        colour_column=at["STATE"],
    )


def _print_rows(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    # Database content is printed with control and format characters escaped (JSON escapes its
    # own): an owner, actor or detail must never move the cursor or recolour the terminal.
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
