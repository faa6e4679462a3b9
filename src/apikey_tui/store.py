"""KeyStore: keys, the scope catalog and the audit trail, in plain frozen values."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
    true,
    update,
)
from sqlalchemy import select as sa_select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, delete, select

from apikey_tui import keyformat
from apikey_tui.config import current_user, mask_url, ssh_client_address
from apikey_tui.db import WRITE, database_errors, ensure_schema, make_engine
from apikey_tui.errors import (
    DuplicateKeyNameError,
    DuplicateScopeError,
    InvalidInputError,
    KeyChangedError,
    KeyNotFoundError,
    ScopeInUseError,
    ScopeNotFoundError,
    StoreUnavailableError,
    UnknownScopeError,
)
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.models import EventRow, KeyRow, KeyScopeRow, ScopeRow
from apikey_tui.names import (
    check_description,
    check_key_name,
    check_owner,
    check_scope_name,
    parse_scopes,
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

    def to_json(self) -> dict[str, Any]:
        """Return the key as a JSON-ready dict."""
        return {
            "owner": self.owner,
            "name": self.name,
            "public_id": self.public_id,
            "scopes": list(self.scopes),
            "created_at": self.created_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
        }


@dataclass(frozen=True)
class CreatedKey:
    """A freshly created or recreated key with its plaintext, which exists only here, once."""

    info: KeyInfo
    plaintext: str = field(repr=False)


@dataclass(frozen=True)
class Credential:
    """A key with its stored argon2id hash and secret fingerprint, for the verifier.

    Neither shows in a repr. fingerprint is None for keys made before schema version 2.
    """

    info: KeyInfo
    secret_hash: str = field(repr=False)
    fingerprint: str | None = field(default=None, repr=False)


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


def _now() -> datetime:
    return datetime.now(UTC)


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class KeyStore:
    """The one place that reads and writes keys, scopes and events in the database."""

    def __init__(
        self, engine: Engine, *, hasher: SecretHasher | None = None, actor: Actor | None = None
    ) -> None:
        self.engine = engine
        self._write_engine = engine.execution_options(**WRITE)
        self.hasher = hasher or SecretHasher()
        self.actor = actor or Actor.current()

    @classmethod
    def open(
        cls,
        url: str,
        *,
        hasher: SecretHasher | None = None,
        actor: Actor | None = None,
        create: bool = True,
    ) -> KeyStore:
        """Connect to the database at url, creating or checking its schema."""
        engine = make_engine(url)
        try:
            ensure_schema(engine, create=create)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, hasher=hasher, actor=actor)

    @property
    def label(self) -> str:
        """The database URL with its password masked, for headers and messages."""
        return mask_url(str(self.engine.url))

    def close(self) -> None:
        """Release the store's database connections."""
        self.engine.dispose()

    @contextmanager
    def _session(self, *, write: bool = False) -> Iterator[Session]:
        with (
            database_errors(self.engine),
            Session(self._write_engine if write else self.engine, expire_on_commit=False) as s,
        ):
            yield s

    # --- keys -------------------------------------------------------------------------------

    def create_key(self, owner: str, name: str, scopes: Iterable[str]) -> CreatedKey:
        """Create a key; return it with its plaintext, which is shown once and never stored."""
        check_owner(owner)
        check_key_name(name)
        wanted = self._wanted_scopes(scopes)
        parts, plaintext = keyformat.generate()
        # Hash before the transaction: argon2 work must not hold the database's write lock.
        secret_hash = self.hasher.hash(parts.secret)
        now = _now()
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
            session.add(row)
            try:
                session.flush()
                assert row.id is not None
                session.add_all(KeyScopeRow(key_id=row.id, scope=s) for s in wanted)
                info = KeyInfo(owner, name, parts.public_id, wanted, now)
                self._record(session, "key.create", info, detail=f"scopes: {' '.join(wanted)}")
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
        self, owner: str | None = None, text: str = "", *, limit: int | None = None
    ) -> list[KeyInfo]:
        """List keys of one owner (or all owners), whose owner, name or public id contains text."""
        conditions: list[Any] = []
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
        wanted = ordered.limit(limit) if limit is not None else ordered
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
        return [
            KeyInfo(owner, name, public_id, tuple(scopes.get(key_id, ())), created, used)
            for key_id, owner, name, public_id, created, used in rows
        ]

    # --- the table's window: sorted and filtered in the database -------------------------------

    def count_keys(self, query: KeyQuery, *, cancelled: Cancel | None = None) -> int:
        """How many keys match query (for the scrollbar and the status line)."""
        key = _KEY_TABLE
        statement = sa_select(func.count()).select_from(key).where(*self._matching(query))
        with self._reading(cancelled) as conn:
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
        statement = (
            sa_select(
                key.c.id,
                key.c.owner,
                key.c.name,
                key.c.public_id,
                key.c.created_at,
                key.c.last_used_at,
            )
            .where(*self._matching(query, hint_order=hint), *anchor)
            .order_by(*_order(query, reverse=query.reverse != flipped))
            .offset(offset)
            .limit(limit)
        )
        with self._reading(cancelled) as conn:
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
        return [
            KeyInfo(r.owner, r.name, r.public_id, tuple(scopes.get(r.id, ())), r.created_at,
                    r.last_used_at)
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
            found = conn.execute(
                sa_select(key.c.id, key.c.public_id, key.c.created_at, key.c.last_used_at).where(
                    key.c.owner == owner, key.c.name == name, *self._matching(query)
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
            statement = (
                sa_select(func.count()).select_from(key).where(*self._matching(query), before)
            )
            return int(conn.execute(statement).scalar_one())

    def _matching(self, query: KeyQuery, *, hint_order: bool = False) -> list[Any]:
        """WHERE terms: the owner, and the text in owner, name, public id or a scope's name."""
        key, sqlite = _KEY_TABLE, self.engine.dialect.name == "sqlite"
        terms: list[Any] = []
        if query.owner is not None:
            if sqlite and hint_order and query.sort not in ("owner", "name"):
                # SQLite keeps no statistics unless ANALYZE ran, so it would read all of a big
                # owner's keys through the owner index and sort them; a unary + stops it from
                # using that index, and the order's own index streams the first rows at once.
                terms.append(literal_column(f"+{key.name}.owner") == query.owner)
            else:
                terms.append(key.c.owner == query.owner)
        needle = query.text.strip()
        if needle:
            pattern = _like(needle)

            # Names, owners, ids and scopes are ASCII; SQLite's LIKE ignores ASCII case already,
            # and lower() around every column would double the cost of a scan.
            def contains(column: Any) -> Any:
                if sqlite:
                    return column.like(pattern, escape="\\")
                return column.ilike(pattern, escape="\\")

            found = [contains(key.c.name), contains(key.c.public_id)]
            if query.owner is None:
                found.append(contains(key.c.owner))
            elif needle.lower() in query.owner.lower():
                found.append(true())
            scope_names = [s.name for s in self.list_scopes() if needle.lower() in s.name]
            if scope_names:
                scope = _SCOPE_TABLE
                found.append(
                    sa_select(scope.c.key_id)
                    .where(scope.c.key_id == key.c.id, scope.c.scope.in_(scope_names))
                    .exists()
                )
            terms.append(or_(*found))
        return terms

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

    @staticmethod
    def _read_info(session: Session, row: KeyRow) -> KeyInfo:
        """The key of a row, with its scopes read in the same transaction."""
        scopes = session.exec(
            select(KeyScopeRow.scope)
            .where(KeyScopeRow.key_id == row.id)
            .order_by(KeyScopeRow.scope)
        )
        return KeyStore._info(row, scopes)

    @staticmethod
    def _info(row: KeyRow, scopes: Iterable[str]) -> KeyInfo:
        return KeyInfo(
            row.owner, row.name, row.public_id, tuple(scopes), row.created_at, row.last_used_at
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
        self, owner: str, name: str, *, expected_public_id: str | None = None
    ) -> CreatedKey:
        """Replace a stolen key's id and secret in one transaction; same owner, name, scopes.

        With expected_public_id, refuse (KeyChangedError) if the key was recreated meanwhile.
        """
        parts, plaintext = keyformat.generate()
        secret_hash = self.hasher.hash(parts.secret)
        secret_fingerprint = fingerprint(parts.public_id, parts.secret)
        now = _now()
        with self._session(write=True) as session:
            row = self._row(session, owner, name, lock=True, expected_public_id=expected_public_id)
            old_public_id = row.public_id
            row.public_id, row.secret_hash = parts.public_id, secret_hash
            row.fingerprint = secret_fingerprint
            row.created_at, row.last_used_at = now, None
            session.add(row)
            info = self._read_info(session, row)
            self._record(session, "key.recreate", info, detail=f"replaces {old_public_id}")
            session.commit()
        return CreatedKey(info, plaintext)

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

        One SELECT joining the scopes: a cold check costs one round trip.
        """
        key, scope = KeyRow.__table__, KeyScopeRow.__table__  # type: ignore[attr-defined]
        query = (
            sa_select(
                key.c.owner,
                key.c.name,
                key.c.secret_hash,
                key.c.fingerprint,
                key.c.created_at,
                key.c.last_used_at,
                scope.c.scope,
            )
            .select_from(key.outerjoin(scope, scope.c.key_id == key.c.id))
            .where(key.c.public_id == public_id)
            .order_by(scope.c.scope)
        )
        with database_errors(self.engine), self.engine.connect() as conn:
            rows = conn.execute(query).all()
        if not rows:
            return None
        owner, name, secret_hash, secret_fingerprint, created, used, _ = rows[0]
        scopes = tuple(row.scope for row in rows if row.scope is not None)
        info = KeyInfo(owner, name, public_id, scopes, created, used)
        return Credential(info, secret_hash, secret_fingerprint)

    def key_fingerprints(
        self, created_since: datetime | None = None
    ) -> list[tuple[str, str | None, datetime]]:
        """(public id, fingerprint, created at) of every key, or of those created since a time.

        One query of plain columns (the created_at index serves the second form); fingerprint
        is None for keys made before schema version 2.
        """
        key = KeyRow.__table__  # type: ignore[attr-defined]
        query = sa_select(key.c.public_id, key.c.fingerprint, key.c.created_at)
        if created_since is not None:
            query = query.where(key.c.created_at >= created_since)
        with database_errors(self.engine), self.engine.connect() as conn:
            return [(public_id, fp, created) for public_id, fp, created in conn.execute(query)]

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
        """Move last_used_at forward for the given public ids (never backwards)."""
        if not used:
            return
        table = KeyRow.__table__  # type: ignore[attr-defined]
        statement = (
            update(table)
            .where(
                table.c.public_id == bindparam("pid"),
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
    ) -> None:
        session.add(
            EventRow(
                at=_now(),
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
                .where(*mine, col(EventRow.action).in_(("key.create", "key.recreate")))
                .order_by(newest)
                .limit(1)
            ).first()
            rows = session.exec(select(EventRow).where(*mine).order_by(newest).limit(limit))
            events = tuple(self._event(r) for r in rows)
        return KeyDetail(info, self._event(origin) if origin else None, events)
