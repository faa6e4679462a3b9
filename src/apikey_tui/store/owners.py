"""Owners: people, teams and service accounts, their members, description and metadata.

A team's members and a service account's responsible people are persons. Every change is one
audited transaction; a change a verifier must see (metadata) puts the owner's keys in the
change log in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col, delete, select

from apikey_tui.db.models import (
    OWNER_KINDS,
    PERSON,
    KeyRow,
    OwnerMemberRow,
    OwnerNetworkRow,
    OwnerRow,
)
from apikey_tui.errors import DuplicateOwnerError, InvalidInputError, KeyStateError
from apikey_tui.limits.model import Limit, limits_of_text
from apikey_tui.names import check_description, check_owner
from apikey_tui.store import audit
from apikey_tui.store.context import StoreContext
from apikey_tui.store.metadata import Pairs, check_meta, meta_of_text, meta_text, pairs_words

MEMBERS_MAX = 200  # members one change may name: one transaction holds them all


@dataclass(frozen=True)
class OwnerInfo:
    """An owner as an admin sees it: kind, description, metadata, limits, members, keys.

    members: a team's members or a service account's responsible people (persons, by name);
    member_of: the teams and service accounts a person is in; keys: how many keys it owns.
    """

    name: str
    kind: str
    description: str = ""
    meta: Pairs = ()
    limits: tuple[Limit, ...] = ()
    members: tuple[str, ...] = ()
    member_of: tuple[str, ...] = ()
    keys: int = 0

    def to_json(self) -> dict[str, Any]:
        """Return the owner as a JSON-ready dict."""
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "meta": dict(self.meta),
            "limits": [str(limit) for limit in self.limits],
            "members": list(self.members),
            "member_of": list(self.member_of),
            "keys": self.keys,
        }


def check_kind(kind: str) -> str:
    """Return kind if it is one of OWNER_KINDS, else one clear line."""
    if kind not in OWNER_KINDS:
        raise InvalidInputError(f"owner kind {kind[:20]!a} is not one of {', '.join(OWNER_KINDS)}")
    return kind


class OwnerNotFoundError(InvalidInputError):
    """No owner of this name: `owners add` makes one."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no owner {name!r}; add it with `owners add {name} --kind …`")
        self.name = name


def ensure_person(session: Session, name: str) -> OwnerRow:
    """The owner's row, made a person if it has none yet (a key made for a new owner).

    INSERT … ON CONFLICT DO NOTHING: two first keys of one new owner at once both succeed.
    """
    row = session.get(OwnerRow, name)
    if row is None:
        table = OwnerRow.__table__  # type: ignore[attr-defined]
        values = {"owner": check_owner(name), "kind": PERSON, "description": ""}
        if session.get_bind().dialect.name == "postgresql":
            statement: Any = postgresql_insert(table).values(values)
        else:
            statement = sqlite_insert(table).values(values)
        session.execute(statement.on_conflict_do_nothing())
        row = session.get(OwnerRow, name)
        assert row is not None
    return row


def owner_row(session: Session, name: str, *, lock: bool = False) -> OwnerRow:
    """The owner's row, or OwnerNotFoundError."""
    row = session.get(OwnerRow, name, with_for_update=lock)
    if row is None:
        raise OwnerNotFoundError(name)
    return row


def _members(session: Session, name: str) -> tuple[str, ...]:
    rows = session.exec(
        select(OwnerMemberRow.member)
        .where(OwnerMemberRow.owner == name)
        .order_by(col(OwnerMemberRow.member))
    )
    return tuple(rows)


def member_of(session: Session, person: str) -> tuple[str, ...]:
    """The teams and service accounts a person is in, by name."""
    rows = session.exec(
        select(OwnerMemberRow.owner)
        .where(OwnerMemberRow.member == person)
        .order_by(col(OwnerMemberRow.owner))
    )
    return tuple(rows)


def _info(session: Session, row: OwnerRow, keys: int | None = None) -> OwnerInfo:
    if keys is None:
        keys = int(
            session.exec(
                select(func.count()).select_from(KeyRow).where(KeyRow.owner == row.owner)
            ).one()
        )
    return OwnerInfo(
        row.owner,
        row.kind,
        row.description,
        meta_of_text(row.meta),
        limits_of_text(row.limits),
        _members(session, row.owner),
        member_of(session, row.owner),
        keys,
    )


