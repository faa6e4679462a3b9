"""Key commands: create, delete, recreate, rotate, end a grace, expire, disable, enable, rescope.

Each runs in one write transaction that locks the key's row, records its event, and commits
whole or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlmodel import Session, col, delete

from apikey_tui import keyformat
from apikey_tui.db import FOREIGN_KEY, UNIQUE, Conflicts
from apikey_tui.db.models import KeyRow, KeyScopeRow, PreviousIdRow
from apikey_tui.errors import DuplicateKeyNameError, InvalidInputError, KeyStateError
from apikey_tui.hashing import fingerprint
from apikey_tui.limits.model import Limit, limits_text
from apikey_tui.names import (
    OWNER_MAX,
    check_key_name,
    check_owner,
    check_reason,
    check_span,
    format_moment,
)
from apikey_tui.networks import NetworkRules, rules_note, rules_of_text, rules_text
from apikey_tui.store import audit, catalog, owners, policy
from apikey_tui.store.context import StoreContext
from apikey_tui.store.metadata import (
    Pairs,
    check_meta,
    check_tags,
    meta_of_text,
    meta_text,
    pairs_words,
    tags_text,
)
from apikey_tui.store.records import in_grace, key_info, key_row, read_info
from apikey_tui.store.types import (
    LEAK_REASON,
    LEAK_REPLACED,
    CreatedKey,
    KeyInfo,
    leak_reason,
    marks_leak,
)

if TYPE_CHECKING:
    from apikey_tui.names import Expiry

Deliver = Callable[[CreatedKey], None]
"""Hands a new key's secret over (the CLI writes it to stdout) inside the transaction that makes
it, before the commit. If it raises, the transaction is rolled back: a secret nobody received
leaves no key, and a recreate or rotation leaves the key as it was. The audit trail records only
what was committed, so such an attempt leaves no event. Should the commit fail after it, the
secret handed over belongs to no key (the caller says so). It runs while the transaction holds
the key's row lock (on SQLite the database's write lock), so it must be quick: a short write."""


def create_key(
    ctx: StoreContext,
    owner: str,
    name: str,
    scopes: Iterable[str],
    *,
    expires: Expiry | None = None,
    deliver: Deliver | None = None,
    limits: Iterable[Limit] = (),
    networks: NetworkRules | None = None,
    meta: Iterable[tuple[str, str]] = (),
    tags: Iterable[tuple[str, str]] = (),
) -> CreatedKey:
    """Create a key; return it with its plaintext, which is shown once and never stored.

    The owner gets a row, a person, if it has none (`owners.ensure_person`); the key records
    its creator (the actor). meta and tags: checked by `metadata` (none by default).

    expires: a span from now, a moment, or NEVER; None means the default, which is the
    lifetime policy's maximum when one is set and no expiry otherwise. An expiry past the
    policy's maximum (NEVER included) is refused, never shortened (`policy.expiry`).
    deliver: hands the new key over before the commit (see Deliver); if it raises, the key
    was never created.
    """
    check_owner(owner)
    check_key_name(name)
    wanted = catalog.wanted_scopes(scopes)
    stored_limits = limits_text(limits)
    stored_meta, stored_tags = meta_text(check_meta(meta)), tags_text(check_tags(tags))
    parts, plaintext = keyformat.generate()
    # Hash before the transaction: argon2 work must not hold the database's write lock.
    secret_hash = ctx.hasher.hash(parts.secret)
    now = ctx.clock()
    row = KeyRow(
        owner=owner,
        name=name,
        public_id=parts.public_id,
        secret_hash=secret_hash,
        fingerprint=fingerprint(parts.public_id, parts.secret),
        created_at=now,
        limits=stored_limits,
        networks=rules_text(networks),
        created_by=ctx.actor.user[:OWNER_MAX],
        meta=stored_meta,
        tags=stored_tags,
    )
    conflicts = {
        UNIQUE: lambda: DuplicateKeyNameError(owner, name),
        FOREIGN_KEY: lambda: catalog.removed_meanwhile(ctx, wanted),
    }
    with ctx.session(write=True, conflicts=conflicts) as session:
        catalog.check_catalog(session, wanted)
        owners.ensure_person(session, owner)
        row.expires_at = policy.expiry(session, expires, start=now, now=now)
        session.add(row)
        session.flush()
        assert row.id is not None
        session.add_all(KeyScopeRow(key_id=row.id, scope=s) for s in wanted)
        info = key_info(row, wanted, now)
        detail = f"scopes: {' '.join(wanted)}" + policy.expiry_note(row.expires_at)
        if stored_limits:
            detail += f"; limits: {stored_limits}"
        if networks is not None:
            detail += "; " + rules_note(networks, None).partition(" (were")[0]
        if stored_tags:
            detail += f"; tags: {stored_tags}"
        if stored_meta:
            detail += "; meta: " + pairs_words(meta_of_text(stored_meta))
        audit.record(ctx, session, "key.create", info, detail=detail)
        if deliver is not None:
            deliver(CreatedKey(info, plaintext))
        session.commit()
    return CreatedKey(info, plaintext)


def delete_key(
    ctx: StoreContext, owner: str, name: str, *, expected_public_id: str | None
) -> KeyInfo:
    """Delete a key: from the commit on, no verifier accepts it (`KeyStore.delete_key`)."""
    with ctx.session(write=True) as session:
        info = delete_in(ctx, session, owner, name, expected_public_id)
        session.commit()
    return info


def delete_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """delete_key's work inside session's transaction (the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    info = read_info(session, row, ctx.clock())
    session.delete(row)  # the key's scope rows go with it (ON DELETE CASCADE)
    audit.record(ctx, session, "key.delete", info, batch=batch)
    return info


@dataclass(frozen=True)
class NewSecret:
    """A new public id and secret, hashed before any transaction: argon2 work must never hold
    the database's write lock. Its repr names no secret."""

    public_id: str
    plaintext: str = field(repr=False)
    secret_hash: str = field(repr=False)
    fingerprint: str = field(repr=False)


def new_secret(ctx: StoreContext) -> NewSecret:
    """Generate and hash a key's next secret (outside any transaction)."""
    parts, plaintext = keyformat.generate()
    return NewSecret(
        parts.public_id,
        plaintext,
        ctx.hasher.hash(parts.secret),
        fingerprint(parts.public_id, parts.secret),
    )


def check_grace(grace: timedelta) -> timedelta:
    """Return grace if a rotation may give it, else raise InvalidInputError."""
    if grace < timedelta(0):
        raise InvalidInputError("a grace period cannot be negative")
    return check_span(grace, "grace")


def rotate(
    ctx: StoreContext,
    owner: str,
    name: str,
    grace: timedelta,
    expires: Expiry | None,
    expected_public_id: str | None,
    deliver: Deliver | None,
    *,
    action: str,
) -> CreatedKey:
    """A new public id and secret for the key; the previous one works for grace (key.rotate),
    or stops at once (key.recreate). See `KeyStore.rotate_key` and `KeyStore.recreate_key`."""
    check_grace(grace)
    secret = new_secret(ctx)
    with ctx.session(write=True) as session:
        created = rotate_in(
            ctx, session, owner, name, grace, expires, expected_public_id, secret, action=action
        )
        if deliver is not None:
            deliver(created)
        session.commit()
    return created


def rotate_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    grace: timedelta,
    expires: Expiry | None,
    expected_public_id: str | None,
    secret: NewSecret,
    *,
    action: str,
    batch: str | None = None,
) -> CreatedKey:
    """rotate's work inside session's transaction, with a secret hashed beforehand."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    now = ctx.clock()
    replaced = (row.public_id, row.old_public_id)  # both stop or change: logged as changed
    notes = [f"replaces {row.public_id}"]
    if in_grace(row.old_public_id, row.grace_until, now):
        notes.append(f"ends the grace of {row.old_public_id} now")
    lifetime = row.expires_at - row.created_at if row.expires_at is not None else None
    new_expiry = policy.expiry(session, expires, start=now, now=now, inherited=lifetime)
    until = policy.second(now + grace)
    if row.expires_at is not None:
        until = min(until, row.expires_at)  # a grace never revives an expired secret
    if marks_leak(row.disabled_reason):
        # A leaked secret gets no grace (enabled later, it would work again), and the mark
        # passes from the secret to the history: the key stays disabled, and may be enabled.
        assert row.disabled_reason is not None
        where = row.disabled_reason.removeprefix(LEAK_REASON)
        row.disabled_reason = leak_reason(where, LEAK_REPLACED)
        until = now
        notes.append("no grace: the key leaked")
    if until > now:
        row.old_public_id, row.old_secret_hash = row.public_id, row.secret_hash
        row.old_fingerprint, row.grace_until = row.fingerprint, until
        notes[0] += f", which works until {format_moment(until)}"
    else:
        row.old_public_id = row.old_secret_hash = row.old_fingerprint = None
        row.grace_until = None
        notes[0] += " at once" if action == "key.rotate" else ""
    # The replaced id stays the key's: the usage counted under it is the key's evidence.
    assert row.id is not None
    session.add(PreviousIdRow(public_id=row.public_id, key_id=row.id, replaced_at=now))
    row.public_id, row.secret_hash = secret.public_id, secret.secret_hash
    row.fingerprint = secret.fingerprint
    row.created_at, row.last_used_at = now, None
    row.expires_at = new_expiry
    session.add(row)
    info = read_info(session, row, now)
    detail = "; ".join(notes) + policy.expiry_note(new_expiry)
    audit.record(ctx, session, action, info, detail=detail, also=replaced, batch=batch)
    return CreatedKey(info, secret.plaintext)


def end_grace(
    ctx: StoreContext, owner: str, name: str, *, expected_public_id: str | None
) -> KeyInfo:
    """Stop a rotated key's previous secret now; refused (KeyStateError) when none works."""
    with ctx.session(write=True) as session:
        info = end_grace_in(ctx, session, owner, name, expected_public_id)
        session.commit()
    return info


