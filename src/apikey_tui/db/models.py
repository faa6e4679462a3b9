"""SQLModel tables on the package's own metadata, so services' create_all never sees them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import registry
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

from apikey_tui import SCHEMA_VERSION as _SCHEMA_VERSION

# The schema this release reads and writes (its home is the package root, so --version can
# name it without SQLAlchemy); the migrations build every new database at it.
SCHEMA_VERSION = _SCHEMA_VERSION
# The oldest verifier that still works beside this schema (a newer schema that only adds tables
# a verifier never reads keeps older verifiers working): the meta row 'verifiers_from'.
VERIFIERS_FROM = 4
# Room for a subject's limits as text ('100000/30d' is 10 characters; at most 8 limits).
LIMITS_MAX = 200
# Owners' kinds (schema version 10): a person signs in; a team has members (people); a service
# account has people responsible for it (its members). Every owner before schema 10 is a person.
PERSON, TEAM, SERVICE = "person", "team", "service"
OWNER_KINDS = (PERSON, TEAM, SERVICE)
# Metadata (a key's or an owner's, schema version 10): a JSON object of short strings, at most
# this many bytes as stored (compact UTF-8), checked by `apikey_tui.store.metadata`.
META_MAX = 1024
# A key's tags as stored: 'env=prod team=pay', sorted, space-separated (`metadata.tags_text`).
TAGS_MAX = 400


class Base(SQLModel, registry=registry()):
    """Root of apikey-tui's tables; its metadata is separate from SQLModel.metadata."""


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend (SQLite keeps no zone of its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: use timezone-aware UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _timestamp(nullable: bool = False, index: bool = False) -> datetime:
    column: Column[datetime] = Column(UTCDateTime(), nullable=nullable, index=index)
    return Field(sa_column=column)  # type: ignore[no-any-return]


class SchemaInfo(Base, table=True):
    """One row per setting of the database itself; 'schema_version' says which release made it,
    'max_lifetime_seconds' (schema version 3, absent: no policy) caps new keys' lifetime."""

    __tablename__ = "apikey_tui_meta"
    key: str = Field(primary_key=True, max_length=64)
    value: str = Field(max_length=200)


class ScopeRow(Base, table=True):
    """The scope catalog: the APIs a key may be given access to."""

    __tablename__ = "apikey_tui_scope"
    name: str = Field(primary_key=True, max_length=32)
    description: str = Field(default="", max_length=200)


class KeyRow(Base, table=True):
    """An API key: who it stands in for, its name, public id and the argon2id hash of its secret.

    fingerprint is `hashing.fingerprint` of the secret, which the verifier compares before
    argon2; keys made before schema version 2 have none (their secrets were never stored).

    Lifecycle (schema version 3): expires_at is when the key stops working (None: never);
    disabled_at/disabled_reason mark a key switched off, reversibly. A rotation moves the
    previous id, hash and fingerprint to old_* and keeps that secret working until grace_until
    (never past the key's expires_at); created_at is then the rotation time.
    """

    __tablename__ = "apikey_tui_key"
    __table_args__ = (UniqueConstraint("owner", "name", name="uq_apikey_tui_key_owner_name"),)
    id: int | None = Field(default=None, primary_key=True)
    owner: str = Field(max_length=64, index=True)
    name: str = Field(max_length=64)
    public_id: str = Field(max_length=32, unique=True)
    secret_hash: str = Field(max_length=255, repr=False)
    fingerprint: str | None = Field(default=None, max_length=16, repr=False)
    created_at: datetime = _timestamp(index=True)  # the verifier reads keys created since
    last_used_at: datetime | None = _timestamp(nullable=True)
    expires_at: datetime | None = _timestamp(nullable=True, index=True)
    disabled_at: datetime | None = _timestamp(nullable=True)
    disabled_reason: str | None = Field(default=None, max_length=200)
    # A unique index, not a constraint: SQLite adds it in place (a constraint would copy the
    # table, and dropping the original with foreign keys on deletes every key's scopes).
    old_public_id: str | None = Field(default=None, max_length=32, unique=True, index=True)
    old_secret_hash: str | None = Field(default=None, max_length=255, repr=False)
    old_fingerprint: str | None = Field(default=None, max_length=16, repr=False)
    grace_until: datetime | None = _timestamp(nullable=True)
    # Limits (schema version 9): the key's own, canonical and space-separated ('10/s 600/m',
    # `apikey_tui.limits.format_limit`), None for none. A column, not rows of their own: the
    # verifier's one credential read, the key's record and an undo carry them with no join.
    limits: str | None = Field(default=None, max_length=LIMITS_MAX)
    # Networks (schema version 10): where the key may be used from, `NetworkRules.text()`
    # ('shadow +10.0.0.0/8 -10.9.0.0/16'), None for anywhere. Unbounded text: up to
    # `networks.RULES_MAX` entries. A column for the same reason as limits: no join, no query.
    networks: str | None = Field(default=None, sa_type=Text)
    # Schema version 11: who made the key (the actor's login name; None when the database
    # never recorded it), its metadata (JSON, reaches services as caller.meta) and its tags
    # ('env=prod', for admins' filters; services never see them).
    created_by: str | None = Field(default=None, max_length=64, index=True)
    meta: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    tags: str | None = Field(default=None, max_length=TAGS_MAX)


class OwnerRow(Base, table=True):
    """An owner (schema version 11): a person, a team or a service account, with its
    description, metadata and limits, one pool that every key of the owner draws from.

    The table keeps the name it had in schema version 9, when it held owners' limits alone:
    verifiers of 0.7.0 and 0.8.0 read it by that name and keep working beside schema 11. Not
    tied to key rows: an owner's pool, members and metadata outlive any one of its keys. Every
    key's owner, and every owner with network rules, has a row (a key or rules for a new owner
    make it, a person).
    """

    __tablename__ = "apikey_tui_owner_limit"
    owner: str = Field(primary_key=True, max_length=64)
    limits: str | None = Field(default=None, max_length=LIMITS_MAX)  # as KeyRow.limits
    kind: str = Field(default=PERSON, max_length=8)  # one of OWNER_KINDS
    description: str = Field(default="", max_length=200)
    meta: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class OwnerMemberRow(Base, table=True):
    """A team's member or a service account's responsible person (schema version 11): both
    are people (owners of kind person), and go when either owner is removed."""

    __tablename__ = "apikey_tui_owner_member"
    owner: str = Field(
        sa_column=Column(
            String(64),
            ForeignKey("apikey_tui_owner_limit.owner", ondelete="CASCADE"),
            primary_key=True,
        )
    )
    member: str = Field(
        sa_column=Column(
            String(64),
            ForeignKey("apikey_tui_owner_limit.owner", ondelete="CASCADE"),
            primary_key=True,
            index=True,  # offboarding finds a person's teams by it
        )
    )


class OwnerNetworkRow(Base, table=True):
    """An owner's network rules (schema version 10): every key of the owner must pass them too.

    A row only for an owner that has rules, written as KeyRow.networks; like OwnerRow it is not
    tied to a key row (setting rules for a new owner makes its OwnerRow too, a person).
    """

    __tablename__ = "apikey_tui_owner_network"
    owner: str = Field(primary_key=True, max_length=64)
    networks: str = Field(sa_type=Text)


class PreviousIdRow(Base, table=True):
    """A public id a key had before its current one (schema version 7): one row per id a
    recreate or rotation replaced, so the key's usage recorded under it stays the key's.

    Written in the rotation's transaction; goes with the key (ON DELETE CASCADE). A rotation's
    previous secret in grace (`KeyRow.old_public_id`) is listed here too.
    """

    __tablename__ = "apikey_tui_previous_id"
    public_id: str = Field(primary_key=True, max_length=32)
    key_id: int = Field(
        sa_column=Column(
            ForeignKey("apikey_tui_key.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    replaced_at: datetime = _timestamp()  # when a new secret took its place


class KeyScopeRow(Base, table=True):
    """Which catalog scopes a key holds; the foreign keys make a dangling scope impossible."""

    __tablename__ = "apikey_tui_key_scope"
    key_id: int = Field(
        sa_column=Column(ForeignKey("apikey_tui_key.id", ondelete="CASCADE"), primary_key=True)
    )
    scope: str = Field(
        sa_column=Column(
            String(32), ForeignKey("apikey_tui_scope.name", ondelete="RESTRICT"), primary_key=True
        )
    )


class EventRow(Base, table=True):
    """The audit trail: what happened to which key or scope, by whom, when. Never a secret."""

    __tablename__ = "apikey_tui_event"
    id: int | None = Field(default=None, primary_key=True)
    at: datetime = _timestamp(index=True)
    action: str = Field(max_length=32)
    owner: str | None = Field(default=None, max_length=64)
    key_name: str | None = Field(default=None, max_length=64)
    public_id: str | None = Field(default=None, max_length=32)
    scope: str | None = Field(default=None, max_length=32)
    detail: str = Field(default="", max_length=400)
    actor: str = Field(max_length=64)
    actor_address: str | None = Field(default=None, max_length=64)


class ChangeRow(Base, table=True):
    """The change log (schema version 4): one row per key id a change touched, in commit order.

    Written in the same transaction as the change itself (create, delete, recreate, rotate,
    disable, enable, expiry, scopes, a leak); last-used writes never count. Verifiers read
    "changes since seq N" and drop exactly those keys from their caches. Pruned by age; the
    newest row always stays, so a reader that is up to date can tell it has missed nothing.
    """

    __tablename__ = "apikey_tui_change"
    __table_args__ = {"sqlite_autoincrement": True}
    seq: int | None = Field(default=None, primary_key=True)
    public_id: str = Field(max_length=32)
    changed_at: datetime = _timestamp(index=True)  # pruning finds old rows by it


# Usage (schema version 5): counts per key public id, per period, per kind and scope. Insert-only
# for services, so it has no key: a flush appends, reads sum every row of a period, and
# `db compact` rolls minutes into hours and hours into days in one transaction.
USAGE_ALLOWED, USAGE_FORBIDDEN, USAGE_WRONG_SECRET = 0, 1, 2  # UsageTable.c.kind
# Schema version 9: a request of a valid key with its scopes, refused because a limit was spent
# (429); its scope text is the limit ('key 600/m', 'owner 100000/30d'). Nothing is consumed.
USAGE_LIMITED = 3
USAGE_KINDS = (USAGE_ALLOWED, USAGE_FORBIDDEN, USAGE_WRONG_SECRET, USAGE_LIMITED)
# Schema version 10, where requests come from (`apikey_tui.networks`); the scope text is the
# client's network, cut to its /24 or /56, never a whole address. NETWORK: refused (403) by the
# key's or owner's network rules, text "NETWORK ROUTE"; SHADOW: admitted, but rules in shadow
# mode would have refused it, likewise; FROM: a key was admitted from NETWORK in that minute
# (requests: how often it was noted, not how many requests; "*" when more networks than a
# verifier records per key were seen). Apart from USAGE_KINDS: the request counts never see them.
USAGE_NETWORK, USAGE_SHADOW, USAGE_FROM = 4, 5, 6
NETWORK_KINDS = (USAGE_NETWORK, USAGE_SHADOW, USAGE_FROM)
MINUTE, HOUR, DAY = 1, 60, 1440  # UsageTable.c.span, in minutes
USAGE_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def usage_minute(moment: datetime) -> int:
    """The usage table's period key of a moment: whole minutes since 1970-01-01 UTC."""
    return int((moment - USAGE_EPOCH).total_seconds()) // 60


UsageTable = Table(
    "apikey_tui_usage",
    Base.metadata,
    Column("public_id", String(32), nullable=False),
    # The period's first minute, in whole minutes since 1970-01-01 UTC: one integer compares,
    # rounds to hours and days, and sums the same on every backend.
    Column("minute", Integer, nullable=False),
    Column("span", SmallInteger, nullable=False),  # MINUTE, HOUR or DAY
    Column(
        "kind", SmallInteger, nullable=False
    ),  # USAGE_ALLOWED, _FORBIDDEN, _WRONG_SECRET, _LIMITED
    # allowed: the scopes the check required, sorted and space-separated ('' for none: one row
    # per request counts it once, however many scopes it needed); forbidden: the missing
    # scopes, likewise; wrong secret: ''. Unbounded text: a list cut short could make a scope
    # that is needed look unused.
    Column("scope", Text, nullable=False),
    Column("requests", BigInteger().with_variant(Integer, "sqlite"), nullable=False),
    Index("ix_apikey_tui_usage_key", "public_id", "minute"),
    # A window's rows of one kind (minute leads: compaction and retention find old rows by it),
    # with what the Usage view's lists sum, so they never read the table (schema version 6).
    Index("ix_apikey_tui_usage_window", "minute", "kind", "public_id", "requests"),
)

# A verifier's flush (schema version 7): one row per batch of usage rows, written in the batch's
# transaction. A flush whose answer was lost is retried with the same id, and finding the id
# already there it writes nothing: a count is written once. `db compact` prunes old ids.
UsageBatchTable = Table(
    "apikey_tui_usage_batch",
    Base.metadata,
    Column("id", String(32), primary_key=True),
    Column("minute", Integer, nullable=False),  # when it was written (usage_minute)
)

# Limits (schema version 8): the counts of every limit's current windows, and the boot marker
# that tells a store which lost its counts. On PostgreSQL both are UNLOGGED (no WAL: a count is
# an upsert per lease, not per request); a crash empties them together, and the marker's absence
# tells the verifiers (`apikey_tui.limits.sql_store`). Verifiers write both; nothing else does.
LimitCountTable = Table(
    "apikey_tui_limit_count",
    Base.metadata,
    Column("limit_key", String(255), primary_key=True),  # AppliedLimit.key
    Column("window_index", BigInteger, primary_key=True),  # floor(store now / window seconds)
    Column("used", BigInteger, nullable=False),  # tokens granted in that window
    Column("last_grant", BigInteger, nullable=False),  # what the last take got (RETURNING)
    Column("ends_at", Float, nullable=False, index=True),  # window end, Unix s: pruning finds it
)
LimitBootTable = Table(
    "apikey_tui_limit_boot",
    Base.metadata,
    Column("id", SmallInteger, primary_key=True),  # always 1: one marker per database
    Column("boot", String(32), nullable=False),
    Column("created_at", Float, nullable=False),  # Unix seconds, the store's clock
    Column("lost_at", Float, nullable=True),  # windows that began before it grant 0
)
