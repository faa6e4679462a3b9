"""Offboarding a person: what they hold and what would break (a preview), then one batch.

A person holds the keys they own, the keys they made for any owner, and the keys of every
service account they are responsible for. The preview lists each with its last use and its
busiest scopes; applying it disables the person's own keys (reversibly, with a reason),
transfers the others the admin names, keeps the rest, and ends the person's memberships, all
in one transaction under one batch id that `bulk.restore` undoes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_
from sqlmodel import Session, col, select

from apikey_tui.db.models import PERSON, SERVICE, EventRow, KeyRow, OwnerMemberRow, OwnerRow
from apikey_tui.errors import InvalidInputError, KeyStateError
from apikey_tui.names import check_owner, check_reason, counted, format_moment
from apikey_tui.store import audit, bulk, lifecycle, owners, states, usage
from apikey_tui.store.bulk import Batch
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import KEY_TABLE, key_info, like_escaped, read_info
from apikey_tui.store.transfer import NameTakenError, moved_from, refusal, transfer_in
from apikey_tui.store.types import KeyInfo

OWNS, MADE, RESPONSIBLE = "owns", "made", "responsible"
OFFBOARD = "owner.offboard"  # the event of an applied offboarding (owner: the person)
WINDOW = timedelta(days=30)  # the busiest scopes: the usage of the last 30 days


@dataclass(frozen=True)
class Holding:
    """A key the person holds, why (OWNS, MADE, RESPONSIBLE: one or more), and its busiest
    scopes in the last 30 days ((scopes, requests), busiest first)."""

    key: KeyInfo
    why: tuple[str, ...]
    busiest: tuple[tuple[str, int], ...] = ()

    def to_json(self, now: Any) -> dict[str, Any]:
        """The holding as a JSON-ready dict."""
        return {
            **self.key.to_json(),
            "state": states.marker(self.key, now)[1],  # its kind, as `keys list --json`
            "why": list(self.why),
            "busiest_scopes": [{"scopes": s, "requests": n} for s, n in self.busiest],
        }


@dataclass(frozen=True)
class Membership:
    """A team or service account the person is in, and who else is."""

    owner: str
    kind: str
    others: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The membership as a JSON-ready dict."""
        return {"owner": self.owner, "kind": self.kind, "others": list(self.others)}


@dataclass(frozen=True)
class Preview:
    """What a person holds: keys (by owner and name) and memberships."""

    person: str
    keys: tuple[Holding, ...]
    memberships: tuple[Membership, ...]

    def own(self) -> list[KeyInfo]:
        """The person's own keys."""
        return [h.key for h in self.keys if OWNS in h.why]

    def to_json(self, now: Any) -> dict[str, Any]:
        """The preview as a JSON-ready dict."""
        return {
            "person": self.person,
            "keys": [h.to_json(now) for h in self.keys],
            "memberships": [m.to_json() for m in self.memberships],
        }


def not_a_person(name: str, kind: str) -> str | None:
    """Why an owner cannot be offboarded (a team or service account), or None for a person:
    the one check of the app's `b` and the CLI's `offboard`."""
    return None if kind == PERSON else f"{name} is a {kind}: offboarding is for people"


