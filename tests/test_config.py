"""Tests of configuration precedence, the default database file and URL masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from apikey_tui.config import (
    default_database_path,
    mask_url,
    parse_database_url,
    resolve_database_url,
    ssh_client_address,
)
from apikey_tui.errors import DatabaseUrlError, InvalidInputError
from apikey_tui.tui.failures import log_path


def test_flag_beats_environment_beats_default() -> None:
    """--database-url wins over $APIKEY_TUI_DATABASE_URL, which wins over the default file."""
    env = {"APIKEY_TUI_DATABASE_URL": "sqlite:///env.db", "XDG_DATA_HOME": "/data"}
    assert resolve_database_url("sqlite:///flag.db", env) == "sqlite:///flag.db"
    assert resolve_database_url(None, env) == "sqlite:///env.db"
    assert resolve_database_url(None, {"XDG_DATA_HOME": "/data"}) == (
        "sqlite:////data/apikey-tui/keys.db"
    )


def test_default_path_follows_xdg_or_home() -> None:
    """Without XDG_DATA_HOME the default file lives under ~/.local/share/apikey-tui."""
    assert str(default_database_path({})).endswith(".local/share/apikey-tui/keys.db")


def test_a_relative_xdg_folder_is_ignored_as_the_spec_says() -> None:
    """A relative $XDG_DATA_HOME or $XDG_STATE_HOME counts as unset (XDG Base Directory spec):
    the database and the app's log never move with the current folder."""
    home = Path.home()
    for relative in ("relative/path", "./data", "~/data"):
        assert default_database_path({"XDG_DATA_HOME": relative}) == (
            home / ".local" / "share" / "apikey-tui" / "keys.db"
        )
        assert log_path({"XDG_STATE_HOME": relative}) == (
            home / ".local" / "state" / "apikey-tui" / "app.log"
        )
    assert log_path({"XDG_STATE_HOME": "/state"}) == Path("/state/apikey-tui/app.log")


def test_invalid_url_is_a_clear_error() -> None:
    """A URL SQLAlchemy cannot parse gives a one-line error without echoing it."""
    with pytest.raises(InvalidInputError, match="not a valid"):
        resolve_database_url("::nonsense::", {})


def test_mask_url_hides_the_password() -> None:
    """The password of a database URL never shows in what is displayed."""
    masked = mask_url("postgresql+psycopg://admin:hunter2@db.example:5432/keys")
    assert "hunter2" not in masked
    assert masked == "postgresql+psycopg://admin:***@db.example:5432/keys"


@pytest.mark.parametrize(
    "url",
    [
        # redis-py (urllib) reads a password up to the authority's last "@"; SQLAlchemy up to
        # its first: neither part may show.
        "redis://svc:hunt@er2@127.0.0.1:6379/0",
        "redis://:hunt@e@r2@127.0.0.1:6379/0",
        # A password in the query: redis-py and libpq both take it.
        "redis://127.0.0.1:6379/0?password=hunter2",
        "unix:///run/valkey.sock?db=0&PASSWORD=hunter2",
        "postgresql+psycopg://svc@db.example/keys?password=hunter2&sslpassword=hunter2",
    ],
)
def test_mask_url_hides_every_password_a_client_would_read(url: str) -> None:
    """No part of a password shows, wherever the URL's client would take it from."""
    masked = mask_url(url)
    assert "hunt" not in masked and "er2" not in masked and "r2" not in masked, masked
    assert "***" in masked


def test_ssh_client_address_comes_from_the_environment() -> None:
    """The SSH client address is the first field of SSH_CLIENT, or None outside SSH."""
    assert ssh_client_address({"SSH_CLIENT": "198.51.100.4 52144 22"}) == "198.51.100.4"
    assert ssh_client_address({}) is None


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///keys.db", "sqlite"),
        ("sqlite:////srv/apikeys/keys.db", "sqlite"),
        ("sqlite://", "sqlite"),
        ("postgresql://svc@db.example:5432/keys", "postgresql+psycopg"),
        ("postgresql+psycopg://svc:pw@db.example/keys", "postgresql+psycopg"),
    ],
)
def test_sqlite_and_postgresql_urls_are_accepted(url: str, driver: str) -> None:
    """SQLite and PostgreSQL URLs parse, and plain postgresql:// means psycopg 3."""
    assert parse_database_url(url).drivername == driver


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://u:pw@db/keys", "scheme 'mysql' is not supported"),
        ("http://example.com/keys", "scheme 'http' is not supported"),
        ("postgresql+asyncpg://u@db/keys", "scheme 'postgresql+asyncpg' is not supported"),
        ("postgresql+psycopg2://u@db/keys", "scheme 'postgresql+psycopg2' is not supported"),
        ("sqlite+nodriver:///keys.db", "scheme 'sqlite+nodriver' is not supported"),
        ("postgresql://u:pw@db:notaport/keys", "port must be a number from 1 to 65535"),
        ("postgresql://u@db:99999/keys", "port must be a number from 1 to 65535"),
        ("postgresql://u@db:0/keys", "port must be a number from 1 to 65535"),
        ("sqlite://keys.db", "a SQLite URL has no host"),
        ("", "the database URL is empty"),
        ("sqlite:///keys.db\nx", "control character"),
        ("sqlite:///k\x00.db", "control character"),
        ("sqlite:///k\ud800.db", "not valid UTF-8"),
        ("postgresql://u@db/k\udcff", "not valid UTF-8"),  # a non-UTF-8 byte from argv
        ("::nonsense::", "not a valid URL"),
    ],
)
def test_unusable_urls_are_one_line_database_url_errors(url: str, reason: str) -> None:
    """Each URL this package cannot use raises DatabaseUrlError: one line, no password."""
    with pytest.raises(DatabaseUrlError) as info:
        parse_database_url(url)
    message = str(info.value)
    assert reason in message and "\n" not in message and "pw" not in message
    assert isinstance(info.value, InvalidInputError)


def test_unsupported_scheme_names_what_is_supported() -> None:
    """Refusing a scheme names the two URL forms that work."""
    with pytest.raises(DatabaseUrlError, match=r"use sqlite:///PATH or postgresql://"):
        resolve_database_url("mysql://u@db/keys", {})


def test_odd_text_in_flag_or_environment_is_refused_not_crashed() -> None:
    """A lone surrogate in --database-url or the environment is a DatabaseUrlError."""
    with pytest.raises(DatabaseUrlError, match="UTF-8"):
        resolve_database_url("sqlite:///\ud800.db", {})
    with pytest.raises(DatabaseUrlError, match="UTF-8"):
        resolve_database_url(None, {"APIKEY_TUI_DATABASE_URL": "sqlite:///\udcff.db"})


def test_empty_flag_is_refused_but_empty_environment_means_unset() -> None:
    """--database-url '' is refused; an empty $APIKEY_TUI_DATABASE_URL falls back to the default."""
    with pytest.raises(DatabaseUrlError, match="empty"):
        resolve_database_url("", {"XDG_DATA_HOME": "/data"})
    env = {"APIKEY_TUI_DATABASE_URL": "", "XDG_DATA_HOME": "/data"}
    assert resolve_database_url(None, env) == "sqlite:////data/apikey-tui/keys.db"


@pytest.mark.parametrize(
    "url", ["postgresql://u\ud800:pw@db/keys", "postgresql://u:pw@db:notaport/keys", "::x::"]
)
def test_mask_url_never_raises(url: str) -> None:
    """mask_url shows a placeholder for a URL it cannot parse, never raising, never the password."""
    assert mask_url(url) == "(invalid database URL)"
