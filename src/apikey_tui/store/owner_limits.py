"""An owner's limits: one pool every key of the owner draws from; set, read and undone."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlmodel import Session, col, select

from apikey_tui.db.models import OwnerRow
from apikey_tui.errors import KeyStateError
from apikey_tui.limits.model import Limit, check_limits, limits_of_text, limits_text
from apikey_tui.names import check_owner
from apikey_tui.store import audit, owners
from apikey_tui.store.context import StoreContext


@dataclass(frozen=True)
class OwnerLimits:
    """What a change of an owner's limits did: before and after (undo puts before back); new:
    the owner was made by it (a person), so a mistyped name can be told from a real one."""

    owner: str
    before: tuple[Limit, ...]
    after: tuple[Limit, ...]
    new: bool = False


def owner_limits(ctx: StoreContext, owner: str) -> tuple[Limit, ...]:
    """The owner's limits, shortest window first (none: an empty tuple)."""
    with ctx.session() as session:
        return _read(session, owner)


def _read(session: Session, owner: str) -> tuple[Limit, ...]:
    row = session.get(OwnerRow, owner)
    return limits_of_text(row.limits if row is not None else None)


def set_owner_limits(
    ctx: StoreContext,
    owner: str,
    limits: Iterable[Limit],
    *,
    expected: tuple[Limit, ...] | None = None,
    detail: str = "",
) -> OwnerLimits:
    """Give the owner exactly these limits (none lifts them); one owner.limits event.

    Every key of the owner reaches the change log in the same transaction, so verifiers apply
    the new pool at their next check (SQLite) or within the push bound (PostgreSQL). An owner
    need not have keys yet: its limits wait for them. expected: refuse (KeyStateError) unless
    the owner's limits are exactly these now (an undo never overwrites a later change).
    """
    check_owner(owner)
    wanted = check_limits(limits)
    text = limits_text(wanted)
    with ctx.session(write=True) as session:
        row = session.get(OwnerRow, owner, with_for_update=True)
        before = limits_of_text(row.limits if row is not None else None)
        new = row is None
        if expected is not None and before != expected:
            raise KeyStateError(
                f"the limits of {owner} changed after that change; nothing was undone"
            )
        if row is None:  # an owner named first by its limits: a person until said otherwise
            row = OwnerRow(owner=owner)
        row.limits = text
        session.add(row)
        note = f"owner limits: {text or 'none'} (were {limits_text(before) or 'none'})"
        audit.record(
            ctx,
            session,
            "owner.limits",
            detail=note + (f"; {detail}" if detail else ""),
            also=owners.key_ids(session, owner),
            owner=owner,
        )
        session.commit()
    return OwnerLimits(owner, before, wanted, new)


def restore_owner_limits(ctx: StoreContext, done: OwnerLimits) -> OwnerLimits:
    """Undo a change of an owner's limits: refused if they changed since (KeyStateError)."""
    return set_owner_limits(
        ctx, done.owner, done.before, expected=done.after, detail="undoes the change"
    )


def owners_with_limits(ctx: StoreContext) -> dict[str, tuple[Limit, ...]]:
    """Every owner that has limits, with them."""
    with ctx.session() as session:
        rows = session.exec(
            select(OwnerRow).where(col(OwnerRow.limits).is_not(None)).order_by(col(OwnerRow.owner))
        )
        return {r.owner: limits_of_text(r.limits) for r in rows}