def preview(ctx: StoreContext, person: str) -> Preview:
    """What the person holds, read through indexes (owner, created_by, members): at a million
    keys it costs what the person's own keys cost, not what the table does.

    Refused (InvalidInputError) for a team or service account, and for a name that is no
    owner and holds nothing (a typo would otherwise read as "holds 0 keys")."""
    check_owner(person)
    key = KEY_TABLE.c
    now = ctx.clock()
    with ctx.session() as session:
        known = session.get(OwnerRow, person)
        if known is not None and (refused := not_a_person(person, known.kind)) is not None:
            raise InvalidInputError(f"{refused}; nothing was done")
        memberships = _memberships(session, person)
        services = [m.owner for m in memberships if m.kind == SERVICE]
        conn = session.connection()
        condition = or_(key.owner == person, key.created_by == person)
        if services:
            condition = or_(condition, key.owner.in_(services))
        rows = usage.key_rows(conn, condition)
    if known is None and not rows and not memberships:
        raise InvalidInputError(
            f"no owner {person!r}: nothing to offboard (`owners list` lists them)"
        )
    holdings: list[tuple[KeyInfo, tuple[str, ...]]] = []
    for row, scopes in rows:
        info = key_info(row, scopes, now)
        why = tuple(
            word
            for word, holds in (
                (OWNS, info.owner == person),
                (MADE, info.created_by == person),
                (RESPONSIBLE, info.owner in services),
            )
            if holds
        )
        holdings.append((info, why))
    busiest = usage.busiest_scopes(ctx, [k.public_id for k, _ in holdings], WINDOW)
    found = tuple(
        Holding(k, why, busiest.get(k.public_id, ()))
        for k, why in sorted(holdings, key=lambda h: (OWNS not in h[1], h[0].owner, h[0].name))
    )
    return Preview(person, found, memberships)


def _memberships(session: Session, person: str) -> tuple[Membership, ...]:
    teams = owners.member_of(session, person)
    if not teams:
        return ()
    kinds = dict(
        session.exec(
            select(OwnerRow.owner, OwnerRow.kind).where(col(OwnerRow.owner).in_(teams))
        ).all()
    )
    others: dict[str, list[str]] = {}
    for owner, member in session.exec(
        select(OwnerMemberRow.owner, OwnerMemberRow.member)
        .where(col(OwnerMemberRow.owner).in_(teams), OwnerMemberRow.member != person)
        .order_by(col(OwnerMemberRow.member))
    ):
        others.setdefault(owner, []).append(member)
    return tuple(Membership(t, kinds.get(t, ""), tuple(others.get(t, ()))) for t in teams)


def default_reason(person: str) -> str:
    """The reason the person's disabled keys get unless one is given ('offboarded: alice')."""
    return f"offboarded: {person}"


def apply(
    ctx: StoreContext,
    seen: Preview,
    *,
    reason: str = "",
    transfers: Mapping[tuple[str, str], str] | None = None,
) -> Batch:
    """Offboard as previewed: disable the person's own keys (those not disabled already and not
    transferred) with the reason, give each key in transfers ((owner, name) -> new owner) to
    its new owner, keep every other key, and end the person's memberships. One transaction,
    one batch (`bulk.restore` undoes it); refused whole if a key changed since the preview.
    """
    reason = reason or default_reason(seen.person)
    check_reason(reason)
    moves = dict(transfers or {})
    held = {(h.key.owner, h.key.name): h.key for h in seen.keys}
    unknown = [f"{o}/{n}" for o, n in moves if (o, n) not in held]
    if unknown:
        raise InvalidInputError(
            f"not among {seen.person}'s keys: {', '.join(unknown)}; nothing was done"
        )
    todo: list[KeyInfo] = [held[k] for k in moves]
    todo += [k for k in seen.own() if (k.owner, k.name) not in moves and not k.disabled]

    def step(session: Session, key: KeyInfo, batch: str | None) -> KeyInfo:
        to = moves.get((key.owner, key.name))
        if to is not None:
            if (why := move_refusal(session, seen.person, key.owner, key.name, to)) is not None:
                raise why
            return transfer_in(ctx, session, key, to, batch, f"offboarding {seen.person}")
        return lifecycle.disable_in(ctx, session, key.owner, key.name, reason, key.public_id, batch)

    ended: list[tuple[str, str]] = []

    def finish(session: Session, batch: str | None) -> None:
        note = f"offboarding {seen.person}"
        ended.extend(owners.remove_memberships_in(ctx, session, seen.person, note, batch))
        # One event for the offboarding itself: `undo` finds the person's batch by it, whatever
        # the reason said, and the trail shows what was done in one line.
        moved = sum(k in moves for k in ((k.owner, k.name) for k in todo))
        disabled = counted(len(todo) - moved)
        detail = (
            f"{disabled} disabled, {moved} transferred; {counted(len(ended), 'membership')} ended"
        )
        audit.record(ctx, session, OFFBOARD, detail=detail, owner=seen.person, batch=batch)

    done = bulk.run_batch(ctx, "offboard", todo, step, finish=finish)
    return Batch(done.id, done.action, done.before, done.after, (), tuple(ended))


