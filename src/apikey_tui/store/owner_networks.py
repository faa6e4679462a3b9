"""An owner's network rules: every key of the owner must pass them too; set, read and undone."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, col, select

from apikey_tui.db.models import OwnerNetworkRow
from apikey_tui.errors import KeyStateError
from apikey_tui.names import check_owner
from apikey_tui.networks import NetworkRules, rules_note, rules_of_text, rules_text
from apikey_tui.store import audit, owners
from apikey_tui.store.context import StoreContext


@dataclass(frozen=True)
class OwnerNetworks:
    """What a change of an owner's rules did: before and after (undo puts before back)."""

    owner: str
    before: NetworkRules | None
    after: NetworkRules | None


def owner_networks(ctx: StoreContext, owner: str) -> NetworkRules | None:
    """The owner's network rules (None: none)."""
    with ctx.session() as session:
        return _read(session, owner)


def _read(session: Session, owner: str) -> NetworkRules | None:
    row = session.get(OwnerNetworkRow, owner)
    return rules_of_text(row.networks if row is not None else None)


def set_owner_networks(
    ctx: StoreContext,
    owner: str,
    networks: NetworkRules | None,
    *,
    expected: NetworkRules | bool | None = False,
    detail: str = "",
) -> OwnerNetworks:
    """Give the owner exactly these rules (None lifts them); one owner.networks event.

    Every key of the owner reaches the change log in the same transaction, as for an owner's
    limits. expected (unless False): refuse (KeyStateError) unless the owner's rules are
    exactly these now (an undo never overwrites a later change).
    """
    check_owner(owner)
    text = rules_text(networks)
    with ctx.session(write=True) as session:
        row = session.get(OwnerNetworkRow, owner, with_for_update=True)
        before = rules_of_text(row.networks if row is not None else None)
        if expected is not False and before != expected:
            raise KeyStateError(
                f"the network rules of {owner} changed after that change; nothing was undone"
            )
        if text is None:
            if row is not None:
                session.delete(row)
        elif row is None:
            owners.ensure_person(session, owner)  # an owner named first by its rules: a person
            session.add(OwnerNetworkRow(owner=owner, networks=text))
        else:
            row.networks = text
            session.add(row)
        note = "owner " + rules_note(networks, before)
        audit.record(
            ctx,
            session,
            "owner.networks",
            detail=note + (f"; {detail}" if detail else ""),
            also=owners.key_ids(session, owner),
            owner=owner,
        )
        session.commit()
    return OwnerNetworks(owner, before, networks)


def restore_owner_networks(ctx: StoreContext, done: OwnerNetworks) -> OwnerNetworks:
    """Undo a change of an owner's rules: refused if they changed since (KeyStateError)."""
    return set_owner_networks(
        ctx, done.owner, done.before, expected=done.after, detail="undoes the change"
    )


def owners_with_networks(ctx: StoreContext) -> dict[str, NetworkRules]:
    """Every owner that has network rules, with them."""
    with ctx.session() as session:
        rows = session.exec(select(OwnerNetworkRow).order_by(col(OwnerNetworkRow.owner)))
        return {r.owner: rules_of_text(r.networks) or NetworkRules() for r in rows}
