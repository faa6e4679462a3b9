"""Where settings come from: command-line flag, then environment, then a default SQLite file."""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from pathlib import Path
from string import ascii_letters, digits

from apikey_tui.errors import DatabaseUrlError, InvalidInputError
from apikey_tui.names import check_owner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# SQLAlchemy is imported by the functions that parse a URL, not here: the store's values
# (store/types.py) need current_user, and the terminal app paints before it imports SQLAlchemy.

DATABASE_URL_ENV = "APIKEY_TUI_DATABASE_URL"
# Where limits count (docs/reference/limits.md): a Redis-protocol server every host shares, else
# the key database itself. The failure mode and the processes are fail-open's declaration.
LIMITS_URL_ENV = "APIKEY_TUI_LIMITS_URL"
LIMITS_FAIL_ENV = "APIKEY_TUI_LIMITS_FAIL"
LIMITS_PROCESSES_ENV = "APIKEY_TUI_LIMITS_PROCESSES"
LIMITS_SCHEMES = ("redis", "rediss", "unix")
# Which peers are proxies whose forwarding header names the client (docs/reference/networks.md):
# addresses or networks, comma- or space-separated; and which header they set.
TRUSTED_PROXIES_ENV = "APIKEY_TUI_TRUSTED_PROXIES"
CLIENT_HEADER_ENV = "APIKEY_TUI_CLIENT_HEADER"
SUPPORTED_URLS = "sqlite:///PATH or postgresql://USER@HOST:PORT/DBNAME"
# The schemes this package accepts, and the driver each one means (psycopg 3 for PostgreSQL).
_DRIVERS = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


def xdg_home(variable: str, fallback: str, env: Mapping[str, str] | None = None) -> Path:
    """An XDG base directory: $variable, or ~/fallback when it is unset or not absolute (the XDG
    Base Directory spec calls a relative one invalid: it would move with the current folder,
    and a new database or log would be made wherever a command happened to run)."""
    env = os.environ if env is None else env
    given = env.get(variable, "")
    return Path(given) if os.path.isabs(given) else Path.home() / fallback


def default_database_path(env: Mapping[str, str] | None = None) -> Path:
    """Return the default SQLite file under $XDG_DATA_HOME (or ~/.local/share)."""
    return xdg_home("XDG_DATA_HOME", ".local/share", env) / "apikey-tui" / "keys.db"