def move_refusal(
    session: Session, person: str, owner: str, name: str, to: str
) -> InvalidInputError | None:
    """Why an offboarding cannot give key `name` of `owner` to `to`, or None: what any transfer
    refuses (`transfer.refusal`), and a destination that is the person leaving or an owner
    whose only member is that person (once their memberships end, it answers to no one)."""
    if to == person:
        return InvalidInputError(f"{to} is the person being offboarded; name another owner")
    members = set(
        session.exec(select(OwnerMemberRow.member).where(OwnerMemberRow.owner == to)).all()
    )
    if members == {person}:
        return InvalidInputError(
            f"{to}'s only member is {person}, who is leaving; add someone to {to} first or "
            "name another owner"
        )
    return refusal(session, owner, name, to)


def move_problems(
    ctx: StoreContext, seen: Preview, moves: Mapping[tuple[str, str], str]
) -> dict[tuple[str, str], str]:
    """What `apply` would refuse of each move ((owner, name) -> why), checked now by the checks
    `apply` makes: the dry run shows them per key, before anyone applies."""
    problems: dict[tuple[str, str], str] = {}
    given: set[tuple[str, str]] = set()  # (to, name) of the moves before: apply does them first
    with ctx.session() as session:
        for (owner, name), to in moves.items():
            why = move_refusal(session, seen.person, owner, name, to)
            if why is None and (to, name) in given:
                why = NameTakenError(to, name)
            given.add((to, name))
            if why is not None:
                problems[(owner, name)] = str(why)
    return problems


class NoOffboardingError(InvalidInputError):
    """No applied offboarding of the person (with that batch id) is in the audit trail."""


def applied(ctx: StoreContext, person: str, batch: str | None = None) -> Batch:
    """An applied offboarding of person as the audit trail holds it (a new process has no
    batch in memory): the newest one, or the one of that batch id. `bulk.restore`, the app's
    undo, reverses it: the keys it disabled enabled, those it transferred moved back, the
    memberships it ended restored, in one transaction and one new batch.

    Its keys' after is each key now, their before that with what the batch did taken back.
    Refused (KeyStateError) if the batch was undone already, if one of its keys has an event
    after it (changed since: the trail's form of the rule `bulk.restore` applies again to the
    batch under the rows' locks), or if a key it disabled has leaked (a leaked secret never
    works again); NoOffboardingError if the trail holds no such offboarding.
    """
    check_owner(person)
    with ctx.session() as session:
        found = _offboarding(session, person, batch)
        events = audit.batch_events(session, found)
        first, last = events[0].id or 0, events[-1].id or 0
        if (undo := audit.undone_by(session, found, first)) is not None:
            raise KeyStateError(
                f"the offboarding of {person} (batch {found}) was undone already, "
                f"{format_moment(undo.at)} by {undo.actor}; nothing was done"
            )
        keyed = [e for e in events if e.action in ("key.disable", "key.transfer") and e.public_id]
        later = _first_events_after(session, [e.public_id for e in keyed if e.public_id], last)
        before: list[KeyInfo] = []
        after: list[KeyInfo] = []
        for event in keyed:
            now = _as_left(ctx, session, event, later.get(event.public_id or ""))
            if event.action == "key.disable":
                before.append(replace(now, disabled_at=None, disabled_reason=None))
            elif (was := moved_from(event.detail)) is not None:
                before.append(replace(now, owner=was))
            else:
                raise KeyStateError(
                    f"batch {found}: the transfer of key {now.name!r} names no owner it came "
                    "from; nothing was done"
                )
            after.append(now)
    ended = tuple((e.owner, person) for e in events if e.action == "owner.members" and e.owner)
    if not after and not ended:
        raise KeyStateError(
            f"the offboarding of {person} (batch {found}) changed nothing; nothing to undo"
        )
    return Batch(found, "offboard", tuple(before), tuple(after), (), ended)


