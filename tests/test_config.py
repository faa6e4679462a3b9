"""Tests of configuration precedence, the default database file and URL masking."""

from __future__ import annotations

import pytest

from apikey_tui.config import (
    default_database_path,
    mask_url,
    resolve_database_url,
    ssh_client_address,
)
from apikey_tui.errors import InvalidInputError


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


def test_invalid_url_is_a_clear_error() -> None:
    """A URL SQLAlchemy cannot parse gives a one-line error without echoing it."""
    with pytest.raises(InvalidInputError, match="not a valid"):
        resolve_database_url("::nonsense::", {})


def test_mask_url_hides_the_password() -> None:
    """The password of a database URL never shows in what is displayed."""
    masked = mask_url("postgresql+psycopg://admin:hunter2@db.example:5432/keys")
    assert "hunter2" not in masked
    assert masked == "postgresql+psycopg://admin:***@db.example:5432/keys"


def test_ssh_client_address_comes_from_the_environment() -> None:
    """The SSH client address is the first field of SSH_CLIENT, or None outside SSH."""
    assert ssh_client_address({"SSH_CLIENT": "198.51.100.4 52144 22"}) == "198.51.100.4"
    assert ssh_client_address({}) is None
