"""Bulk key commands: many keys in one transaction under one audit batch id, and their undo.

Each command names the keys as the admin saw them (owner, name and public id): if any of them
was recreated, deleted or changed state meanwhile, the whole batch is refused and nothing is
done. Every event of a batch carries the same batch id (`audit.new_batch`), and every id the
batch touched reaches the change log in the same transaction (through `audit.record`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlmodel import Session

from apikey_tui.db import UNIQUE
from apikey_tui.errors import InvalidInputError, KeyStateError
from apikey_tui.limits.model import Limit, check_limits, limits_text
from apikey_tui.names import check_reason
from apikey_tui.networks import NetworkRules, rules_text
from apikey_tui.store import audit, catalog, lifecycle, owners
from apikey_tui.store.context import StoreContext
from apikey_tui.store.metadata import check_meta, check_tags, meta_text, tags_text
from apikey_tui.store.records import key_row, read_info
from apikey_tui.store.transfer import NameTakenError, transfer_in
from apikey_tui.store.types import CreatedKey, KeyInfo

if TYPE_CHECKING:
    from apikey_tui.db import Conflicts
    from apikey_tui.names import Expiry

# What an undo restores exactly (expiry, disabled state, scopes): a deletion, a rotation or an
# ended grace changed what it cannot put back. The app offers undo for these alone.
UNDOABLE = frozenset(
    {
        "disable",
        "enable",
        "set expiry",
        "set scopes",
        "set limits",
        "set networks",
        "set meta",
        "set tags",
        "transfer",
        "offboard",
    }
)
BULK_MAX = 1000  # keys one batch may touch: one transaction holds every row's lock


@dataclass(frozen=True)
class Batch:
    """What one bulk command did: its id, each key before and after, in the order given.

    id is None for a batch of one key (a plain change). A deleted key's after is the key as it
    was deleted; a rotation's after holds the new public ids (created holds the new secrets,
    shown once). Undoing a batch restores each key's before (`restore`).
    """

    id: str | None
    action: str
    before: tuple[KeyInfo, ...]
    after: tuple[KeyInfo, ...]
    created: tuple[CreatedKey, ...] = ()
    # (owner, member) pairs the batch ended (an offboarding), which its undo puts back.
    memberships: tuple[tuple[str, str], ...] = ()


Step = Callable[[Session, KeyInfo, str | None], KeyInfo]


def run_batch(
    ctx: StoreContext,
    action: str,
    keys: Sequence[KeyInfo],
    step: Step,
    conflicts: Conflicts | None = None,
    finish: Callable[[Session, str | None], None] | None = None,
) -> Batch:
    """Run step on every key in one write transaction, under one new batch id (then finish,
    for what else the batch changes in that transaction).

    Each key's before is read in the transaction, under its row lock, so an undo restores what
    the key really was, not what the caller last saw. A batch of one key is a plain change: its
    event carries no batch id (the single-key commands use this for their undo).
    """
    if not keys and finish is None:
        raise InvalidInputError("no keys were given; nothing was done")
    if len(keys) > BULK_MAX:
        raise InvalidInputError(f"at most {BULK_MAX} keys at once; nothing was done")
    if len({(k.owner, k.name) for k in keys}) != len(keys):
        raise InvalidInputError("a key was given twice; nothing was done")
    batch = audit.new_batch() if len(keys) > 1 or finish is not None else None
    before: list[KeyInfo] = []
    after: list[KeyInfo] = []
    with ctx.session(write=True, conflicts=conflicts) as session:
        for key in keys:
            row = key_row(session, key.owner, key.name, lock=True, expected_public_id=key.public_id)
            before.append(read_info(session, row, ctx.clock()))
            after.append(step(session, key, batch))
        if finish is not None:
            finish(session, batch)
        session.commit()
    return Batch(batch, action, tuple(before), tuple(after))


def disable(ctx: StoreContext, keys: Sequence[KeyInfo], reason: str) -> Batch:
    """Disable every key (refused whole if one is already disabled)."""
    check_reason(reason)
    return run_batch(
        ctx,
        "disable",
        keys,
        lambda s, k, b: lifecycle.disable_in(ctx, s, k.owner, k.name, reason, k.public_id, b),
    )


def enable(ctx: StoreContext, keys: Sequence[KeyInfo]) -> Batch:
    """Enable every key (refused whole if one is not disabled)."""
    return run_batch(
        ctx,
        "enable",
        keys,
        lambda s, k, b: lifecycle.enable_in(ctx, s, k.owner, k.name, k.public_id, b),
    )


def set_expiry(ctx: StoreContext, keys: Sequence[KeyInfo], expires: Expiry) -> Batch:
    """Set every key's expiry, each held to the lifetime policy (one refusal refuses all)."""
    return run_batch(
        ctx,
        "set expiry",
        keys,
        lambda s, k, b: lifecycle.set_expiry_in(ctx, s, k.owner, k.name, expires, k.public_id, b),
    )