def _offboarding(session: Session, person: str, batch: str | None) -> str:
    """The batch id of the person's newest applied offboarding (or of `batch`, if it is one).

    Found by its `owner.offboard` event; a batch applied before that event existed (0.9.0) by
    the words its events hold: "offboarding PERSON" (transfers, memberships) or the default
    reason "offboarded: PERSON" of the keys it disabled.
    """
    who = like_escaped(person)
    detail, action, owner = col(EventRow.detail), col(EventRow.action), col(EventRow.owner)
    mine = or_(
        and_(action == OFFBOARD, owner == person),
        detail.like(f"batch %; offboarding {who}", escape="\\"),
        and_(
            action == "key.disable",
            owner == person,
            detail.like(f"batch %: offboarded: {who}", escape="\\"),
        ),
    )
    if batch is not None:
        mine = and_(mine, detail.like(f"batch {batch}%"))
    rows = session.exec(select(EventRow).where(mine).order_by(col(EventRow.id).desc()))
    for row in rows:
        found = audit.batch_of(row.detail)
        exact = row.owner == person or row.detail.endswith(f"; offboarding {person}")
        if found is not None and exact and (batch is None or found == batch):
            return found
    which = f"with batch {batch} " if batch is not None else ""
    raise NoOffboardingError(
        f"no applied offboarding of {person} {which}is in the audit trail; nothing was done"
    )


def _first_events_after(session: Session, ids: list[str], last: int) -> dict[str, EventRow]:
    """Each public id's first event after event id `last`, for those that have one: one read
    of the trail from `last` on, however many keys the batch holds."""
    found: dict[str, EventRow] = {}
    if not ids:
        return found
    query = (
        select(EventRow)
        .where(col(EventRow.id) > last, col(EventRow.public_id).in_(ids))
        .order_by(col(EventRow.id))
    )
    for row in session.exec(query):
        found.setdefault(row.public_id or "", row)
    return found


def _as_left(
    ctx: StoreContext, session: Session, event: EventRow, later: EventRow | None
) -> KeyInfo:
    """The key an event of the batch changed, now; refused if it changed after the batch
    (gone, recreated or rotated: a new public id; or `later`, an event of it since)."""
    where = f"key {event.key_name!r} of {event.owner}"
    row = session.exec(select(KeyRow).where(KeyRow.public_id == event.public_id)).first()
    if row is None:
        raise KeyStateError(
            f"{where} was deleted, recreated or rotated after the offboarding; nothing was undone"
        )
    now = read_info(session, row, ctx.clock())
    if now.leaked and event.action == "key.disable":  # undone, it would work again
        raise KeyStateError(lifecycle.leaked_refusal(now.owner, now.name, "restored"))
    if later is not None:
        raise KeyStateError(
            f"key {now.name!r} of {now.owner} changed after the offboarding ({later.action}, "
            f"{format_moment(later.at)}); nothing was undone"
        )
    return now


def transfers_of(seen: Preview, given: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The moves `--transfer FROM=TO` names: FROM an owner (each of their keys the person
    holds) or OWNER/NAME (one key); TO the new owner. Refused if FROM names none of them, or a
    key another --transfer names too (the last would win in silence)."""
    moves: dict[tuple[str, str], str] = {}
    named: dict[tuple[str, str], str] = {}  # each key's --transfer, to refuse a second one
    for source, to in given:
        owner, _, name = source.partition("/")
        chosen = [
            h.key for h in seen.keys if h.key.owner == owner and (not name or h.key.name == name)
        ]
        if not chosen:
            raise InvalidInputError(
                f"--transfer {source}: not among {seen.person}'s keys; nothing was done"
            )
        for k in chosen:
            if (k.owner, k.name) in named:
                raise InvalidInputError(
                    f"--transfer {source}: key {k.owner}/{k.name} is named already by "
                    f"--transfer {named[(k.owner, k.name)]}; name each key once"
                )
            named[(k.owner, k.name)] = f"{source}={to}"
            moves[(k.owner, k.name)] = check_owner(to)
    return moves
