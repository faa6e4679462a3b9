"""Moving a key to another owner: same secret, same public id, so every client keeps working.

Usage is counted by public id and the key's history is found by its ids too, so both stay the
key's. The key goes in the change log: verifiers read it again with its new owner's pool and
metadata at their next check (SQLite) or within the push bound (PostgreSQL).
"""

from __future__ import annotations

import re

from sqlmodel import Session, select

from apikey_tui.db.models import KeyRow
from apikey_tui.errors import InvalidInputError
from apikey_tui.store import audit, owners
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import key_row, read_info
from apikey_tui.store.types import KeyInfo

# A key.transfer event's detail: "from OWNER to OWNER", then "; note" (owners hold no spaces),
# after the batch id when it is part of one (`audit.with_batch`).
_MOVED = re.compile(r"(?:^|: )from (\S+) to ([^\s;]+)(?:;|$)")


def moved_from(detail: str) -> str | None:
    """The owner a key.transfer event's stored detail says the key came from."""
    found = _MOVED.search(detail)
    return found.group(1) if found else None


class NameTakenError(InvalidInputError):
    """The new owner already has a key of this name (names are unique per owner)."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(
            f"{owner} already has a key named {name!r}; nothing was done (rename or delete "
            "one of them first)"
        )


def refusal(session: Session, owner: str, name: str, to: str) -> InvalidInputError | None:
    """Why key `name` of `owner` cannot go to `to`, or None: `to` is no owner, is its owner
    already, or has a key of that name. The one check of every transfer (an offboarding's dry
    run asks it too, so it shows what --apply would refuse)."""
    try:
        owners.owner_row(session, to)
    except owners.OwnerNotFoundError as exc:
        return exc
    if to == owner:
        return InvalidInputError(f"key {name!r} is {to}'s already; nothing was done")
    clash = select(KeyRow.id).where(KeyRow.owner == to, KeyRow.name == name)
    if session.exec(clash).first() is not None:
        return NameTakenError(to, name)
    return None


def transfer_in(
    ctx: StoreContext,
    session: Session,
    key: KeyInfo,
    to: str,
    batch: str | None = None,
    note: str = "",
) -> KeyInfo:
    """Give the key (as the caller saw it) to owner `to` inside session's transaction.

    Refused if `to` is no owner, is the key's owner already, or has a key of that name. One
    key.transfer event under the new owner, naming the one before.
    """
    row = key_row(session, key.owner, key.name, lock=True, expected_public_id=key.public_id)
    if (why := refusal(session, row.owner, row.name, to)) is not None:
        raise why
    was = row.owner
    row.owner = to
    session.add(row)
    session.flush()
    info = read_info(session, row, ctx.clock())
    detail = f"from {was} to {to}" + (f"; {note}" if note else "")  # as _MOVED reads it
    audit.record(ctx, session, "key.transfer", info, detail=detail, batch=batch)
    return info
