"""The store's values: keys, scopes, events, leaks and queries, plain and frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from apikey_tui.config import current_user, ssh_client_address
from apikey_tui.limits.model import Limit
from apikey_tui.names import DESCRIPTION_MAX, printable
from apikey_tui.networks import NetworkRules

# The usage views' window when none is asked for (`store.usage`).
DEFAULT_WINDOW = timedelta(days=30)
SORTS = ("owner", "name", "state", "expires", "public_id", "scopes", "created", "last_used")
# A leak marks the key's secret, whatever the key's state: its disabled reason starts with
# LEAK_REASON until a recreate or rotation gives it a new secret (the reason then starts with
# LEAK_REPLACED), and no enable, undo or expiry brings the marked secret back. Each report is a
# LEAK_EVENT whose detail reads "<source> <outcome>: <where>" (Leak.detail, Leak.from_event).
LEAK_EVENT = "key.leak"
LEAK_REASON = "leaked: "
LEAK_REPLACED = "leaked secret replaced: "
LEAK_SOURCES = ("scan", "github", "depsdev", "revoke")
# disabled: the key was marked (and so disabled, if it was not); deleted: --action delete on a
# live key; recorded: the key was already marked, this new report is kept beside the first;
# repeated: the very same report (source and where) again, nothing written (reports act once).
LEAK_OUTCOMES = ("disabled", "deleted", "recorded", "repeated")
_EVENT_DETAIL_MAX = 400  # EventRow.detail


@dataclass(frozen=True)
class Actor:
    """Who is acting: the OS user running the tool, and the SSH client address if any."""

    user: str
    address: str | None = None

    @classmethod
    def current(cls) -> Actor:
        """Return the actor of this process, read from the OS and the SSH environment."""
        return cls(current_user(), ssh_client_address())


@dataclass(frozen=True)
class KeyInfo:
    """What may be known about a key by anyone: everything but its secret and hash."""

    owner: str
    name: str
    public_id: str
    scopes: tuple[str, ...]
    created_at: datetime
    last_used_at: datetime | None = None
    # Lifecycle (schema version 3). created_at is the last creation or rotation. old_public_id
    # and grace_until are set only while a rotation's previous secret still works.
    expires_at: datetime | None = None
    disabled_at: datetime | None = None
    disabled_reason: str | None = None
    old_public_id: str | None = None
    grace_until: datetime | None = None
    # Limits (schema version 9): the key's own, shortest window first. Its owner's pool, if
    # any, applies too (`KeyStore.owner_limits`).
    limits: tuple[Limit, ...] = ()
    # Networks (schema version 10): where the key may be used from (None: anywhere). Its
    # owner's rules, if any, apply too (`KeyStore.owner_networks`).
    networks: NetworkRules | None = None
    # Schema version 11: who made the key (None: not recorded), its metadata (services read
    # it, with its owner's, as caller.meta) and its tags (admins filter by them); each sorted
    # (name, value) pairs (`store.metadata`).
    created_by: str | None = None
    meta: tuple[tuple[str, str], ...] = ()
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def disabled(self) -> bool:
        """Whether an admin switched the key off (reversibly: `enable_key`)."""
        return self.disabled_at is not None

    @property
    def leaked(self) -> bool:
        """Whether the key's current secret leaked (`KeyStore.leaks` says where, when)."""
        return marks_leak(self.disabled_reason)

    @property
    def leak_replaced(self) -> bool:
        """Whether the key is disabled since its leaked secret was replaced (enable may follow)."""
        return self.disabled_reason is not None and self.disabled_reason.startswith(LEAK_REPLACED)

    def expired(self, now: datetime) -> bool:
        """Whether the key stopped working at its expiry (from that very second on)."""
        return self.expires_at is not None and now >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        """Return the key as a JSON-ready dict."""
        return {
            "owner": self.owner,
            "name": self.name,
            "public_id": self.public_id,
            "scopes": list(self.scopes),
            "created_at": self.created_at.isoformat(),
            "last_used_at": _iso(self.last_used_at),
            "expires_at": _iso(self.expires_at),
            "disabled": self.disabled,
            "disabled_at": _iso(self.disabled_at),
            "disabled_reason": self.disabled_reason,
            "old_public_id": self.old_public_id,
            "grace_until": _iso(self.grace_until),
            "limits": [str(limit) for limit in self.limits],
            "networks": None if self.networks is None else self.networks.to_json(),
            "created_by": self.created_by,
            "meta": dict(self.meta),
            "tags": dict(self.tags),
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


@dataclass(frozen=True)
class CreatedKey:
    """A freshly created or recreated key with its plaintext, which exists only here, once."""

    info: KeyInfo
    plaintext: str = field(repr=False)


@dataclass(frozen=True)
class ScopeInfo:
    """A scope of the catalog and what it gives access to."""

    name: str
    description: str

    def to_json(self) -> dict[str, Any]:
        """Return the scope as a JSON-ready dict."""
        return {"name": self.name, "description": self.description}


@dataclass(frozen=True)
class ScopeUsage:
    """A catalog scope, its description and how many keys hold it."""

    name: str
    description: str
    keys: int


@dataclass(frozen=True)
class Event:
    """One line of the audit trail."""

    id: int
    at: datetime
    action: str
    owner: str | None
    key_name: str | None
    public_id: str | None
    scope: str | None
    detail: str
    actor: str
    actor_address: str | None

    def to_json(self) -> dict[str, Any]:
        """Return the event as a JSON-ready dict."""
        return {
            "id": self.id,
            "at": self.at.isoformat(),
            "action": self.action,
            "owner": self.owner,
            "key_name": self.key_name,
            "public_id": self.public_id,
            "scope": self.scope,
            "detail": self.detail,
            "actor": self.actor,
            "actor_address": self.actor_address,
        }


@dataclass(frozen=True)
class KeyDetail:
    """One key, who created or last recreated it (that event), and its events, newest first."""

    info: KeyInfo
    origin: Event | None
    events: tuple[Event, ...]


@dataclass(frozen=True)
class KeyQuery:
    """Which keys a view shows, in which order: filtered and sorted by the database.

    owner None means every owner; text matches owner, name, public id or a scope's name
    (case-insensitive); sort is one of SORTS, ties broken so that the order is total.
    """

    owner: str | None = None
    text: str = ""
    sort: str = "name"
    reverse: bool = False

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise ValueError(f"unknown sort {self.sort!r}; one of {', '.join(SORTS)}")


def marks_leak(reason: str | None) -> bool:
    """Whether a disabled reason marks the key's current secret as leaked (never to work again)."""
    return reason is not None and reason.startswith(LEAK_REASON)


def leak_reason(where: str, prefix: str = LEAK_REASON) -> str:
    """The disabled reason of a leaked key: 'leaked: <where>', printable, at most 200 chars.

    prefix LEAK_REPLACED gives the reason of a leaked key once its secret was replaced.
    """
    reason = prefix + printable(where)
    return reason if len(reason) <= DESCRIPTION_MAX else reason[: DESCRIPTION_MAX - 1] + "…"


@dataclass(frozen=True)
class Leak:
    """One report of a leaked key: when, from which source, what was done, and where it was
    found (a URL, `file:line` or `commit:path:line`); public_id is the id that leaked (a
    rotated key's previous id, if that one leaked)."""

    at: datetime
    source: str  # one of LEAK_SOURCES
    outcome: str  # one of LEAK_OUTCOMES
    where: str
    owner: str | None
    name: str | None
    public_id: str | None

    @property
    def detail(self) -> str:
        """The event's detail: '<source> <outcome>: <where>', cut to the column's size."""
        text = f"{self.source} {self.outcome}: {self.where}"
        return text if len(text) <= _EVENT_DETAIL_MAX else text[: _EVENT_DETAIL_MAX - 1] + "…"

    @classmethod
    def from_event(cls, event: Event) -> Leak:
        """Read a key.leak event back (fields it lacks are empty)."""
        head, _, where = event.detail.partition(": ")
        source, _, outcome = head.partition(" ")
        return cls(event.at, source, outcome, where, event.owner, event.key_name, event.public_id)

    def to_json(self) -> dict[str, Any]:
        """Return the leak as a JSON-ready dict."""
        return {
            "at": self.at.isoformat(),
            "source": self.source,
            "outcome": self.outcome,
            "where": self.where,
            "owner": self.owner,
            "name": self.name,
            "public_id": self.public_id,
        }