def set_scopes(ctx: StoreContext, keys: Sequence[KeyInfo], scopes: Iterable[str]) -> Batch:
    """Give every key exactly these scopes (each must be in the catalog)."""
    wanted = catalog.wanted_scopes(scopes)
    return run_batch(
        ctx,
        "set scopes",
        keys,
        lambda s, k, b: lifecycle.set_scopes_in(ctx, s, k.owner, k.name, wanted, k.public_id, b),
        lifecycle.scope_conflicts(ctx, wanted),
    )


def set_limits(ctx: StoreContext, keys: Sequence[KeyInfo], limits: Iterable[Limit]) -> Batch:
    """Give every key exactly these limits (none lifts them); checked once for all."""
    wanted = check_limits(limits)
    return run_batch(
        ctx,
        "set limits",
        keys,
        lambda s, k, b: lifecycle.set_limits_in(ctx, s, k.owner, k.name, wanted, k.public_id, b),
    )


def set_networks(
    ctx: StoreContext, keys: Sequence[KeyInfo], networks: NetworkRules | None
) -> Batch:
    """Give every key exactly these network rules (None: from anywhere)."""
    return run_batch(
        ctx,
        "set networks",
        keys,
        lambda s, k, b: lifecycle.set_networks_in(
            ctx, s, k.owner, k.name, networks, k.public_id, b
        ),
    )


def set_meta(ctx: StoreContext, keys: Sequence[KeyInfo], meta: Iterable[tuple[str, str]]) -> Batch:
    """Give every key exactly this metadata (none clears it); services read it as caller.meta."""
    wanted = check_meta(meta)
    return run_batch(
        ctx,
        "set meta",
        keys,
        lambda s, k, b: lifecycle.set_meta_in(ctx, s, k.owner, k.name, wanted, k.public_id, b),
    )


def set_tags(ctx: StoreContext, keys: Sequence[KeyInfo], tags: Iterable[tuple[str, str]]) -> Batch:
    """Give every key exactly these tags (none clears them)."""
    wanted = check_tags(tags)
    return run_batch(
        ctx,
        "set tags",
        keys,
        lambda s, k, b: lifecycle.set_tags_in(ctx, s, k.owner, k.name, wanted, k.public_id, b),
    )


def transfer(ctx: StoreContext, keys: Sequence[KeyInfo], to: str) -> Batch:
    """Give every key to owner `to`, secrets and public ids unchanged (`transfer.transfer_in`)."""
    return run_batch(
        ctx,
        "transfer",
        keys,
        lambda s, k, b: transfer_in(ctx, s, k, to, b),
        {UNIQUE: lambda: NameTakenError(to, keys[0].name if len(keys) == 1 else "of these")},
    )


def end_grace(ctx: StoreContext, keys: Sequence[KeyInfo]) -> Batch:
    """End every key's grace (refused whole if one has no previous secret in grace)."""
    return run_batch(
        ctx,
        "end grace",
        keys,
        lambda s, k, b: lifecycle.end_grace_in(ctx, s, k.owner, k.name, k.public_id, b),
    )


def delete_keys(ctx: StoreContext, keys: Sequence[KeyInfo]) -> Batch:
    """Delete every key; after holds each key as it was deleted."""
    return run_batch(
        ctx,
        "delete",
        keys,
        lambda s, k, b: lifecycle.delete_in(ctx, s, k.owner, k.name, k.public_id, b),
    )


