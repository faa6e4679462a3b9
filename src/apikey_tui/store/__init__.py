"""The store: keys, the scope catalog and the audit trail, in plain frozen values.

`KeyStore` is its face (`keystore`); each concern has its own module. This file only
re-exports: the verifier imports `apikey_tui.store.credentials` alone.
"""

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