def _check_members(session: Session, owner: str, kind: str, members: Iterable[str]) -> list[str]:
    """The members as persons (made persons if new); refused for a person or a non-person."""
    names = sorted({check_owner(m) for m in members})
    if not names:
        return names
    if kind == PERSON:
        raise InvalidInputError(
            f"{owner} is a person: only teams and service accounts have members"
        )
    if len(names) > MEMBERS_MAX:
        raise InvalidInputError(f"at most {MEMBERS_MAX} members at once; nothing was done")
    if owner in names:
        raise InvalidInputError(f"{owner} cannot be its own member")
    for name in names:
        row = ensure_person(session, name)
        if row.kind != PERSON:
            raise InvalidInputError(f"{name} is a {row.kind}: members are people")
    return names


def add_owner(
    ctx: StoreContext,
    name: str,
    kind: str,
    *,
    members: Iterable[str] = (),
    description: str = "",
    meta: Iterable[tuple[str, str]] = (),
) -> OwnerInfo:
    """Add an owner; refused if the name is taken. One owner.add event."""
    check_owner(name)
    check_kind(kind)
    check_description(description)
    stored_meta = meta_text(check_meta(meta))
    with ctx.session(write=True) as session:
        if session.get(OwnerRow, name) is not None:
            raise DuplicateOwnerError(name)
        session.add(OwnerRow(owner=name, kind=kind, description=description, meta=stored_meta))
        session.flush()
        names = _check_members(session, name, kind, members)
        session.add_all(OwnerMemberRow(owner=name, member=m) for m in names)
        detail = f"kind: {kind}" + (f"; members: {' '.join(names)}" if names else "")
        audit.record(ctx, session, "owner.add", detail=detail, owner=name)
        session.flush()
        info = _info(session, owner_row(session, name), 0)
        session.commit()
    return info


def change_owner(
    ctx: StoreContext,
    name: str,
    *,
    kind: str | None = None,
    description: str | None = None,
    meta: Iterable[tuple[str, str]] | None = None,
) -> tuple[OwnerInfo, OwnerInfo]:
    """Change an owner's kind, description or metadata (None: as it is); before and after.

    A person with memberships cannot become a team, nor a team with members a person. New
    metadata reaches every verifier like a key change (its keys go in the change log).
    """
    with ctx.session(write=True) as session:
        row = owner_row(session, name, lock=True)
        before = _info(session, row)
        notes: list[str] = []
        if kind is not None and check_kind(kind) != row.kind:
            if kind == PERSON and before.members:
                raise KeyStateError(f"{name} has members; remove them before it is a person")
            if row.kind == PERSON and before.member_of:
                raise KeyStateError(
                    f"{name} is a member of {', '.join(before.member_of)}; a team or service "
                    "account cannot be a member"
                )
            notes.append(f"kind: {kind} (was {row.kind})")
            row.kind = kind
        if description is not None and description != row.description:
            row.description = check_description(description)
            notes.append("description")
        also: list[str | None] = []
        if meta is not None:
            wanted = check_meta(meta)
            if wanted != before.meta:
                row.meta = meta_text(wanted)
                notes.append(f"meta: {pairs_words(wanted) or 'none'}")
                also = key_ids(session, name)
        if not notes:
            return before, before
        session.add(row)
        audit.record(ctx, session, "owner.change", detail="; ".join(notes), also=also, owner=name)
        session.flush()
        after = _info(session, row, before.keys)
        session.commit()
    return before, after


def key_ids(session: Session, owner: str) -> list[str | None]:
    """The ids of every key of owner, and of their previous secrets: what an owner's change
    tells the change log, so each key's cached record is read again."""
    ids = session.exec(
        select(KeyRow.public_id, KeyRow.old_public_id).where(KeyRow.owner == owner)
    ).all()
    return [i for pair in ids for i in pair]


def change_members(
    ctx: StoreContext, name: str, *, add: Iterable[str] = (), remove: Iterable[str] = ()
) -> OwnerInfo:
    """Add and remove members of a team or service account; one owner.members event."""
    with ctx.session(write=True) as session:
        row = owner_row(session, name, lock=True)
        add, removing = list(add), sorted({check_owner(m) for m in remove})
        # Checked before anything is compared with the members: whether carol is one or
        # not, `--add carol --remove carol` says two things, and neither may win in silence.
        both = sorted(set(map(check_owner, add)) & set(removing))
        if both:
            raise InvalidInputError(f"{', '.join(both)} both added and removed; nothing was done")
        have = set(_members(session, name))
        adding = [m for m in _check_members(session, name, row.kind, add) if m not in have]
        missing = [m for m in removing if m not in have]
        if missing:
            raise InvalidInputError(
                f"{', '.join(missing)} not a member of {name}; nothing was done"
            )
        session.add_all(OwnerMemberRow(owner=name, member=m) for m in adding)
        if removing:
            session.exec(
                delete(OwnerMemberRow).where(
                    col(OwnerMemberRow.owner) == name, col(OwnerMemberRow.member).in_(removing)
                )
            )
        if adding or removing:
            detail = "; ".join(
                part
                for part in (
                    f"added: {' '.join(adding)}" if adding else "",
                    f"removed: {' '.join(removing)}" if removing else "",
                )
                if part
            )
            audit.record(ctx, session, "owner.members", detail=detail, owner=name)
        session.flush()
        info = _info(session, row)
        session.commit()
    return info