def chosen_database_url(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The URL resolve_database_url picks, not yet checked: --database-url, else
    $APIKEY_TUI_DATABASE_URL (empty counts as unset), else the default file."""
    env = os.environ if env is None else env
    if flag is not None:
        return flag
    return env.get(DATABASE_URL_ENV) or f"sqlite:///{default_database_path(env)}"


def resolve_database_url(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """Pick the URL: --database-url, else $APIKEY_TUI_DATABASE_URL, else the default file.

    An empty environment variable counts as unset; an empty --database-url is refused, since it
    is almost always a script expanding a variable that is not set. Raises DatabaseUrlError
    for any URL parse_database_url refuses, and for an in-memory SQLite database.
    """
    url = chosen_database_url(flag, env)
    parsed = parse_database_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        # Fine for tests and services' fixtures, never for the admin tools: it dies with them.
        raise DatabaseUrlError(
            "an in-memory SQLite database (sqlite:// or sqlite:///:memory:) loses every key "
            "when apikey-tui exits; use sqlite:///PATH or postgresql://USER@HOST/DBNAME"
        )
    return url


def resolve_limits_url(given: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The limits store's URL: the argument, else $APIKEY_TUI_LIMITS_URL, else None (the key
    database counts). Only a Redis-protocol URL is taken (redis://, rediss://, unix://)."""
    env = os.environ if env is None else env
    url = given if given is not None else (env.get(LIMITS_URL_ENV) or None)
    if url is None:
        return None
    scheme = url.partition("://")[0].lower()
    if scheme not in LIMITS_SCHEMES or "://" not in url:
        raise InvalidInputError(
            f"limits store URL {mask_url(url)!a} is not usable: write redis://HOST:PORT/DB "
            "(Valkey, Redis), rediss:// or unix://PATH"
        )
    return url


def parse_database_url(url: str) -> URL:
    """Parse a URL this package can use, with PostgreSQL's driver made explicit (psycopg 3).

    Raises DatabaseUrlError, with one line that never echoes the URL (it may hold a password),
    for an empty or unparsable URL, text that is not UTF-8 or holds control characters, a
    scheme other than SQLite or PostgreSQL with psycopg, a port outside 1-65535, or a SQLite
    URL with a host (`sqlite://keys.db` would silently mean an in-memory database).
    """
    if not url:
        raise DatabaseUrlError(f"the database URL is empty; use {SUPPORTED_URLS}")
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, or bytes that were not UTF-8 (surrogateescape)
        raise DatabaseUrlError("the database URL is not valid UTF-8 text") from None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise DatabaseUrlError("the database URL holds a control character")
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ValueError:  # SQLAlchemy's int() of a port that is not a number
        raise DatabaseUrlError("the database URL's port must be a number from 1 to 65535") from None
    except ArgumentError:
        raise DatabaseUrlError(
            f"the database URL is not a valid URL; use {SUPPORTED_URLS}"
        ) from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise DatabaseUrlError(
            f"database URL scheme {parsed.drivername[:40]!r} is not supported; use {SUPPORTED_URLS}"
        )
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise DatabaseUrlError("the database URL's port must be a number from 1 to 65535")
    if driver == "sqlite" and (parsed.host or parsed.port or parsed.username or parsed.password):
        raise DatabaseUrlError(
            "a SQLite URL has no host: use sqlite:///relative/path or sqlite:////absolute/path"
        )
    return parsed.set(drivername=driver)


# What a SQLite URL's path may hold for plain_sqlite_path to read it without SQLAlchemy: the
# characters SQLAlchemy neither decodes when it parses a URL nor escapes in the store's label.
_PLAIN_SQLITE = "sqlite:///"
_PLAIN_CHARACTERS = frozenset(ascii_letters + digits + "_.-~ +/")


def plain_sqlite_path(url: str) -> str | None:
    """The file a plain SQLite URL names (`sqlite:///PATH`), read without SQLAlchemy; None for
    every other URL, and for any PATH that parse_database_url might read otherwise (a test holds
    the two equal on every URL this accepts).

    The terminal app reads its first rows before it imports SQLAlchemy (tui/first_rows.py); a
    URL this declines takes the normal way there, so declining is always safe.
    """
    if not url.startswith(_PLAIN_SQLITE):
        return None
    path = url[len(_PLAIN_SQLITE) :]
    if not path or path != path.strip() or not _PLAIN_CHARACTERS.issuperset(path):
        return None
    return path


def mask_url(url: str) -> str:
    """Return the URL with any password replaced by ***, safe to show and log; never raises.

    Every password its client would read: the userinfo's, and a query's `password=` (libpq
    and redis-py take one there, `sslpassword=` too)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
        query = {k: "***" if "pass" in k.lower() else v for k, v in parsed.query.items()}
        shown = parsed.set(query=query).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a bad port, a lone surrogate
        return "(invalid database URL)"
    shown = shown.replace("=%2A%2A%2A", "=***")
    # SQLAlchemy ends a password at its first "@"; urllib (redis-py) at the authority's last,
    # so what lies between is the rest of a limits store's password: never shown either.
    masked, at, after = shown.partition(":***@")
    if at:
        end = min((i for i in map(after.find, "/?#") if i >= 0), default=len(after))
        shown = masked + at + after[:end].rpartition("@")[2] + after[end:]
    return shown


def current_user() -> str:
    """Return the OS login name of whoever runs the tool, or uid-<uid> if it is not usable.

    getpass reads $LOGNAME (and $USER ...) first, unchecked: a name that is not a valid
    owner (an escape sequence, more than 64 characters) is replaced by uid-<uid>.
    """
    try:
        return check_owner(getpass.getuser())
    except (KeyError, OSError, InvalidInputError):  # KeyError/OSError: no passwd entry
        return f"uid-{os.getuid()}"


def ssh_client_address(env: Mapping[str, str] | None = None) -> str | None:
    """Return the SSH client's address when the tool runs in an SSH session."""
    env = os.environ if env is None else env
    for variable in ("SSH_CLIENT", "SSH_CONNECTION"):
        value = env.get(variable, "").split()
        if value:
            return value[0]
    return None
