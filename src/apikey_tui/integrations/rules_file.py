"""Route rules in a TOML file: read by serve-auth (--rules) and Django (RULES_FILE)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from apikey_tui.errors import InvalidInputError
from apikey_tui.integrations.routes import Route, RouteScopes, Unmatched, route

_RULE_KEYS = {"path", "scopes", "methods", "public"}
_FILE_KEYS = {"unmatched", "default_scopes", "route"}


def load_rules(path: str | Path) -> RouteScopes:
    """Read route rules from a TOML file; ValueError naming the file and the problem if bad.

    ```toml
    unmatched = "deny"          # the default: a path no rule covers is refused; "key": any key
    [[route]]
    path = "/health"
    public = true
    [[route]]
    path = "/models"
    scopes = ["serving", "project"]
    methods = ["POST"]          # optional; a GET rule also covers HEAD
    ```
    """
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ValueError(f"cannot read the rules file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"rules file {path} is not valid TOML: {exc}") from None
    try:
        return rules_from_mapping(data)
    except (ValueError, InvalidInputError, TypeError) as exc:
        raise ValueError(f"rules file {path}: {exc}") from None


def rules_from_mapping(data: Mapping[str, Any]) -> RouteScopes:
    """Build the rule table from a parsed rules file (see load_rules)."""
    unknown = set(data) - _FILE_KEYS
    if unknown:
        raise ValueError(f"unknown setting {sorted(unknown)}; expected {sorted(_FILE_KEYS)}")
    # The file's reader may sit in front of an app we cannot see (serve-auth), whose router may
    # reach a covered route by a path no rule names: so no rule, no pass, unless it says "key".
    # default_scopes alone says what an unmatched path needs, so it implies "key".
    unmatched: Unmatched = data.get("unmatched", "key" if "default_scopes" in data else "deny")
    if unmatched not in ("key", "deny"):
        raise ValueError(f'unmatched must be "key" or "deny", not {unmatched!r}')
    entries = data.get("route", [])
    if not isinstance(entries, list):
        raise ValueError("route must be an array of tables: [[route]]")
    routes: list[Route] = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise ValueError(f"route {number} must be a table")
        extra = set(entry) - _RULE_KEYS
        if extra or "path" not in entry:
            raise ValueError(
                f"route {number}: needs path and takes only {sorted(_RULE_KEYS)}"
                + (f", not {sorted(extra)}" if extra else "")
            )
        routes.append(
            route(
                _text(entry["path"], f"route {number} path"),
                *_texts(entry.get("scopes", []), f"route {number} scopes"),
                methods=(
                    None
                    if entry.get("methods") is None
                    else _texts(entry["methods"], f"route {number} methods")
                ),
                public=_flag(entry.get("public", False), f"route {number} public"),
            )
        )
    defaults = _texts(data.get("default_scopes", []), "default_scopes")
    return RouteScopes(routes, defaults, unmatched=unmatched)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value


def _texts(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings")
    return list(value)


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be true or false")
    return value
