"""The store: keys, the scope catalog and the audit trail, in plain frozen values.

`KeyStore` is its face (`keystore`); each concern has its own module. This file only
re-exports, and lazily: a name is imported from its module when first asked for, so that
`from apikey_tui.store import KeyInfo` costs the values' module, not SQLAlchemy and SQLModel
(the terminal app paints its first rows before it imports them: tui/first_rows.py).
"""

from importlib import import_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from apikey_tui.store.bulk import UNDOABLE, Batch
    from apikey_tui.store.credentials import CHANGE_CHANNEL, Credential
    from apikey_tui.store.keystore import KeyStore
    from apikey_tui.store.lifecycle import Deliver
    from apikey_tui.store.policy import POLICY_KEY
    from apikey_tui.store.queries import Cancel, QueryCancelled
    from apikey_tui.store.types import (
        LEAK_EVENT,
        LEAK_OUTCOMES,
        LEAK_REASON,
        LEAK_SOURCES,
        SORTS,
        Actor,
        CreatedKey,
        Event,
        KeyDetail,
        KeyInfo,
        KeyQuery,
        Leak,
        ScopeInfo,
        ScopeUsage,
        leak_reason,
    )

# Each name and the module that holds it.
_HOMES = {
    "UNDOABLE": "bulk",
    "Batch": "bulk",
    "CHANGE_CHANNEL": "credentials",
    "Credential": "credentials",
    "KeyStore": "keystore",
    "Deliver": "lifecycle",
    "POLICY_KEY": "policy",
    "Cancel": "queries",
    "QueryCancelled": "queries",
    **dict.fromkeys(
        (
            "LEAK_EVENT",
            "LEAK_OUTCOMES",
            "LEAK_REASON",
            "LEAK_SOURCES",
            "SORTS",
            "Actor",
            "CreatedKey",
            "Event",
            "KeyDetail",
            "KeyInfo",
            "KeyQuery",
            "Leak",
            "ScopeInfo",
            "ScopeUsage",
            "leak_reason",
        ),
        "types",
    ),
}

__all__ = [
    "CHANGE_CHANNEL",
    "LEAK_EVENT",
    "LEAK_OUTCOMES",
    "LEAK_REASON",
    "LEAK_SOURCES",
    "POLICY_KEY",
    "SORTS",
    "UNDOABLE",
    "Actor",
    "Batch",
    "Cancel",
    "CreatedKey",
    "Credential",
    "Deliver",
    "Event",
    "KeyDetail",
    "KeyInfo",
    "KeyQuery",
    "KeyStore",
    "Leak",
    "QueryCancelled",
    "ScopeInfo",
    "ScopeUsage",
    "leak_reason",
]


def __getattr__(name: str) -> object:
    """A re-exported name, imported from its module on first use (then kept here)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
