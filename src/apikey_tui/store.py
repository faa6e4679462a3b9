"""KeyStore: keys, the scope catalog and the audit trail, in plain frozen values."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    false,
    func,
    literal_column,
    or_,
    update,
)
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, select

from apikey_tui import change_log, keyformat
from apikey_tui.clock import Clock, system_clock
from apikey_tui.config import current_user, mask_url, ssh_client_address
from apikey_tui.db import WRITE, database_errors, ensure_schema, key_indexes, make_engine
from apikey_tui.db.models import EventRow, KeyRow, KeyScopeRow, SchemaInfo, ScopeRow
from apikey_tui.errors import (
    DatabaseCorruptError,
    DuplicateKeyNameError,
    DuplicateScopeError,
    InvalidInputError,
    KeyChangedError,
    KeyNotFoundError,
    KeyStateError,
    LifetimePolicyError,
    ScopeInUseError,
    ScopeNotFoundError,
    StoreUnavailableError,
    UnknownScopeError,
)
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.names import (
    DESCRIPTION_MAX,
    DURATION_MAX,
    NEVER,
    Expiry,
    check_description,
    check_expiry,
    check_key_name,
    check_owner,
    check_reason,
    check_scope_name,
    check_span,
    format_duration,
    format_moment,
    parse_scopes,
    printable,
)


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

    @property
    def disabled(self) -> bool:
        """Whether an admin switched the key off (reversibly: `enable_key`)."""
        return self.disabled_at is not None

    @property
    def leaked(self) -> bool:
        """Whether the key was disabled because it leaked (`KeyStore.leaks` says where, when)."""
        return self.disabled_reason is not None and self.disabled_reason.startswith(LEAK_REASON)

    def expired(self, now: datetime) -> bool:
        """Whether the key stopped working at its expiry (from that very second on)."""
        return self.expires_at is not None and now >= self.expires_at

    def state(self, now: datetime) -> str:
        """'disabled', 'expired' or 'active': what a service answers is 401 for the first two."""
        if self.disabled:
            return "disabled"
        return "expired" if self.expired(now) else "active"

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
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


@dataclass(frozen=True)
class CreatedKey:
    """A freshly created or recreated key with its plaintext, which exists only here, once."""

    info: KeyInfo
    plaintext: str = field(repr=False)


@dataclass(frozen=True)
class Credential:
    """A key with its stored argon2id hash and secret fingerprint, for the verifier.

    Neither shows in a repr. fingerprint is None for keys made before schema version 2.
    For a rotated key's previous id (still in grace), info is the key's own (owner, name,
    scopes: a scope change applies to both secrets) with that id as public_id, and the hash and
    fingerprint are the previous secret's. expires_at is the moment this secret stops working:
    the key's expiry, or for a previous secret the earlier of that and the end of the grace.
    """

    info: KeyInfo
    secret_hash: str = field(repr=False)
    fingerprint: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None
    disabled: bool = False


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


Cancel = Callable[[], bool]
SORTS = ("owner", "name", "public_id", "created", "last_used")
# PostgreSQL: every recorded change also NOTIFYs this channel in its own transaction, so
# verifiers on every host hear of it at commit (and never before: a rolled-back change is silent).
CHANGE_CHANNEL = "apikey_tui_changes"
# Fewer candidates than this from the trigram index: read just them; more: the text is common,
# and scanning in the table's order finds a screenful long before the end.
SPARSE = 2000


class QueryCancelled(Exception):
    """The caller cancelled a read (a newer keystroke made it stale); nothing to report."""


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


_KEY_TABLE: Table = KeyRow.__table__  # type: ignore[attr-defined]
_SCOPE_TABLE: Table = KeyScopeRow.__table__  # type: ignore[attr-defined]


def _sort_columns(query: KeyQuery) -> list[str]:
    """The columns of query's order, most significant first; the last makes it total."""
    return {
        # With one owner (fixed by the WHERE), the unique (owner, name) index gives the order.
        "owner": ["name"] if query.owner is not None else ["owner", "name"],
        "name": ["name"] if query.owner is not None else ["name", "owner"],
        "public_id": ["public_id"],
        # (owner, name) is unique: it breaks ties, and any key's row says where it stands.
        "created": ["created_at", "owner", "name"],
        "last_used": ["last_used_at", "owner", "name"],  # never used counts as the oldest
    }[query.sort]


def _order(query: KeyQuery, *, reverse: bool) -> list[Any]:
    terms = []
    for name in _sort_columns(query):
        column = _KEY_TABLE.c[name]
        term = column.desc() if reverse else column.asc()
        if name == "last_used_at":  # the same place on SQLite and PostgreSQL
            term = term.nulls_last() if reverse else term.nulls_first()
        terms.append(term)
    return terms


def _values(key: KeyInfo) -> dict[str, Any]:
    return {
        "owner": key.owner,
        "name": key.name,
        "public_id": key.public_id,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
    }


def _before(query: KeyQuery, values: Mapping[str, Any], *, reverse: bool | None = None) -> Any:
    """Rows that come before a row with these values in query's order (reverse: after it)."""
    names = _sort_columns(query)
    backwards = query.reverse if reverse is None else reverse
    alternatives = []
    for i, name in enumerate(names):
        equal = [_equal(n, values[n]) for n in names[:i]]
        alternatives.append(and_(*equal, _less(name, values[name], backwards)))
    first, value = _KEY_TABLE.c[names[0]], values[names[0]]
    if value is None:
        return or_(*alternatives)
    # Implied by the alternatives, but spelled out so that the planner seeks in the index of
    # the order's first column instead of scanning it.
    bound = first >= value if backwards else first <= value
    if names[0] == "last_used_at" and not backwards:
        bound = or_(first.is_(None), bound)
    return and_(bound, or_(*alternatives))


def _equal(name: str, value: Any) -> Any:
    column = _KEY_TABLE.c[name]
    return column.is_(None) if value is None else column == value


def _less(name: str, value: Any, reverse: bool) -> Any:
    """Strictly before value in this column's direction (never used is the oldest last use)."""
    column = _KEY_TABLE.c[name]
    if name != "last_used_at":
        return column > value if reverse else column < value
    if not reverse:  # NULL first, then rising
        return false() if value is None else or_(column.is_(None), column < value)
    return column.is_not(None) if value is None else column > value  # falling, NULL last


@dataclass(frozen=True)
class KeyDetail:
    """One key, who created or last recreated it (that event), and its events, newest first."""

    info: KeyInfo
    origin: Event | None
    events: tuple[Event, ...]


POLICY_KEY = "max_lifetime_seconds"  # the lifetime policy's row in apikey_tui_meta

