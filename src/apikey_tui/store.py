"""KeyStore: keys, the scope catalog and the audit trail, in plain frozen values."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, bindparam, func, or_, update
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

    def events(self, limit: int = 50) -> list[Event]:
        """Return the newest events first."""
        with self._session() as session:
            rows = session.exec(select(EventRow).order_by(col(EventRow.id).desc()).limit(limit))
            return [
                Event(
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
                for r in rows
            ]