def rotate(ctx: StoreContext, keys: Sequence[KeyInfo], grace: timedelta) -> Batch:
    """Rotate every key with the same grace; created holds each new secret, shown once.

    The secrets are hashed before the transaction (argon2 must not hold the write lock).
    """
    lifecycle.check_grace(grace)
    secrets = {(k.owner, k.name): lifecycle.new_secret(ctx) for k in keys}
    created: list[CreatedKey] = []

    def step(session: Session, key: KeyInfo, batch: str | None) -> KeyInfo:
        new = lifecycle.rotate_in(
            ctx,
            session,
            key.owner,
            key.name,
            grace,
            None,
            key.public_id,
            secrets[(key.owner, key.name)],
            action="key.rotate",
            batch=batch,
        )
        created.append(new)
        return new.info

    done = run_batch(ctx, "rotate", keys, step)
    return Batch(done.id, done.action, done.before, done.after, tuple(created))


def _same(now: KeyInfo, then: KeyInfo) -> bool:
    """Whether a key still holds what a batch left it with (what an undo would overwrite)."""
    return (
        now.owner == then.owner
        and now.public_id == then.public_id
        and now.scopes == then.scopes
        and now.expires_at == then.expires_at
        and now.disabled_at == then.disabled_at
        and now.disabled_reason == then.disabled_reason
        and now.limits == then.limits
        and now.meta == then.meta
        and now.tags == then.tags
        and now.networks == then.networks
    )


def restore(ctx: StoreContext, done: Batch) -> Batch:
    """Undo a batch: put back each key's owner, expiry, disabled state, scopes, limits, network
    rules, metadata and tags as before, and the memberships it ended.

    One transaction, one new batch id; each key gets a key.restore event naming the batch it
    undoes. Refused whole (KeyStateError) if a key changed since the batch: an undo must
    never overwrite someone else's later change. Only UNDOABLE batches can be undone. Keys are
    found where the batch left them (a transfer moved them), by the ids they kept.
    """
    if done.action not in UNDOABLE:
        raise InvalidInputError(f"a {done.action} cannot be undone; nothing was done")
    then = dict(zip(((k.owner, k.name) for k in done.after), done.before, strict=True))

    def step(session: Session, key: KeyInfo, batch: str | None) -> KeyInfo:
        row = key_row(session, key.owner, key.name, lock=True, expected_public_id=key.public_id)
        now = read_info(session, row, ctx.clock())
        if not _same(now, key):
            raise KeyStateError(
                f"key {key.name!r} of {key.owner} changed after the {done.action}; "
                "nothing was undone"
            )
        target = then[(key.owner, key.name)]
        if now.leaked and not target.leaked:  # the mark is the secret's: no undo lifts it
            raise KeyStateError(lifecycle.leaked_refusal(key.owner, key.name, "restored"))
        if target.owner != row.owner:
            back = transfer_in(ctx, session, now, target.owner, batch, "undo")
            row = key_row(session, back.owner, back.name, lock=True)
        row.expires_at = target.expires_at
        row.disabled_at, row.disabled_reason = target.disabled_at, target.disabled_reason
        row.limits = limits_text(target.limits)
        row.networks = rules_text(target.networks)
        row.meta, row.tags = meta_text(target.meta), tags_text(target.tags)
        session.add(row)
        if now.scopes != target.scopes:  # a disable, enable or expiry left them as they were
            gone = set(target.scopes) - set(catalog.names_in(session))
            if gone:
                raise KeyStateError(
                    f"scope {', '.join(sorted(gone))} left the catalog after the "
                    f"{done.action}; nothing was undone"
                )
            lifecycle.replace_scopes(session, row, target.scopes)
        session.flush()
        info = read_info(session, row, ctx.clock())
        undone = audit.undoing(done.id) if done.id is not None else "undoes the change"
        detail = f"{undone} ({done.action})"
        audit.record(ctx, session, "key.restore", info, detail=detail, batch=batch)
        return info

    def members_back(session: Session, batch: str | None) -> None:
        assert done.id is not None  # memberships come with an offboarding's batch
        note = f"{audit.undoing(done.id)} ({done.action})"
        owners.add_members_in(ctx, session, done.memberships, note, batch)

    restored = tuple({s for k in done.before for s in k.scopes})
    conflicts = lifecycle.scope_conflicts(ctx, restored)
    finish = members_back if done.memberships else None
    return run_batch(ctx, "undo", done.after, step, conflicts, finish)