Deliver = Callable[[CreatedKey], None]
"""Hands a new key's secret over (the CLI writes it to stdout) inside the transaction that makes
it, before the commit. If it raises, the transaction is rolled back: a secret nobody received
leaves no key, and a recreate or rotation leaves the key as it was. The audit trail records only
what was committed, so such an attempt leaves no event. Should the commit fail after it, the
secret handed over belongs to no key (the caller says so). It runs while the transaction holds
the key's row lock (on SQLite the database's write lock), so it must be quick: a short write."""


def _second(moment: datetime) -> datetime:
    """Expiries and graces fall on whole seconds (earlier, never later)."""
    return moment.replace(microsecond=0)


def _when(moment: datetime) -> str:
    return format_moment(moment)


def _expiry_note(expires_at: datetime | None) -> str:
    return f"; expires {_when(expires_at)}" if expires_at is not None else ""


def _in_grace(old_public_id: str | None, grace_until: datetime | None, now: datetime) -> bool:
    """Whether a rotation's previous secret still works: up to, not at, grace_until."""
    return old_public_id is not None and grace_until is not None and now < grace_until


def _breaks(created_at: datetime, expires_at: datetime | None, maximum: timedelta) -> bool:
    """Whether a key's lifetime (creation or last rotation to expiry) exceeds the maximum."""
    return expires_at is None or expires_at - created_at > maximum


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


_KEY, _SCOPE = KeyRow.__table__, KeyScopeRow.__table__  # type: ignore[attr-defined]
# Built once: on SQLite, building a select() costs more than running it.
_CREDENTIAL = (
    sa_select(
        _KEY.c.public_id,
        _KEY.c.owner,
        _KEY.c.name,
        _KEY.c.secret_hash,
        _KEY.c.fingerprint,
        _KEY.c.created_at,
        _KEY.c.last_used_at,
        _KEY.c.expires_at,
        _KEY.c.disabled_at,
        _KEY.c.old_public_id,
        _KEY.c.old_secret_hash,
        _KEY.c.old_fingerprint,
        _KEY.c.grace_until,
        _SCOPE.c.scope,
    )
    .select_from(_KEY.outerjoin(_SCOPE, _SCOPE.c.key_id == _KEY.c.id))
    .where(or_(_KEY.c.public_id == bindparam("pid"), _KEY.c.old_public_id == bindparam("pid")))
    .order_by(_SCOPE.c.scope)
)


