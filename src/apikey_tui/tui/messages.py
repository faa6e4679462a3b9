"""Messages that workers post back to the UI thread (past tense: something happened), and what
a write returns (KeyWrites hands it to the screen through workers.StoreDone)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Batch, CreatedKey, KeyInfo, ScopeInfo


@dataclass
class KeysLoaded(Message):
    """The scope catalog and the change marker were read (the key table reads its own rows)."""

    scopes: list[ScopeInfo]
    marker: tuple[object, ...]


@dataclass
class KeyCreated(Message):
    """A key was created or recreated; the message carries its one-time plaintext."""

    created: CreatedKey = field(repr=False)
    recreated: bool = False
    verb: str | None = None  # e.g. a rotation's "rotated (old secret … works until …)"


@dataclass
class KeyDeleted(Message):
    """A key was deleted."""

    key: KeyInfo


@dataclass
class KeyLifecycleChanged(Message):
    """A key's grace ended, it was disabled or enabled, or its expiry moved; note says which."""

    key: KeyInfo
    note: str


@dataclass
class BatchDone(Message):
    """A change to one or many keys committed (`KeyStore.disable_keys` …); note says what."""

    batch: Batch = field(repr=False)  # a rotation's batch holds new secrets
    note: str


@dataclass
class StoreFailed(Message):
    """A store operation was refused or the database was unavailable."""

    reason: str
    while_loading: bool = False


@dataclass
class StoreOpened(Message):
    """The store that was opening once the first rows were painted is open, or failed to open
    (tui/first_rows.py); posted from the opening thread."""


@dataclass
class ReachabilityChanged(Message):
    """Polling found the database unreachable (with the reason) or reachable again (None)."""

    reason: str | None


# --- the detail, scope catalog and audit trail views -----------------------------------------


@dataclass
class ViewRead(Message):
    """A view's data was read from the store, at the given change marker."""

    marker: tuple[object, ...]
    data: object
    generation: int


@dataclass
class KeyVanished(Message):
    """The key a detail view shows no longer exists."""

    owner: str
    name: str


@dataclass
class CatalogChanged(Message):
    """A scope was added, described or removed; note says which, for the admin."""

    note: str


@dataclass
class ScopeRemovalRefused(Message):
    """The catalog refused to remove a scope that keys still hold, or (reason "") the app did
    not offer to, knowing keys hold it; holders may list only the first of total."""

    scope: str
    holders: list[str]
    reason: str
    total: int | None = None