def end_grace_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """end_grace's work inside session's transaction (the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    previous = row.old_public_id
    now = ctx.clock()
    if not in_grace(previous, row.grace_until, now):
        raise KeyStateError(
            f"key {name!r} of {owner} has no previous secret in grace; nothing was done"
        )
    row.old_public_id = row.old_secret_hash = row.old_fingerprint = None
    row.grace_until = None
    session.add(row)
    info = read_info(session, row, now)
    detail = f"{previous} stopped working"
    audit.record(ctx, session, "key.end-grace", info, detail=detail, also=[previous], batch=batch)
    return info


def set_expiry(
    ctx: StoreContext, owner: str, name: str, expires: Expiry, *, expected_public_id: str | None
) -> KeyInfo:
    """Set when a key stops working, held to the policy (`KeyStore.set_expiry`)."""
    with ctx.session(write=True) as session:
        info = set_expiry_in(ctx, session, owner, name, expires, expected_public_id)
        session.commit()
    return info


def set_expiry_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    expires: Expiry,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """set_expiry's work inside session's transaction (the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    now = ctx.clock()
    row.expires_at = policy.expiry(session, expires, start=row.created_at, now=now)
    session.add(row)
    info = read_info(session, row, now)
    detail = policy.expiry_note(row.expires_at).removeprefix("; ") or "never expires"
    audit.record(ctx, session, "key.expire-set", info, detail=detail, batch=batch)
    return info


def disable_key(
    ctx: StoreContext, owner: str, name: str, reason: str, *, expected_public_id: str | None
) -> KeyInfo:
    """Switch a key off, reversibly: both secrets are refused; name, scopes, history stay."""
    check_reason(reason)
    with ctx.session(write=True) as session:
        info = disable_in(ctx, session, owner, name, reason, expected_public_id)
        session.commit()
    return info


def disable_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    reason: str,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """disable_key's work inside session's transaction (the caller checked reason, commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    if row.disabled_at is not None:
        raise KeyStateError(
            f"key {name!r} of {owner} is already disabled (since "
            f"{format_moment(row.disabled_at)}); nothing was done"
        )
    now = ctx.clock()
    row.disabled_at, row.disabled_reason = now, reason or None
    session.add(row)
    info = read_info(session, row, now)
    audit.record(ctx, session, "key.disable", info, detail=reason, batch=batch)
    return info


def enable_key(
    ctx: StoreContext, owner: str, name: str, *, expected_public_id: str | None
) -> KeyInfo:
    """Switch a disabled key on again (an expired key stays expired)."""
    with ctx.session(write=True) as session:
        info = enable_in(ctx, session, owner, name, expected_public_id)
        session.commit()
    return info


def enable_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """enable_key's work inside session's transaction (the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    if row.disabled_at is None:
        raise KeyStateError(f"key {name!r} of {owner} is not disabled; nothing was done")
    if marks_leak(row.disabled_reason):
        raise KeyStateError(leaked_refusal(owner, name, "enabled"))
    since = row.disabled_at
    row.disabled_at = row.disabled_reason = None
    session.add(row)
    info = read_info(session, row, ctx.clock())
    detail = f"disabled since {format_moment(since)}"
    audit.record(ctx, session, "key.enable", info, detail=detail, batch=batch)
    return info


def leaked_refusal(owner: str, name: str, done: str) -> str:
    """Why a leaked key cannot be `done` (enabled, restored): its secret must never work again."""
    return (
        f"key {name!r} of {owner} cannot be {done}: its secret leaked and must never work "
        "again; recreate or rotate it (a new secret), then enable it; nothing was done"
    )


def replace_scopes(session: Session, row: KeyRow, scopes: Iterable[str]) -> None:
    """Make the key's scope rows exactly these, in the caller's transaction."""
    assert row.id is not None
    session.exec(delete(KeyScopeRow).where(col(KeyScopeRow.key_id) == row.id))
    session.add_all(KeyScopeRow(key_id=row.id, scope=s) for s in scopes)


def set_key_scopes(
    ctx: StoreContext,
    owner: str,
    name: str,
    scopes: Iterable[str],
    *,
    expected_public_id: str | None,
) -> KeyInfo:
    """Replace the scopes a key holds; verifiers see the change like a deletion."""
    wanted = catalog.wanted_scopes(scopes)
    with ctx.session(write=True, conflicts=scope_conflicts(ctx, wanted)) as session:
        info = set_scopes_in(ctx, session, owner, name, wanted, expected_public_id)
        session.commit()
    return info


def scope_conflicts(ctx: StoreContext, wanted: tuple[str, ...]) -> Conflicts:
    """A scope checked in the catalog and removed from it before the commit: said as such."""
    return {FOREIGN_KEY: lambda: catalog.removed_meanwhile(ctx, wanted)}


def set_scopes_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    wanted: tuple[str, ...],
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """set_key_scopes's work inside session's transaction (wanted: checked; the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    catalog.check_catalog(session, wanted)
    replace_scopes(session, row, wanted)
    info = key_info(row, wanted, ctx.clock())
    detail = f"scopes: {' '.join(wanted)}"
    audit.record(ctx, session, "key.rescope", info, detail=detail, batch=batch)
    return info


def set_limits_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    limits: tuple[Limit, ...],
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """Give a key exactly these limits (checked: `check_limits`; none lifts them) inside
    session's transaction; one key.limits event, which reaches the change log (the caller
    commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    was = row.limits
    row.limits = limits_text(limits)
    session.add(row)
    session.flush()
    info = read_info(session, row, ctx.clock())
    detail = f"limits: {row.limits or 'none'} (were {was or 'none'})"
    audit.record(ctx, session, "key.limits", info, detail=detail, batch=batch)
    return info


def set_networks_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    networks: NetworkRules | None,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """Give a key exactly these network rules (None: usable from anywhere) inside session's
    transaction; one key.networks event, which reaches the change log (the caller commits)."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    was = rules_of_text(row.networks)
    row.networks = rules_text(networks)
    session.add(row)
    session.flush()
    info = read_info(session, row, ctx.clock())
    audit.record(ctx, session, "key.networks", info, detail=rules_note(networks, was), batch=batch)
    return info


def set_meta_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    meta: Pairs,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """Give a key exactly this metadata (checked: `metadata.check_meta`) inside session's
    transaction; one key.meta event, in the change log: services read it as caller.meta."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    row.meta = meta_text(meta)
    session.add(row)
    session.flush()
    info = read_info(session, row, ctx.clock())
    audit.record(ctx, session, "key.meta", info, detail=pairs_words(meta) or "none", batch=batch)
    return info


def set_tags_in(
    ctx: StoreContext,
    session: Session,
    owner: str,
    name: str,
    tags: Pairs,
    expected_public_id: str | None,
    batch: str | None = None,
) -> KeyInfo:
    """Give a key exactly these tags (checked: `metadata.check_tags`) inside session's
    transaction; one key.tags event."""
    row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
    row.tags = tags_text(tags)
    session.add(row)
    session.flush()
    info = read_info(session, row, ctx.clock())
    audit.record(ctx, session, "key.tags", info, detail=row.tags or "none", batch=batch)
    return info


def narrow_scopes(
    ctx: StoreContext,
    owner: str,
    name: str,
    drop: Iterable[str],
    *,
    expected_public_id: str | None,
    action: str = "key.rightsize",
    note: str = "",
) -> KeyInfo:
    """Remove these scopes from a key (those it still holds), keeping at least one.

    One event (action, detail "removed: a b" and the note) and the change-log entry, in the
    key's own transaction: a scope added meanwhile stays, a recreated key is refused.
    """
    removing = set(drop)
    with ctx.session(write=True) as session:
        row = key_row(session, owner, name, lock=True, expected_public_id=expected_public_id)
        held = read_info(session, row, ctx.clock()).scopes
        removed = tuple(s for s in held if s in removing)
        keep = tuple(s for s in held if s not in removing)
        if not removed:  # already narrower: nothing to record
            return read_info(session, row, ctx.clock())
        if not keep:
            raise InvalidInputError("a key needs at least one scope")
        assert row.id is not None
        session.exec(
            delete(KeyScopeRow).where(
                col(KeyScopeRow.key_id) == row.id, col(KeyScopeRow.scope).in_(removed)
            )
        )
        info = key_info(row, keep, ctx.clock())
        detail = f"removed: {' '.join(removed)}" + (f" ({note})" if note else "")
        audit.record(ctx, session, action, info, detail=detail)
        session.commit()
    return info