class KeyStore:
    """The one place that reads and writes keys, scopes and events in the database."""

    def __init__(
        self,
        engine: Engine,
        *,
        hasher: SecretHasher | None = None,
        actor: Actor | None = None,
        clock: Clock = system_clock,
    ) -> None:
        self.engine = engine
        self._write_engine = engine.execution_options(**WRITE)
        self.hasher = hasher or SecretHasher()
        self.actor = actor or Actor.current()
        # Every timestamp the store writes, and every expiry and grace decision, reads this
        # clock (timezone-aware UTC); tests pass a fake one.
        self.clock = clock
        self._key_indexes: bool | None = None  # found on the first filtered read
        self._reads = change_log.ReusedConnections(engine)  # the verifier's hot reads

    @classmethod
    def open(
        cls,
        url: str,
        *,
        hasher: SecretHasher | None = None,
        actor: Actor | None = None,
        create: bool = True,
        clock: Clock = system_clock,
    ) -> KeyStore:
        """Connect to the database at url, creating or checking its schema."""
        engine = make_engine(url)
        try:
            ensure_schema(engine, create=create)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, hasher=hasher, actor=actor, clock=clock)

    @property
    def label(self) -> str:
        """The database URL with its password masked, for headers and messages."""
        return mask_url(str(self.engine.url))

    def close(self) -> None:
        """Release the store's database connections."""
        self._reads.close()
        self.engine.dispose()

    @contextmanager
    def _session(self, *, write: bool = False) -> Iterator[Session]:
        with (
            database_errors(self.engine),
            Session(self._write_engine if write else self.engine, expire_on_commit=False) as s,
        ):
            yield s

    # --- keys -------------------------------------------------------------------------------

    def create_key(
        self,
        owner: str,
        name: str,
        scopes: Iterable[str],
        *,
        expires: Expiry | None = None,
        deliver: Deliver | None = None,
    ) -> CreatedKey:
        """Create a key; return it with its plaintext, which is shown once and never stored.

        expires: a span from now, a moment, or NEVER; None means the default, which is the
        lifetime policy's maximum when one is set and no expiry otherwise. An expiry past the
        policy's maximum (NEVER included) is refused, never shortened (`_expiry`).
        deliver: hands the new key over before the commit (see Deliver); if it raises, the key
        was never created.
        """
        check_owner(owner)
        check_key_name(name)
        wanted = self._wanted_scopes(scopes)
        parts, plaintext = keyformat.generate()
        # Hash before the transaction: argon2 work must not hold the database's write lock.
        secret_hash = self.hasher.hash(parts.secret)
        now = self.clock()
        row = KeyRow(
            owner=owner,
            name=name,
            public_id=parts.public_id,
            secret_hash=secret_hash,
            fingerprint=fingerprint(parts.public_id, parts.secret),
            created_at=now,
        )
        with self._session(write=True) as session:
            self._check_catalog(session, wanted)
            row.expires_at = self._expiry(session, expires, start=now, now=now)
            session.add(row)
            try:
                session.flush()
                assert row.id is not None
                session.add_all(KeyScopeRow(key_id=row.id, scope=s) for s in wanted)
                info = self._info(row, wanted)
                detail = f"scopes: {' '.join(wanted)}" + _expiry_note(row.expires_at)
                self._record(session, "key.create", info, detail=detail)
                if deliver is not None:
                    deliver(CreatedKey(info, plaintext))
                session.commit()
            except IntegrityError as exc:
                session.rollback()
                raise self._integrity(exc, owner, name, wanted) from None
        return CreatedKey(info, plaintext)

    def _integrity(
        self, exc: IntegrityError, owner: str, name: str, wanted: tuple[str, ...]
    ) -> Exception:
        # A foreign key failure means a scope was removed from the catalog meanwhile.
        if "foreign key" in str(exc.orig).lower():
            return UnknownScopeError(list(wanted), [s.name for s in self.list_scopes()])
        return DuplicateKeyNameError(owner, name)

    def _wanted_scopes(self, scopes: Iterable[str]) -> tuple[str, ...]:
        wanted = parse_scopes(scopes)
        if not wanted:
            raise InvalidInputError("a key needs at least one scope")
        return wanted

    def _check_catalog(self, session: Session, wanted: tuple[str, ...]) -> None:
        known = list(session.exec(select(ScopeRow.name).order_by(ScopeRow.name)))
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise UnknownScopeError(unknown, known)

    def list_keys(
        self,
        owner: str | None = None,
        text: str = "",
        *,
        limit: int | None = None,
        expiring_within: timedelta | None = None,
        unused_for: timedelta | None = None,
        violating_policy: bool = False,
    ) -> list[KeyInfo]:
        """List keys of one owner (or all owners), whose owner, name or public id contains text.

        expiring_within: only keys not yet expired that expire within this span from now.
        unused_for: only keys not used for this long (a key never used counts from its creation
        or last rotation). violating_policy: only keys whose lifetime breaks the lifetime
        policy (none when no policy is set).
        """
        now = self.clock()
        conditions: list[Any] = []
        if expiring_within is not None:
            expires = col(KeyRow.expires_at)
            conditions += [expires > now, expires <= now + check_span(expiring_within, "span")]
        if unused_for is not None:
            since = func.coalesce(col(KeyRow.last_used_at), col(KeyRow.created_at))
            conditions.append(since <= now - check_span(unused_for, "span"))
        if owner is not None:
            conditions.append(KeyRow.owner == owner)
        if text:
            pattern = _like(text.lower())
            conditions.append(
                or_(
                    *(
                        func.lower(c).like(pattern, escape="\\")
                        for c in (col(KeyRow.name), col(KeyRow.public_id), col(KeyRow.owner))
                    )
                )
            )
        ordered = select(col(KeyRow.id)).where(*conditions).order_by(KeyRow.owner, KeyRow.name)
        policy: timedelta | None = None
        if violating_policy:
            policy = self.lifetime_policy()
            if policy is None:
                return []
        wanted = ordered.limit(limit) if limit is not None and policy is None else ordered
        # Plain columns, not ORM objects, and all scopes in one query: 100,000 keys load in
        # about a second instead of three.
        with self._session() as session:
            rows = session.execute(
                sa_select(  # sqlmodel's select stops at four columns
                    col(KeyRow.id),
                    col(KeyRow.owner),
                    col(KeyRow.name),
                    col(KeyRow.public_id),
                    col(KeyRow.created_at),
                    col(KeyRow.last_used_at),
                    col(KeyRow.expires_at),
                    col(KeyRow.disabled_at),
                    col(KeyRow.disabled_reason),
                    col(KeyRow.old_public_id),
                    col(KeyRow.grace_until),
                )
                .where(col(KeyRow.id).in_(wanted))
                .order_by(KeyRow.owner, KeyRow.name)
            ).all()
            scopes: dict[int | None, list[str]] = {}
            for key_id, scope in session.exec(
                select(KeyScopeRow.key_id, KeyScopeRow.scope)
                .where(col(KeyScopeRow.key_id).in_(wanted))
                .order_by(KeyScopeRow.scope)
            ):
                scopes.setdefault(key_id, []).append(scope)
        keys = [
            KeyInfo(
                r.owner,
                r.name,
                r.public_id,
                tuple(scopes.get(r.id, ())),
                r.created_at,
                r.last_used_at,
                expires_at=r.expires_at,
                disabled_at=r.disabled_at,
                disabled_reason=r.disabled_reason,
                old_public_id=r.old_public_id
                if _in_grace(r.old_public_id, r.grace_until, now)
                else None,
                grace_until=r.grace_until
                if _in_grace(r.old_public_id, r.grace_until, now)
                else None,
            )
            for r in rows
        ]
        if policy is not None:
            keys = [k for k in keys if _breaks(k.created_at, k.expires_at, policy)][:limit]
        return keys

    # --- the table's window: sorted and filtered in the database -------------------------------

    def count_keys(self, query: KeyQuery, *, cancelled: Cancel | None = None) -> int:
        """How many keys match query (for the scrollbar and the status line)."""
        key = _KEY_TABLE
        with self._reading(cancelled) as conn:
            statement = sa_select(func.count()).select_from(key).where(*self._matching(conn, query))
            return int(conn.execute(statement).scalar_one())

    def key_window(
        self,
        query: KeyQuery,
        offset: int,
        limit: int,
        *,
        total: int | None = None,
        after: KeyInfo | None = None,
        before: KeyInfo | None = None,
        cancelled: Cancel | None = None,
    ) -> list[KeyInfo]:
        """Keys offset … offset + limit - 1 of query's order, scopes included.

        Only these rows are read: at a million keys the first screen costs a millisecond when
        an index gives the order. Given total, a window in the far half is read from the other
        end (OFFSET walks the rows it skips), so the last page costs as little as the first.
        Given the key just before the window (after=) or just after it (before=), offset is
        ignored and the window starts from that key through the index (keyset paging): the
        cost of scrolling does not grow with the depth.
        """
        offset, limit = max(offset, 0), max(limit, 0)
        flipped = before is not None or (
            after is None and total is not None and offset > total // 2
        )
        anchor: list[Any] = []
        if after is not None:
            offset, anchor = 0, [_before(query, _values(after), reverse=not query.reverse)]
        elif before is not None:
            offset, anchor = 0, [_before(query, _values(before))]
        elif flipped:
            assert total is not None
            end = min(offset + limit, total)
            offset, limit = total - end, max(end - offset, 0)
        key = _KEY_TABLE
        hint = bool(anchor) or (total is not None and total > 5000)
        with self._reading(cancelled) as conn:
            statement = (
                sa_select(
                    key.c.id,
                    key.c.owner,
                    key.c.name,
                    key.c.public_id,
                    key.c.created_at,
                    key.c.last_used_at,
                    key.c.expires_at,
                    key.c.disabled_at,
                    key.c.disabled_reason,
                    key.c.old_public_id,
                    key.c.grace_until,
                )
                .where(*self._matching(conn, query, hint_order=hint), *anchor)
                .order_by(*_order(query, reverse=query.reverse != flipped))
                .offset(offset)
                .limit(limit)
            )
            rows = list(conn.execute(statement).all())
            if flipped:
                rows.reverse()
            scopes: dict[int, list[str]] = {}
            if rows:
                scope = _SCOPE_TABLE
                for key_id, name in conn.execute(
                    sa_select(scope.c.key_id, scope.c.scope)
                    .where(scope.c.key_id.in_([r.id for r in rows]))
                    .order_by(scope.c.key_id, scope.c.scope)
                ):
                    scopes.setdefault(key_id, []).append(name)
        now = self.clock()
        return [
            KeyInfo(r.owner, r.name, r.public_id, tuple(scopes.get(r.id, ())), r.created_at,
                    r.last_used_at, expires_at=r.expires_at, disabled_at=r.disabled_at,
                    disabled_reason=r.disabled_reason,
                    # a previous secret shows only while its grace runs (store clock)
                    old_public_id=r.old_public_id if _in_grace(
                        r.old_public_id, r.grace_until, now) else None,
                    grace_until=r.grace_until if _in_grace(
                        r.old_public_id, r.grace_until, now) else None)
            for r in rows
        ]  # fmt: skip

    def key_position(
        self, query: KeyQuery, owner: str, name: str, *, cancelled: Cancel | None = None
    ) -> int | None:
        """Where the key (owner, name) stands in query's order, or None if it does not match.

        One count of the keys before it (an index range where the order has an index), so a
        selection can follow its key through a reload without reading the rows before it.
        """
        key = _KEY_TABLE
        with self._reading(cancelled) as conn:
            matching = self._matching(conn, query)
            found = conn.execute(
                sa_select(key.c.id, key.c.public_id, key.c.created_at, key.c.last_used_at).where(
                    key.c.owner == owner, key.c.name == name, *matching
                )
            ).first()
            if found is None:
                return None
            values = {
                "owner": owner,
                "name": name,
                "public_id": found.public_id,
                "created_at": found.created_at,
                "last_used_at": found.last_used_at,
            }
            before = _before(query, values)
            statement = sa_select(func.count()).select_from(key).where(*matching, before)
            return int(conn.execute(statement).scalar_one())

    def _matching(
        self, conn: Connection, query: KeyQuery, *, hint_order: bool = False
    ) -> list[Any]:
        """WHERE terms: the owner, and the text in owner, name, public id or a scope's name."""
        key, sqlite = _KEY_TABLE, self.engine.dialect.name == "sqlite"
        terms: list[Any] = []
        # SQLite keeps no statistics unless ANALYZE ran, so it takes any owner for a handful of
        # keys and reads through the owner index; a unary + keeps it off that index where a
        # better path exists (the order's own index, or the trigram candidates below).
        owner_unindexed = sqlite and hint_order and query.sort not in ("owner", "name")
        needle = query.text.strip()
        if "\x00" in needle:
            # No owner, name, id or scope holds a NUL; PostgreSQL and FTS5 refuse one outright.
            return [false()]
        if needle and not (query.owner and needle.lower() in query.owner.lower()):
            pattern = _like(needle)

            # Names, owners, ids and scopes are ASCII; SQLite's LIKE ignores ASCII case already,
            # and lower() around every column would double the cost of a scan.
            def contains(column: Any) -> Any:
                if sqlite:
                    return column.like(pattern, escape="\\")
                if len(needle) < key_indexes.SHORTEST:
                    # pg_trgm can take text this short only by reading its whole index (half a
                    # second at a million keys); lower() keeps the planner off that index.
                    return func.lower(column).like(pattern.lower(), escape="\\")
                return column.ilike(pattern, escape="\\")

            found = [contains(key.c.name), contains(key.c.public_id)]
            if query.owner is None:
                found.append(contains(key.c.owner))
            scope_names = [s.name for s in self.list_scopes() if needle.lower() in s.name]
            if scope_names:
                scope = _SCOPE_TABLE
                found.append(
                    sa_select(scope.c.key_id)
                    .where(scope.c.key_id == key.c.id, scope.c.scope.in_(scope_names))
                    .exists()
                )
            terms.append(or_(*found))
            if sqlite and self._searchable(conn):
                # SQLite cannot serve LIKE '%text%' from an index, so a rare text would scan
                # every key; the trigram table names the few keys that may match, and the
                # exact terms above still decide. Common text scans: the first rows come fast.
                ids = key_indexes.candidate_ids(conn, needle, scope_names, SPARSE)
                if ids is not None:
                    terms.append(key.c.id.in_(ids))
                    owner_unindexed = True  # read the few ids, not the owner's every key
        # (A text inside the owner's name matches every key of theirs: the owner term alone.)
        if query.owner is not None:
            if owner_unindexed:
                terms.append(literal_column(f"+{key.name}.owner") == query.owner)
            else:
                terms.append(key.c.owner == query.owner)
        return terms

    def _searchable(self, conn: Connection) -> bool:
        """Whether the database has the trigram index (asked once per store)."""
        if self._key_indexes is None:
            self._key_indexes = key_indexes.present(conn)
        return self._key_indexes

    @contextmanager
    def _reading(self, cancelled: Cancel | None) -> Iterator[Connection]:
        """A read connection; on SQLite a query stops within milliseconds once cancelled()."""
        try:
            with database_errors(self.engine), self.engine.connect() as conn:
                raw = conn.connection.driver_connection
                if cancelled is None or not isinstance(raw, sqlite3.Connection):
                    yield conn
                    return
                # every million SQLite instructions (a few milliseconds): more often, the
                # callback's fight for the GIL would slow the event loop down
                raw.set_progress_handler(lambda: 1 if cancelled() else 0, 1_000_000)
                try:
                    yield conn
                finally:
                    raw.set_progress_handler(None, 0)
        except StoreUnavailableError:
            if cancelled is not None and cancelled():
                raise QueryCancelled from None
            raise

    def _read_info(self, session: Session, row: KeyRow) -> KeyInfo:
        """The key of a row, with its scopes read in the same transaction."""
        scopes = session.exec(
            select(KeyScopeRow.scope)
            .where(KeyScopeRow.key_id == row.id)
            .order_by(KeyScopeRow.scope)
        )
        return self._info(row, scopes)

    def _info(self, row: KeyRow, scopes: Iterable[str]) -> KeyInfo:
        """The key of a row; a previous secret shows only while its grace runs (store clock)."""
        grace = _in_grace(row.old_public_id, row.grace_until, self.clock())
        return KeyInfo(
            row.owner,
            row.name,
            row.public_id,
            tuple(scopes),
            row.created_at,
            row.last_used_at,
            expires_at=row.expires_at,
            disabled_at=row.disabled_at,
            disabled_reason=row.disabled_reason,
            old_public_id=row.old_public_id if grace else None,
            grace_until=row.grace_until if grace else None,
        )

    def _row(
        self,
        session: Session,
        owner: str,
        name: str,
        *,
        lock: bool = False,
        expected_public_id: str | None = None,
    ) -> KeyRow:
        query = select(KeyRow).where(KeyRow.owner == owner, KeyRow.name == name)
        row = session.exec(query.with_for_update() if lock else query).first()
        if row is None:
            raise KeyNotFoundError(owner, name)
        if expected_public_id is not None and row.public_id != expected_public_id:
            raise KeyChangedError(owner, name)
        return row

    def get_key(self, owner: str, name: str) -> KeyInfo:
        """Return one key of an owner by name."""
        with self._session() as session:
            row = self._row(session, owner, name)
            return self._read_info(session, row)

    def delete_key(
        self, owner: str, name: str, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Delete a key: from the commit on, no verifier accepts it.

        With expected_public_id, refuse (KeyChangedError) if the key was recreated since the
        caller read it: a confirmation names one key, and only that one may be deleted.
        """
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            info = self._read_info(session, row)
            session.delete(row)  # the key's scope rows go with it (ON DELETE CASCADE)
            self._record(session, "key.delete", info)
            session.commit()
        return info

    def recreate_key(
        self,
        owner: str,
        name: str,
        *,
        expected_public_id: str | None = None,
        deliver: Deliver | None = None,
    ) -> CreatedKey:
        """Replace a stolen key's id and secret in one transaction; same owner, name, scopes.

        The old secret stops at once (a rotation without grace, recorded as key.recreate).
        With expected_public_id, refuse (KeyChangedError) if the key was recreated meanwhile.
        deliver: as for create_key; if it raises, the key stays as it was.
        """
        return self._rotate(
            owner, name, timedelta(0), None, expected_public_id, deliver, action="key.recreate"
        )

    def rotate_key(
        self,
        owner: str,
        name: str,
        *,
        grace: timedelta,
        expires: Expiry | None = None,
        expected_public_id: str | None = None,
        deliver: Deliver | None = None,
    ) -> CreatedKey:
        """Give a key a new public id and secret; the previous secret works until now + grace.

        Same owner, name and scopes; both secrets are the same key, so a scope change, a
        disable or an expiry applies to both. The previous secret never outlives the key's
        expiry as it was, and a grace of 0 stops it at once (like recreate_key). Rotating during
        a grace ends that grace: the secret before the previous one stops at once.

        The new secret's expiry: expires if given (held to the policy like create_key's), else
        the lifetime the key had (expires_at - created_at) from now, at most the policy's
        maximum; a key that never expired keeps none unless a policy holds it.
        deliver: as for create_key; if it raises, the key stays as it was, old secret and all.
        """
        return self._rotate(
            owner, name, grace, expires, expected_public_id, deliver, action="key.rotate"
        )

    def _rotate(
        self,
        owner: str,
        name: str,
        grace: timedelta,
        expires: Expiry | None,
        expected_public_id: str | None,
        deliver: Deliver | None,
        *,
        action: str,
    ) -> CreatedKey:
        if grace < timedelta(0):
            raise InvalidInputError("a grace period cannot be negative")
        check_span(grace, "grace")
        parts, plaintext = keyformat.generate()
        # Hash before the transaction: argon2 work must not hold the database's write lock.
        secret_hash = self.hasher.hash(parts.secret)
        secret_fingerprint = fingerprint(parts.public_id, parts.secret)
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            now = self.clock()
            replaced = (row.public_id, row.old_public_id)  # both stop or change: log them
            notes = [f"replaces {row.public_id}"]
            if _in_grace(row.old_public_id, row.grace_until, now):
                notes.append(f"ends the grace of {row.old_public_id} now")
            lifetime = row.expires_at - row.created_at if row.expires_at is not None else None
            new_expiry = self._expiry(session, expires, start=now, now=now, inherited=lifetime)
            until = _second(now + grace)
            if row.expires_at is not None:
                until = min(until, row.expires_at)  # a grace never revives an expired secret
            leaked = row.disabled_reason is not None and row.disabled_reason.startswith(LEAK_REASON)
            if leaked:  # a leaked secret gets no grace: enabled later, it would work again
                until = now
                notes.append("no grace: the key leaked")
            if until > now:
                row.old_public_id, row.old_secret_hash = row.public_id, row.secret_hash
                row.old_fingerprint, row.grace_until = row.fingerprint, until
                notes[0] += f", which works until {_when(until)}"
            else:
                row.old_public_id = row.old_secret_hash = row.old_fingerprint = None
                row.grace_until = None
                notes[0] += " at once" if action == "key.rotate" else ""
            row.public_id, row.secret_hash = parts.public_id, secret_hash
            row.fingerprint = secret_fingerprint
            row.created_at, row.last_used_at = now, None
            row.expires_at = new_expiry
            session.add(row)
            info = self._read_info(session, row)
            detail = "; ".join(notes) + _expiry_note(new_expiry)
            self._record(session, action, info, detail=detail, also=[i for i in replaced if i])
            created = CreatedKey(info, plaintext)
            if deliver is not None:
                deliver(created)
            session.commit()
        return created

    def end_grace(self, owner: str, name: str, *, expected_public_id: str | None = None) -> KeyInfo:
        """Stop a rotated key's previous secret now; refused (KeyStateError) when none works."""
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            previous = row.old_public_id
            if not _in_grace(previous, row.grace_until, self.clock()):
                raise KeyStateError(
                    f"key {name!r} of {owner} has no previous secret in grace; nothing was done"
                )
            row.old_public_id = row.old_secret_hash = row.old_fingerprint = None
            row.grace_until = None
            session.add(row)
            info = self._read_info(session, row)
            self._record(
                session,
                "key.end-grace",
                info,
                detail=f"{previous} stopped working",
                also=[previous] if previous else [],
            )
            session.commit()
        return info

    def set_expiry(
        self, owner: str, name: str, expires: Expiry, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Set when a key stops working (a span from now, a moment, or NEVER).

        Held to the lifetime policy counted from the key's creation or last rotation: to
        extend a key past that, rotate it. A moment not in the future is refused; to stop a key
        now, disable or delete it.
        """
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            now = self.clock()
            row.expires_at = self._expiry(session, expires, start=row.created_at, now=now)
            session.add(row)
            info = self._read_info(session, row)
            detail = _expiry_note(row.expires_at).removeprefix("; ") or "never expires"
            self._record(session, "key.expire-set", info, detail=detail)
            session.commit()
        return info

    def disable_key(
        self, owner: str, name: str, reason: str = "", *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Switch a key off, reversibly: both secrets are refused; name, scopes, history stay."""
        check_reason(reason)
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            if row.disabled_at is not None:
                raise KeyStateError(
                    f"key {name!r} of {owner} is already disabled (since "
                    f"{_when(row.disabled_at)}); nothing was done"
                )
            row.disabled_at, row.disabled_reason = self.clock(), reason or None
            session.add(row)
            info = self._read_info(session, row)
            self._record(session, "key.disable", info, detail=reason)
            session.commit()
        return info

    def enable_key(
        self, owner: str, name: str, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Switch a disabled key on again (an expired key stays expired)."""
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            if row.disabled_at is None:
                raise KeyStateError(f"key {name!r} of {owner} is not disabled; nothing was done")
            since = row.disabled_at
            row.disabled_at = row.disabled_reason = None
            session.add(row)
            info = self._read_info(session, row)
            self._record(session, "key.enable", info, detail=f"disabled since {_when(since)}")
            session.commit()
        return info

    # --- the lifetime policy ----------------------------------------------------------------------

    def lifetime_policy(self) -> timedelta | None:
        """The maximum lifetime of new keys, or None when no policy is set."""
        with self._session() as session:
            return self._policy(session)

    def set_lifetime_policy(self, maximum: timedelta | None) -> list[KeyInfo]:
        """Hold new keys to a maximum lifetime (None: no policy); return the keys that break it.

        Existing keys are never changed: those that break the new policy are only listed (here
        and by list_keys(violating_policy=True)), for an admin to rotate or re-expire.
        """
        if maximum is not None and maximum <= timedelta(0):
            raise InvalidInputError("a maximum lifetime must be longer than 0")
        if maximum is not None:
            check_span(maximum, "maximum lifetime")
        with self._session(write=True) as session:
            row = session.get(SchemaInfo, POLICY_KEY)
            if maximum is None:
                if row is not None:
                    session.delete(row)
            else:
                seconds = str(int(maximum.total_seconds()))
                if row is None:
                    row = SchemaInfo(key=POLICY_KEY, value=seconds)
                row.value = seconds
                session.add(row)
            violators = self._violators(session, maximum)
            detail = f"max-lifetime {format_duration(maximum) if maximum else 'none'}"
            if violators:
                detail += f"; {violators} existing key(s) break it"
            self._record(session, "policy.set", detail=detail)
            session.commit()
        return self.list_keys(violating_policy=True)

    @staticmethod
    def _policy(session: Session) -> timedelta | None:
        row = session.get(SchemaInfo, POLICY_KEY)
        if row is None:
            return None
        try:
            seconds = int(row.value)
        except ValueError:
            seconds = 0
        if seconds <= 0:  # raw SQL: a limit we cannot read is no limit we may assume
            raise DatabaseCorruptError(
                f"the stored max-lifetime policy {row.value[:30]!a} is not a positive number of "
                "seconds; set it again: apikey-tui policy set max-lifetime DURATION|none"
            )
        # One beyond the bound (raw SQL, past what timedelta holds) counts as the bound.
        return timedelta(seconds=min(seconds, int(DURATION_MAX.total_seconds())))

    @staticmethod
    def _violators(session: Session, maximum: timedelta | None) -> int:
        if maximum is None:
            return 0
        rows = session.execute(sa_select(col(KeyRow.created_at), col(KeyRow.expires_at))).all()
        return sum(1 for created, expires in rows if _breaks(created, expires, maximum))

    def _expiry(
        self,
        session: Session,
        expires: Expiry | None,
        *,
        start: datetime,
        now: datetime,
        inherited: timedelta | None = None,
    ) -> datetime | None:
        """The expiry a key gets, on whole seconds; refused rather than shortened.

        expires None asks for the default: the inherited lifetime (a rotation's) or none, either
        capped at the policy's maximum. An explicit request past the maximum, counted from
        start (the key's creation or last rotation), is refused with LifetimePolicyError:
        an admin who asked for a year must not silently get a month.
        """
        policy = self._policy(session)
        if expires is None:
            spans = [span for span in (inherited, policy) if span is not None]
            # An inherited lifetime beyond the bound (an expiry stored by raw SQL or an older
            # release, such as 9999-12-31) counts as the bound: rotating must never overflow.
            return _second(now + min(*spans, DURATION_MAX)) if spans else None
        allowed = f"the lifetime policy allows at most {format_duration(policy)}" if policy else ""
        if expires == NEVER:
            if policy is not None:
                raise LifetimePolicyError(f"a key that never expires is refused: {allowed}")
            return None
        if isinstance(expires, timedelta):
            expires = now + check_span(expires, "expiry")
        moment = check_expiry(_second(expires), now)
        if moment <= now:
            raise InvalidInputError(f"expiry {_when(moment)} is not in the future")
        if policy is not None and moment - start > policy:
            raise LifetimePolicyError(
                f"expiry {_when(moment)} is refused: {allowed}, until {_when(start + policy)}"
            )
        return moment

    def set_key_scopes(
        self,
        owner: str,
        name: str,
        scopes: Iterable[str],
        *,
        expected_public_id: str | None = None,
    ) -> KeyInfo:
        """Replace the scopes a key holds; verifiers see the change like a deletion.

        With expected_public_id, refuse (KeyChangedError) if the key was recreated meanwhile.
        """
        wanted = self._wanted_scopes(scopes)
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            self._check_catalog(session, wanted)
            assert row.id is not None
            session.exec(delete(KeyScopeRow).where(col(KeyScopeRow.key_id) == row.id))
            session.add_all(KeyScopeRow(key_id=row.id, scope=s) for s in wanted)
            info = self._info(row, wanted)
            self._record(session, "key.rescope", info, detail=f"scopes: {' '.join(wanted)}")
            try:
                session.commit()
            except IntegrityError as exc:
                raise self._integrity(exc, owner, name, wanted) from None
        return info

    def change_marker(self) -> tuple[int, datetime | None]:
        """A cheap value that changes whenever keys change (newest event) or are used."""
        with self._session() as session:
            newest = session.exec(select(func.max(EventRow.id))).one()
            used = session.exec(select(func.max(KeyRow.last_used_at))).one()
        return (newest or 0, used)

    # --- the verifier's view ------------------------------------------------------------------

    def credential(self, public_id: str) -> Credential | None:
        """Return the key with this public id, its hash and fingerprint, or None.

        public_id may be a key's current id or a rotated key's previous id while its grace runs
        (by the store's clock; after it, None). Expired and disabled keys are returned, marked
        (expires_at, disabled), for the verifier to refuse. One SELECT joining the scopes: a
        cold check costs one round trip.
        """
        with self._reads.connection() as conn:
            rows = conn.execute(_CREDENTIAL, {"pid": public_id}).all()
        if not rows:
            return None
        r = rows[0]
        scopes = tuple(row.scope for row in rows if row.scope is not None)
        now = self.clock()
        grace = _in_grace(r.old_public_id, r.grace_until, now)
        info = KeyInfo(
            r.owner,
            r.name,
            public_id,
            scopes,
            r.created_at,
            r.last_used_at,
            expires_at=r.expires_at,
            disabled_at=r.disabled_at,
            old_public_id=r.old_public_id if grace else None,
            grace_until=r.grace_until if grace else None,
        )
        disabled = r.disabled_at is not None
        if r.public_id == public_id:
            return Credential(info, r.secret_hash, r.fingerprint, r.expires_at, disabled)
        if not grace or r.old_secret_hash is None:
            return None  # the previous secret's grace has ended
        assert r.grace_until is not None
        until = r.grace_until if r.expires_at is None else min(r.expires_at, r.grace_until)
        return Credential(info, r.old_secret_hash, r.old_fingerprint, until, disabled)

    def key_count(self) -> int:
        """How many keys there are (to size the verifier's key index)."""
        with self._reads.connection() as conn:
            return int(conn.execute(change_log.KEY_COUNT).scalar_one())

    def fingerprint_page(self, after: int, limit: int) -> tuple[int, list[tuple[str, str | None]]]:
        """Up to `limit` (public id, fingerprint) of keys after row `after`, and the last row.

        A rotated key's previous id is listed too while its grace runs (store clock); the
        fingerprint is None for keys made before schema version 2. Keyset paging on the
        primary key: each page is one short indexed query, however many keys there are.
        """
        with self._reads.connection() as conn:
            return change_log.page(conn, after, limit, self.clock())

    def log_position(self) -> int:
        """The newest entry's position in the change log."""
        with self._reads.connection() as conn:
            return change_log.position(conn)

    def changes_since(self, seq: int) -> list[tuple[int, str, str | None, bool]] | None:
        """Every change after seq: (seq, public id, its fingerprint now, whether a key has it).

        None when seq's own entry was pruned: the reader fell behind and must drop everything.
        """
        with self._reads.connection() as conn:
            return change_log.since(conn, seq, self.clock())

    def replace_hash(self, public_id: str, old_hash: str, new_hash: str) -> None:
        """Store an upgraded hash, unless the key was recreated or deleted meanwhile."""
        with self._session(write=True) as session:
            session.exec(
                update(KeyRow)
                .where(col(KeyRow.public_id) == public_id, col(KeyRow.secret_hash) == old_hash)
                .values(secret_hash=new_hash)
            )
            session.commit()

    def record_use(self, used: Mapping[str, datetime]) -> None:
        """Move last_used_at forward for the given public ids (never backwards).

        A rotated key's previous id counts as a use of the key.
        """
        if not used:
            return
        table = KeyRow.__table__  # type: ignore[attr-defined]
        statement = (
            update(table)
            .where(
                or_(
                    table.c.public_id == bindparam("pid"), table.c.old_public_id == bindparam("pid")
                ),
                or_(table.c.last_used_at.is_(None), table.c.last_used_at < bindparam("at")),
            )
            .values(last_used_at=bindparam("at"))
        )
        with self._session(write=True) as session:
            # One executemany: a service that used 10,000 keys in a minute writes them at once.
            session.connection().execute(
                statement, [{"pid": pid, "at": at} for pid, at in used.items()]
            )
            session.commit()

    # --- scope catalog ------------------------------------------------------------------------

    def list_scopes(self) -> list[ScopeInfo]:
        """Return the scope catalog, sorted by name."""
        with self._session() as session:
            rows = session.exec(select(ScopeRow).order_by(ScopeRow.name))
            return [ScopeInfo(r.name, r.description) for r in rows]

    def scope_usage(self) -> list[ScopeUsage]:
        """Return the scope catalog, sorted by name, with how many keys hold each scope."""
        holders = func.count(col(KeyScopeRow.key_id))
        query = (
            sa_select(col(ScopeRow.name), col(ScopeRow.description), holders)
            .outerjoin(KeyScopeRow, col(KeyScopeRow.scope) == col(ScopeRow.name))
            .group_by(col(ScopeRow.name), col(ScopeRow.description))
            .order_by(col(ScopeRow.name))
        )
        with self._session() as session:
            return [ScopeUsage(n, d, count) for n, d, count in session.execute(query)]

    def add_scope(self, name: str, description: str = "") -> ScopeInfo:
        """Add a scope to the catalog."""
        check_scope_name(name)
        check_description(description)
        with self._session(write=True) as session:
            session.add(ScopeRow(name=name, description=description))
            self._record(session, "scope.add", scope=name, detail=description)
            try:
                session.commit()
            except IntegrityError:
                raise DuplicateScopeError(name) from None
        return ScopeInfo(name, description)

    def describe_scope(self, name: str, description: str) -> ScopeInfo:
        """Change the description of a catalog scope."""
        check_description(description)
        with self._session(write=True) as session:
            row = session.get(ScopeRow, name)
            if row is None:
                raise ScopeNotFoundError(name)
            row.description = description
            session.add(row)
            self._record(session, "scope.describe", scope=name, detail=description)
            session.commit()
        return ScopeInfo(name, description)

    def remove_scope(self, name: str) -> None:
        """Remove a scope from the catalog; refused while keys hold it."""
        with self._session(write=True) as session:
            if session.get(ScopeRow, name) is None:
                raise ScopeNotFoundError(name)
            holders = session.exec(
                select(KeyRow.owner, KeyRow.name)
                .join(KeyScopeRow, col(KeyScopeRow.key_id) == col(KeyRow.id))
                .where(KeyScopeRow.scope == name)
                .order_by(KeyRow.owner, KeyRow.name)
            ).all()
            if holders:
                raise ScopeInUseError(name, [f"{o}/{n}" for o, n in holders])
            session.exec(delete(ScopeRow).where(col(ScopeRow.name) == name))
            self._record(session, "scope.remove", scope=name)
            try:
                session.commit()
            except IntegrityError:  # a key took the scope meanwhile; the foreign key refused
                raise ScopeInUseError(name, ["a key created meanwhile"]) from None

    # --- events -------------------------------------------------------------------------------

    def _record(
        self,
        session: Session,
        action: str,
        key: KeyInfo | None = None,
        *,
        scope: str | None = None,
        detail: str = "",
        also: Iterable[str] = (),
    ) -> None:
        if key is not None:  # every change to a key, and only those, reaches the change log
            change_log.append(session, [key.public_id, key.old_public_id, *also], self.clock())
        session.add(
            EventRow(
                at=self.clock(),
                action=action,
                owner=key.owner if key else None,
                key_name=key.name if key else None,
                public_id=key.public_id if key else None,
                scope=scope,
                detail=detail,
                actor=self.actor.user,
                actor_address=self.actor.address,
            )
        )
        if self.engine.dialect.name == "postgresql":
            with session.no_autoflush:  # pending rows flush at commit, where callers expect it
                session.execute(sa_select(func.pg_notify(CHANGE_CHANNEL, "")))

    def events(
        self, limit: int = 50, *, key: str = "", actor: str = "", action: str = ""
    ) -> list[Event]:
        """Return the newest events first, optionally only those whose key (owner, name or
        public id), actor or action contains the given text (case-insensitive)."""
        conditions: list[Any] = []
        filters: list[tuple[str, tuple[Any, ...]]] = [
            (key, (EventRow.owner, EventRow.key_name, EventRow.public_id)),
            (actor, (EventRow.actor, EventRow.actor_address)),
            (action, (EventRow.action,)),
        ]
        for text, columns in filters:
            if text.strip():
                pattern = _like(text.strip().lower())
                conditions.append(
                    or_(*(func.lower(col(c)).like(pattern, escape="\\") for c in columns))
                )
        query = select(EventRow).where(*conditions).order_by(col(EventRow.id).desc())
        with self._session() as session:
            return [self._event(r) for r in session.exec(query.limit(limit))]

    @staticmethod
    def _event(r: EventRow) -> Event:
        return Event(
            r.id or 0,
            r.at,
            r.action,
            r.owner,
            r.key_name,
            r.public_id,
            r.scope,
            r.detail,
            r.actor,
            r.actor_address,
        )

    def key_detail(self, owner: str, name: str, limit: int = 100) -> KeyDetail:
        """Return a key, the event that created or last recreated it, and its newest events.

        Events are matched by owner and name, so a key deleted and created again under the same
        name shares its history with the earlier one.
        """
        mine = (EventRow.owner == owner, EventRow.key_name == name)
        newest = col(EventRow.id).desc()
        with self._session() as session:
            info = self._read_info(session, self._row(session, owner, name))
            origin = session.exec(
                select(EventRow)
                .where(
                    *mine, col(EventRow.action).in_(("key.create", "key.recreate", "key.rotate"))
                )
                .order_by(newest)
                .limit(1)
            ).first()
            rows = session.exec(select(EventRow).where(*mine).order_by(newest).limit(limit))
            events = tuple(self._event(r) for r in rows)
        return KeyDetail(info, self._event(origin) if origin else None, events)

    # --- leaks: keys found where they must not be (issue 17) ---------------------------------

    def contain_leak(
        self, credential: Credential, *, source: str, where: str, delete: bool = False
    ) -> Leak | None:
        """Act on a key whose secret the caller proved leaked (it matched credential's hash).

        A live key is disabled (reason `leaked: <where>`) or, with delete, deleted; a disabled
        or expired one is left as it is. Either way a `key.leak` event records the source and
        where, in the same transaction (verifiers hear of it at commit). A rotated key's
        previous secret in grace counts as the key: the whole key is stopped. The key is found
        again by the credential's public id; None when no key holds it any more (deleted,
        recreated, or its grace ended meanwhile): the leaked secret then works nowhere.
        """
        if source not in LEAK_SOURCES:
            raise InvalidInputError(f"unknown leak source {source!r}")
        public_id = credential.info.public_id
        key = KeyRow.__table__  # type: ignore[attr-defined]
        with self._session(write=True) as session:
            row = session.exec(
                select(KeyRow)
                .where(or_(key.c.public_id == public_id, key.c.old_public_id == public_id))
                .with_for_update()
            ).first()
            if row is None:
                return None
            # Public ids are never reused, so an id still naming this row means the same
            # secret; the stored hash may differ (a verifier re-hashed it) and does not matter.
            now = self.clock()
            until = row.expires_at
            if row.public_id != public_id:
                if not _in_grace(row.old_public_id, row.grace_until, now):
                    return None
                assert row.grace_until is not None
                until = row.grace_until if until is None else min(until, row.grace_until)
            live = row.disabled_at is None and (until is None or now < until)
            info = self._read_info(session, row)
            outcome = ("deleted" if delete else "disabled") if live else "recorded"
            if outcome == "deleted":
                session.delete(row)
            elif outcome == "disabled":
                row.disabled_at, row.disabled_reason = now, leak_reason(where)
                session.add(row)
                info = self._read_info(session, row)
            leak = Leak(now, source, outcome, printable(where), info.owner, info.name, public_id)
            self._record(
                session,
                LEAK_EVENT,
                replace(info, public_id=public_id),
                detail=leak.detail,
                also=[info.public_id],
            )
            session.commit()
        return leak

    def leaks(self, owner: str, name: str, limit: int = 20) -> list[Leak]:
        """Where and when a key was found leaked (its key.leak events), newest first.

        Matched by owner and name, like key_detail: a key recreated after a leak keeps the
        history of the leak that made its admin recreate it.
        """
        with self._session() as session:
            rows = session.exec(
                select(EventRow)
                .where(
                    EventRow.owner == owner,
                    EventRow.key_name == name,
                    EventRow.action == LEAK_EVENT,
                )
                .order_by(col(EventRow.id).desc())
                .limit(limit)
            )
            return [Leak.from_event(self._event(r)) for r in rows]

    def issued(self, public_id: str) -> bool:
        """Whether this database ever made a key with this public id (its events name it)."""
        with self._session() as session:
            found = session.exec(
                select(EventRow.id).where(EventRow.public_id == public_id).limit(1)
            ).first()
        return found is not None


# A leak-disabled key is recognisable from stored data alone: its disabled reason starts with
# LEAK_REASON, and each report of it is a LEAK_EVENT whose detail reads
# "<source> <outcome>: <where>" (Leak.detail, Leak.from_event).
LEAK_EVENT = "key.leak"
LEAK_REASON = "leaked: "
LEAK_SOURCES = ("scan", "github", "depsdev", "revoke")
LEAK_OUTCOMES = ("disabled", "deleted", "recorded")
_EVENT_DETAIL_MAX = 400  # EventRow.detail


def leak_reason(where: str) -> str:
    """The disabled reason of a leaked key: 'leaked: <where>', printable, at most 200 chars."""
    reason = LEAK_REASON + printable(where)
    return reason if len(reason) <= DESCRIPTION_MAX else reason[: DESCRIPTION_MAX - 1] + "…"


@dataclass(frozen=True)
class Leak:
    """One report of a leaked key: when, from which source, what was done, and where it was
    found (a URL, `file:line` or `commit:path:line`); public_id is the id that leaked (a
    rotated key's previous id, if that one leaked)."""

    at: datetime
    source: str  # one of LEAK_SOURCES
    outcome: str  # one of LEAK_OUTCOMES: the key was disabled, deleted, or left as it was
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