def remove_owner(ctx: StoreContext, name: str) -> OwnerInfo:
    """Remove an owner that owns no key (its memberships, limits and network rules go with it);
    one owner.remove event.

    Keys it made for other owners keep working: a key's creator is history, not a tie.
    """
    with ctx.session(write=True) as session:
        row = owner_row(session, name, lock=True)
        info = _info(session, row)
        if info.keys:
            raise KeyStateError(
                f"{name} owns {info.keys} key(s); transfer or delete them first "
                f"(`offboard {name}` lists them)"
            )
        session.delete(row)  # its member rows, either way, go with it (ON DELETE CASCADE)
        fence = session.get(OwnerNetworkRow, name)
        if fence is not None:  # its network rules too: an owner added again starts with none
            session.delete(fence)
        audit.record(ctx, session, "owner.remove", detail=f"kind: {info.kind}", owner=name)
        session.commit()
    return info


def get_owner(ctx: StoreContext, name: str) -> OwnerInfo:
    """One owner, with its members, memberships and key count."""
    with ctx.session() as session:
        return _info(session, owner_row(session, name))


def list_owners(ctx: StoreContext, kind: str | None = None) -> list[OwnerInfo]:
    """Every owner (of one kind), by name, with members and key counts (one query each)."""
    with ctx.session() as session:
        query = select(OwnerRow).order_by(col(OwnerRow.owner))
        if kind is not None:
            query = query.where(OwnerRow.kind == check_kind(kind))
        rows = list(session.exec(query))
        counts = dict(
            session.exec(select(KeyRow.owner, func.count()).group_by(col(KeyRow.owner))).all()
        )
        members: dict[str, list[str]] = {}
        member_of_: dict[str, list[str]] = {}
        for owner, member in session.exec(
            select(OwnerMemberRow.owner, OwnerMemberRow.member).order_by(
                col(OwnerMemberRow.owner), col(OwnerMemberRow.member)
            )
        ):
            members.setdefault(owner, []).append(member)
            member_of_.setdefault(member, []).append(owner)
    return [
        OwnerInfo(
            r.owner,
            r.kind,
            r.description,
            meta_of_text(r.meta),
            limits_of_text(r.limits),
            tuple(members.get(r.owner, ())),
            tuple(sorted(member_of_.get(r.owner, ()))),
            int(counts.get(r.owner, 0)),
        )
        for r in rows
    ]


def add_members_in(
    ctx: StoreContext,
    session: Session,
    pairs: Iterable[tuple[str, str]],
    note: str,
    batch: str | None,
) -> None:
    """Put (owner, member) pairs back in session's transaction (an undone offboarding); one
    owner.members event per owner. Refused if an owner or member is gone since."""
    by_owner: dict[str, list[str]] = {}
    for owner, member in pairs:
        by_owner.setdefault(owner, []).append(member)
    for owner, members in sorted(by_owner.items()):
        row = owner_row(session, owner, lock=True)
        have = set(_members(session, owner))
        adding = [m for m in _check_members(session, owner, row.kind, members) if m not in have]
        session.add_all(OwnerMemberRow(owner=owner, member=m) for m in adding)
        if adding:
            detail = f"added: {' '.join(adding)}; {note}"
            audit.record(ctx, session, "owner.members", detail=detail, owner=owner, batch=batch)


def remove_memberships_in(
    ctx: StoreContext, session: Session, person: str, note: str, batch: str | None
) -> tuple[tuple[str, str], ...]:
    """End every membership of a person in session's transaction (offboarding); one
    owner.members event per team or service account; the (owner, member) pairs ended."""
    ended = tuple((owner, person) for owner in member_of(session, person))
    for owner, _ in ended:
        detail = f"removed: {person}; {note}"
        audit.record(ctx, session, "owner.members", detail=detail, owner=owner, batch=batch)
    session.exec(delete(OwnerMemberRow).where(col(OwnerMemberRow.member) == person))
    return ended
