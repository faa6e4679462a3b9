"""Where settings come from: command-line flag, then environment, then a default SQLite file."""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from apikey_tui.errors import InvalidInputError

DATABASE_URL_ENV = "APIKEY_TUI_DATABASE_URL"


def default_database_path(env: Mapping[str, str] | None = None) -> Path:
    """Return the default SQLite file under $XDG_DATA_HOME (or ~/.local/share)."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "apikey-tui" / "keys.db"


def resolve_database_url(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """Pick the URL: --database-url, else $APIKEY_TUI_DATABASE_URL, else the default file."""
    env = os.environ if env is None else env
    url = flag or env.get(DATABASE_URL_ENV) or f"sqlite:///{default_database_path(env)}"
    try:
        make_url(url)
    except ArgumentError:
        raise InvalidInputError("the database URL is not a valid SQLAlchemy URL") from None
    return url


def mask_url(url: str) -> str:
    """Return the URL with any password replaced by ***, safe to show and log."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "(invalid database URL)"


def current_user() -> str:
    """Return the OS login name of whoever runs the tool."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container user without a passwd entry
        return f"uid-{os.getuid()}"


def ssh_client_address(env: Mapping[str, str] | None = None) -> str | None:
    """Return the SSH client's address when the tool runs in an SSH session."""
    env = os.environ if env is None else env
    for variable in ("SSH_CLIENT", "SSH_CONNECTION"):
        value = env.get(variable, "").split()
        if value:
            return value[0]
    return None
