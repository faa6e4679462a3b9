"""The scope catalog: the scopes a key may hold, and what each gives access to."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, delete, select

from apikey_tui.db import FOREIGN_KEY, UNIQUE
from apikey_tui.db.models import KeyRow, KeyScopeRow, ScopeRow
from apikey_tui.errors import (
    DuplicateScopeError,
    InvalidInputError,
    ScopeInUseError,
    ScopeNotFoundError,
    UnknownScopeError,
)
from apikey_tui.names import check_description, check_scope_name, parse_scopes
from apikey_tui.store import audit
from apikey_tui.store.context import StoreContext
from apikey_tui.store.types import ScopeInfo, ScopeUsage


def list_scopes(ctx: StoreContext) -> list[ScopeInfo]:
    """Return the scope catalog, sorted by name."""
    with ctx.session() as session:
        rows = session.exec(select(ScopeRow).order_by(ScopeRow.name))
        return [ScopeInfo(r.name, r.description) for r in rows]


def scope_usage(ctx: StoreContext) -> list[ScopeUsage]:
    """Return the scope catalog, sorted by name, with how many keys hold each scope."""
    holders = func.count(col(KeyScopeRow.key_id))
    query = (
        sa_select(col(ScopeRow.name), col(ScopeRow.description), holders)
        .outerjoin(KeyScopeRow, col(KeyScopeRow.scope) == col(ScopeRow.name))
        .group_by(col(ScopeRow.name), col(ScopeRow.description))
        .order_by(col(ScopeRow.name))
    )
    with ctx.session() as session:
        return [ScopeUsage(n, d, count) for n, d, count in session.execute(query)]


def add_scope(ctx: StoreContext, name: str, description: str = "") -> ScopeInfo:
    """Add a scope to the catalog."""
    check_scope_name(name)
    check_description(description)
    conflicts = {UNIQUE: lambda: DuplicateScopeError(name)}
    with ctx.session(write=True, conflicts=conflicts) as session:
        session.add(ScopeRow(name=name, description=description))
        audit.record(ctx, session, "scope.add", scope=name, detail=description)
        session.commit()
    return ScopeInfo(name, description)


def describe_scope(ctx: StoreContext, name: str, description: str) -> ScopeInfo:
    """Change the description of a catalog scope."""
    check_description(description)
    with ctx.session(write=True) as session:
        row = session.get(ScopeRow, name)
        if row is None:
            raise ScopeNotFoundError(name)
        row.description = description
        session.add(row)
        audit.record(ctx, session, "scope.describe", scope=name, detail=description)
        session.commit()
    return ScopeInfo(name, description)


def remove_scope(ctx: StoreContext, name: str) -> None:
    """Remove a scope from the catalog; refused while keys hold it."""
    # A key that took the scope meanwhile: the foreign key refuses the removal at commit.
    conflicts = {FOREIGN_KEY: lambda: ScopeInUseError(name, ["a key created meanwhile"])}
    with ctx.session(write=True, conflicts=conflicts) as session:
        if session.get(ScopeRow, name) is None:
            raise ScopeNotFoundError(name)
        holders = _holders(session, name)
        if holders:
            raise ScopeInUseError(name, holders)
        session.exec(delete(ScopeRow).where(col(ScopeRow.name) == name))
        audit.record(ctx, session, "scope.remove", scope=name)
        session.commit()


def _holders(session: Session, name: str, limit: int | None = None) -> list[str]:
    """'owner/name' of each key holding the scope, by owner and name."""
    query = (
        select(KeyRow.owner, KeyRow.name)
        .join(KeyScopeRow, col(KeyScopeRow.key_id) == col(KeyRow.id))
        .where(KeyScopeRow.scope == name)
        .order_by(KeyRow.owner, KeyRow.name)
    )
    return [f"{o}/{n}" for o, n in session.exec(query.limit(limit)).all()]


def scope_holders(ctx: StoreContext, name: str, limit: int | None = None) -> list[str]:
    """'owner/name' of the keys holding a scope (the first limit of them), by owner and name."""
    with ctx.session() as session:
        return _holders(session, name, limit)


def wanted_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """The scopes asked for, checked and without repeats; at least one."""
    wanted = parse_scopes(scopes)
    if not wanted:
        raise InvalidInputError("a key needs at least one scope")
    return wanted


def names_in(session: Session) -> list[str]:
    """The catalog's scope names, sorted, read in the caller's transaction."""
    return list(session.exec(select(ScopeRow.name).order_by(ScopeRow.name)))


def check_catalog(session: Session, wanted: tuple[str, ...]) -> None:
    """Refuse scopes that are not in the catalog, naming those that are."""
    known = names_in(session)
    unknown = [s for s in wanted if s not in known]
    if unknown:
        raise UnknownScopeError(unknown, known)


def removed_meanwhile(ctx: StoreContext, wanted: tuple[str, ...]) -> UnknownScopeError:
    """The error for scopes checked in the catalog and removed from it before the commit."""
    return UnknownScopeError(list(wanted), [s.name for s in list_scopes(ctx)])
