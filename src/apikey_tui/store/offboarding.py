"""Offboarding a person: what they hold and what would break (a preview), then one batch.

A person holds the keys they own, the keys they made for any owner, and the keys of every
service account they are responsible for. The preview lists each with its last use and its
busiest scopes; applying it disables the person's own keys (reversibly, with a reason),
transfers the others the admin names, keeps the rest, and ends the person's memberships, all
in one transaction under one batch id that `bulk.restore` undoes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import or_
from sqlmodel import Session, col, select

from apikey_tui.db.models import SERVICE, OwnerMemberRow, OwnerRow
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import check_owner, check_reason
from apikey_tui.store import bulk, lifecycle, owners, states, usage
from apikey_tui.store.bulk import Batch
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import KEY_TABLE, key_info
from apikey_tui.store.transfer import transfer_in
from apikey_tui.store.types import KeyInfo

OWNS, MADE, RESPONSIBLE = "owns", "made", "responsible"
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


def preview(ctx: StoreContext, person: str) -> Preview:
    """What the person holds, read through indexes (owner, created_by, members): at a million
    keys it costs what the person's own keys cost, not what the table does."""
    check_owner(person)
    key = KEY_TABLE.c
    now = ctx.clock()
    with ctx.session() as session:
        memberships = _memberships(session, person)
        services = [m.owner for m in memberships if m.kind == SERVICE]
        conn = session.connection()
        condition = or_(key.owner == person, key.created_by == person)
        if services:
            condition = or_(condition, key.owner.in_(services))
        rows = usage.key_rows(conn, condition)
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
    reason = reason or f"offboarded: {seen.person}"
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
            return transfer_in(ctx, session, key, to, batch, f"offboarding {seen.person}")
        return lifecycle.disable_in(ctx, session, key.owner, key.name, reason, key.public_id, batch)

    ended: list[tuple[str, str]] = []

    def finish(session: Session, batch: str | None) -> None:
        note = f"offboarding {seen.person}"
        ended.extend(owners.remove_memberships_in(ctx, session, seen.person, note, batch))

    done = bulk.run_batch(ctx, "offboard", todo, step, finish=finish)
    return Batch(done.id, done.action, done.before, done.after, (), tuple(ended))


def transfers_of(seen: Preview, given: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The moves `--transfer FROM=TO` names: FROM an owner (each of their keys the person
    holds) or OWNER/NAME (one key); TO the new owner. Refused if FROM names none of them."""
    moves: dict[tuple[str, str], str] = {}
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
            moves[(k.owner, k.name)] = check_owner(to)
    return moves
