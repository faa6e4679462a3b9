"""One error tree for the whole package; messages never carry a secret."""

from __future__ import annotations


class ApiKeyError(Exception):
    """Base of every error this package raises on purpose; its message is one line for humans."""


class InvalidInputError(ApiKeyError):
    """A name, owner, scope or description breaks the documented rules."""


class UnknownScopeError(InvalidInputError):
    """A key asked for a scope that is not in the scope catalog."""

    def __init__(self, unknown: list[str], known: list[str]) -> None:
        self.unknown = unknown
        super().__init__(
            f"unknown scope {', '.join(map(repr, unknown))}; "
            f"known scopes: {', '.join(known) or '(none)'}"
        )


class DuplicateKeyNameError(ApiKeyError):
    """The owner already has a key with this name (the database's unique constraint said so)."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(f"{owner!s} already has a key named {name!r}")


class KeyNotFoundError(ApiKeyError):
    """No key with this owner and name exists (perhaps someone deleted it meanwhile)."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(f"{owner} has no key named {name!r}")


class DuplicateScopeError(ApiKeyError):
    """The scope catalog already holds this scope."""

    def __init__(self, name: str) -> None:
        super().__init__(f"scope {name!r} already exists")


class ScopeNotFoundError(ApiKeyError):
    """The scope catalog holds no scope of this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no scope named {name!r}")


class ScopeInUseError(ApiKeyError):
    """A scope cannot be removed while keys still hold it."""

    def __init__(self, name: str, holders: list[str]) -> None:
        self.holders = holders
        shown = ", ".join(holders[:10]) + (
            f" and {len(holders) - 10} more" if len(holders) > 10 else ""
        )
        super().__init__(f"scope {name!r} is still held by: {shown}")


class StoreUnavailableError(ApiKeyError):
    """The database could not be reached or answered with an operational error."""


class SchemaVersionError(ApiKeyError):
    """The database was made by another release (or is not an apikey-tui database at all)."""
