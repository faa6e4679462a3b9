"""KeyStore: the one face of the store for the CLI, the app and the leak tools.

Each method hands over to the module of its concern (`lifecycle`, `queries`, `policy`,
`catalog`, `audit`, `leaks`); the verifier's reads (`credentials`) are its base.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from apikey_tui.clock import Clock, system_clock
from apikey_tui.db import ensure_schema, make_engine
from apikey_tui.hashing import SecretHasher
from apikey_tui.limits.model import Limit
from apikey_tui.names import format_duration
from apikey_tui.networks import NetworkRules
from apikey_tui.store import (
    audit,
    bulk,
    catalog,
    leaks,
    lifecycle,
    limit_use,
    network_use,
    offboarding,
    owner_limits,
    owner_networks,
    owners,
    policy,
    queries,
    rightsizing,
    usage,
    usage_compaction,
)
from apikey_tui.store.bulk import Batch
from apikey_tui.store.credentials import Credential, CredentialReads
from apikey_tui.store.lifecycle import Deliver
from apikey_tui.store.limit_use import NEAR_CHECK_MAX, NEAR_SHARE, LimitUses, NearLimits
from apikey_tui.store.network_use import NetworkUse
from apikey_tui.store.offboarding import Preview
from apikey_tui.store.owner_limits import OwnerLimits
from apikey_tui.store.owner_networks import OwnerNetworks
from apikey_tui.store.owners import OwnerInfo
from apikey_tui.store.queries import Cancel
from apikey_tui.store.rightsizing import Proposal, Rightsizing
from apikey_tui.store.types import (
    DEFAULT_WINDOW,
    Actor,
    CreatedKey,
    Event,
    KeyDetail,
    KeyInfo,
    KeyQuery,
    Leak,
    ScopeInfo,
    ScopeUsage,
)
from apikey_tui.store.usage import KeyUsage, UsageOverview
from apikey_tui.store.usage_compaction import DEFAULT_RETENTION, Compaction

if TYPE_CHECKING:
    from apikey_tui.names import Expiry


class KeyStore(CredentialReads):
    """The one place that reads and writes keys, scopes and events in the database."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        hasher: SecretHasher | None = None,
        actor: Actor | None = None,
        create: bool = True,
        clock: Clock = system_clock,
    ) -> KeyStore:
        """Connect to the database at url, creating or checking its schema."""
        engine = make_engine(url)
        try:
            ensure_schema(engine, create=create)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine, hasher=hasher, actor=actor, clock=clock)

    # --- keys: commands ------------------------------------------------------------------------

    def create_key(
        self,
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
        """Create a key; return it with its plaintext, shown once (`lifecycle.create_key`).

        limits: the key's own (N/DURATION each, one per window length; none by default).
        networks: where it may be used from (None: anywhere).
        meta: reaches services as caller.meta; tags: for admins' filters (`store.metadata`).
        """
        return lifecycle.create_key(
            self,
            owner,
            name,
            scopes,
            expires=expires,
            deliver=deliver,
            limits=limits,
            networks=networks,
            meta=meta,
            tags=tags,
        )

    def delete_key(
        self, owner: str, name: str, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Delete a key: from the commit on, no verifier accepts it.

        With expected_public_id, refuse (KeyChangedError) if the key was recreated since the
        caller read it: a confirmation names one key, and only that one may be deleted.
        """
        return lifecycle.delete_key(self, owner, name, expected_public_id=expected_public_id)

    def recreate_key(
        self,
        owner: str,
        name: str,
        *,
        expected_public_id: str | None = None,
        deliver: Deliver | None = None,
    ) -> CreatedKey:
        """Replace a stolen key's id and secret in one transaction; same owner, name, scopes.

        The old secret stops at once (a rotation without grace, recorded as key.recreate).
        With expected_public_id, refuse (KeyChangedError) if the key was recreated meanwhile.
        deliver: as for create_key; if it raises, the key stays as it was.
        """
        return lifecycle.rotate(
            self,
            owner,
            name,
            timedelta(0),
            None,
            expected_public_id,
            deliver,
            action="key.recreate",
        )

    def rotate_key(
        self,
        owner: str,
        name: str,
        *,
        grace: timedelta,
        expires: Expiry | None = None,
        expected_public_id: str | None = None,
        deliver: Deliver | None = None,
    ) -> CreatedKey:
        """Give a key a new public id and secret; the previous secret works until now + grace.

        Same owner, name and scopes; both secrets are the same key, so a scope change, a
        disable or an expiry applies to both. The previous secret never outlives the key's
        expiry as it was, and a grace of 0 stops it at once (like recreate_key). Rotating during
        a grace ends that grace: the secret before the previous one stops at once.

        The new secret's expiry: expires if given (held to the policy like create_key's), else
        the lifetime the key had (expires_at - created_at) from now, at most the policy's
        maximum; a key that never expired keeps none unless a policy holds it.
        deliver: as for create_key; if it raises, the key stays as it was, old secret and all.
        """
        return lifecycle.rotate(
            self, owner, name, grace, expires, expected_public_id, deliver, action="key.rotate"
        )

    def end_grace(self, owner: str, name: str, *, expected_public_id: str | None = None) -> KeyInfo:
        """Stop a rotated key's previous secret now; refused (KeyStateError) when none works."""
        return lifecycle.end_grace(self, owner, name, expected_public_id=expected_public_id)

    def set_expiry(
        self, owner: str, name: str, expires: Expiry, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Set when a key stops working (a span from now, a moment, or NEVER).

        Held to the lifetime policy counted from the key's creation or last rotation: to
        extend a key past that, rotate it. A moment not in the future is refused; to stop a key
        now, disable or delete it.
        """
        return lifecycle.set_expiry(
            self, owner, name, expires, expected_public_id=expected_public_id
        )

    def disable_key(
        self, owner: str, name: str, reason: str = "", *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Switch a key off, reversibly: both secrets are refused; name, scopes, history stay."""
        return lifecycle.disable_key(
            self, owner, name, reason, expected_public_id=expected_public_id
        )

    def enable_key(
        self, owner: str, name: str, *, expected_public_id: str | None = None
    ) -> KeyInfo:
        """Switch a disabled key on again (an expired key stays expired)."""
        return lifecycle.enable_key(self, owner, name, expected_public_id=expected_public_id)

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
        return lifecycle.set_key_scopes(
            self, owner, name, scopes, expected_public_id=expected_public_id
        )

    # --- many keys at once: one transaction, one audit batch id (`bulk`) ----------------------

    def disable_keys(self, keys: Sequence[KeyInfo], reason: str = "") -> Batch:
        """Disable every key as the caller saw it; refused whole if one changed or is disabled."""
        return bulk.disable(self, keys, reason)

    def enable_keys(self, keys: Sequence[KeyInfo]) -> Batch:
        """Enable every key as the caller saw it; refused whole if one changed or is enabled."""
        return bulk.enable(self, keys)

    def set_expiry_of_keys(self, keys: Sequence[KeyInfo], expires: Expiry) -> Batch:
        """Set every key's expiry, each held to the policy; one refusal refuses all."""
        return bulk.set_expiry(self, keys, expires)

    def set_scopes_of_keys(self, keys: Sequence[KeyInfo], scopes: Iterable[str]) -> Batch:
        """Give every key exactly these scopes; refused whole if one changed meanwhile."""
        return bulk.set_scopes(self, keys, scopes)

    def set_limits_of_keys(self, keys: Sequence[KeyInfo], limits: Iterable[Limit]) -> Batch:
        """Give every key exactly these limits (none lifts them); undone like scopes."""
        return bulk.set_limits(self, keys, limits)

    def set_networks_of_keys(self, keys: Sequence[KeyInfo], networks: NetworkRules | None) -> Batch:
        """Give every key exactly these network rules (None: from anywhere); undone like
        scopes."""
        return bulk.set_networks(self, keys, networks)

    def network_use(
        self, owner: str, name: str, days: int = network_use.DEFAULT_DAYS
    ) -> NetworkUse:
        """Where the key was used from in the last `days` days, the smallest list of networks
        covering it (`proposal`), and its recent refusals for the network."""
        return network_use.network_use(self, owner, name, days)

    # --- owners' network rules: every key of the owner must pass them (`owner_networks`) -----

    def owner_networks(self, owner: str) -> NetworkRules | None:
        """The owner's network rules (None: none)."""
        return owner_networks.owner_networks(self, owner)

    def set_owner_networks(self, owner: str, networks: NetworkRules | None) -> OwnerNetworks:
        """Give an owner exactly these rules (None lifts them); audited, undone by
        `undo_owner_networks`."""
        return owner_networks.set_owner_networks(self, owner, networks)

    def undo_owner_networks(self, done: OwnerNetworks) -> OwnerNetworks:
        """Put an owner's rules back as they were before `done` (refused if changed since)."""
        return owner_networks.restore_owner_networks(self, done)

    def set_meta_of_keys(self, keys: Sequence[KeyInfo], meta: Iterable[tuple[str, str]]) -> Batch:
        """Give every key exactly this metadata (services read it as caller.meta); undoable."""
        return bulk.set_meta(self, keys, meta)

    def set_tags_of_keys(self, keys: Sequence[KeyInfo], tags: Iterable[tuple[str, str]]) -> Batch:
        """Give every key exactly these tags (none clears them); undoable."""
        return bulk.set_tags(self, keys, tags)

    def transfer_keys(self, keys: Sequence[KeyInfo], to: str) -> Batch:
        """Give keys to another owner, secrets and public ids unchanged; undoable."""
        return bulk.transfer(self, keys, to)

    # --- owners: people, teams, service accounts (`owners`) and offboarding -------------------

    def add_owner(
        self,
        name: str,
        kind: str,
        *,
        members: Iterable[str] = (),
        description: str = "",
        meta: Iterable[tuple[str, str]] = (),
    ) -> OwnerInfo:
        """Add a person, team or service account (`owners.add_owner`)."""
        return owners.add_owner(
            self, name, kind, members=members, description=description, meta=meta
        )

    def change_owner(
        self,
        name: str,
        *,
        kind: str | None = None,
        description: str | None = None,
        meta: Iterable[tuple[str, str]] | None = None,
    ) -> tuple[OwnerInfo, OwnerInfo]:
        """Change an owner's kind, description or metadata; before and after."""
        return owners.change_owner(self, name, kind=kind, description=description, meta=meta)

    def change_members(
        self, name: str, *, add: Iterable[str] = (), remove: Iterable[str] = ()
    ) -> OwnerInfo:
        """Add or remove members of a team or service account."""
        return owners.change_members(self, name, add=add, remove=remove)

    def remove_owner(self, name: str) -> OwnerInfo:
        """Remove an owner that owns no key."""
        return owners.remove_owner(self, name)

    def get_owner(self, name: str) -> OwnerInfo:
        """One owner with members, memberships and key count."""
        return owners.get_owner(self, name)

    def list_owners(self, kind: str | None = None) -> list[OwnerInfo]:
        """Every owner (of one kind), by name."""
        return owners.list_owners(self, kind)

    def offboard_preview(self, person: str) -> Preview:
        """What a person holds and what would break (`offboarding.preview`)."""
        return offboarding.preview(self, person)

    def offboard_problems(
        self, seen: Preview, transfers: dict[tuple[str, str], str]
    ) -> dict[tuple[str, str], str]:
        """What applying would refuse of each transfer, checked now
        (`offboarding.move_problems`)."""
        return offboarding.move_problems(self, seen, transfers)

    def offboard(
        self,
        seen: Preview,
        *,
        reason: str = "",
        transfers: dict[tuple[str, str], str] | None = None,
    ) -> Batch:
        """Offboard as previewed, in one batch `undo` reverses (`offboarding.apply`)."""
        return offboarding.apply(self, seen, reason=reason, transfers=transfers)

    def offboarding(self, person: str, batch: str | None = None) -> Batch:
        """The person's newest applied offboarding (or that batch) read from the audit trail,
        for `undo` (`offboarding.applied`)."""
        return offboarding.applied(self, person, batch)

    # --- owners' limits: one pool for all of an owner's keys (`owner_limits`) ----------------

    def owner_limits(self, owner: str) -> tuple[Limit, ...]:
        """The owner's limits (a pool its keys share); empty when it has none."""
        return owner_limits.owner_limits(self, owner)

    def set_owner_limits(self, owner: str, limits: Iterable[Limit]) -> OwnerLimits:
        """Give an owner exactly these limits (none lifts them); audited, undone by
        `undo_owner_limits`."""
        return owner_limits.set_owner_limits(self, owner, limits)

    def undo_owner_limits(self, done: OwnerLimits) -> OwnerLimits:
        """Put an owner's limits back as they were before `done` (refused if changed since)."""
        return owner_limits.restore_owner_limits(self, done)

    def owners_with_limits(self) -> dict[str, tuple[Limit, ...]]:
        """Every owner that has limits, with them."""
        return owner_limits.owners_with_limits(self)

    def limit_use(self, info: KeyInfo) -> LimitUses:
        """The key's limits, then its owner's, each with its use in the current window (unknown,
        with why, when the store of counts cannot be asked)."""
        return limit_use.key_limit_use(self, info)

    def owner_limit_use(self, owner: str) -> LimitUses:
        """The owner's limits, each with its use in the current window."""
        return limit_use.owner_limit_use(self, owner)

    def near_limits(
        self,
        *,
        owner: str | None = None,
        share: float = NEAR_SHARE,
        most: int | None = NEAR_CHECK_MAX,
    ) -> NearLimits:
        """Keys and owners' pools at `share` (80 %) of a limit or more in its current window;
        the first `most` limited keys and pools are read (None: all)."""
        return limit_use.near_limits(self, owner=owner, share=share, most=most)

    def end_grace_of_keys(self, keys: Sequence[KeyInfo]) -> Batch:
        """End every key's grace; refused whole if one has no previous secret in grace."""
        return bulk.end_grace(self, keys)

    def delete_keys(self, keys: Sequence[KeyInfo]) -> Batch:
        """Delete every key as the caller saw it; refused whole if one changed meanwhile."""
        return bulk.delete_keys(self, keys)

    def rotate_keys(self, keys: Sequence[KeyInfo], *, grace: timedelta) -> Batch:
        """Rotate every key with one grace; the batch's created holds each new secret, once."""
        return bulk.rotate(self, keys, grace)

    def undo(self, done: Batch) -> Batch:
        """Restore each key of an undoable batch (`bulk.UNDOABLE`, `bulk.restore`)."""
        return bulk.restore(self, done)

    # --- keys: reads ---------------------------------------------------------------------------

    def get_key(self, owner: str, name: str) -> KeyInfo:
        """Return one key of an owner by name."""
        return queries.get_key(self, owner, name)

    def list_keys(
        self,
        owner: str | None = None,
        text: str = "",
        *,
        limit: int | None = None,
        expiring_within: timedelta | None = None,
        unused_for: timedelta | None = None,
        violating_policy: bool = False,
    ) -> list[KeyInfo]:
        """List keys of one owner (or all), by owner and name (`queries.list_keys`)."""
        return queries.list_keys(
            self,
            owner,
            text,
            limit=limit,
            expiring_within=expiring_within,
            unused_for=unused_for,
            violating_policy=violating_policy,
        )

    def count_keys(self, query: KeyQuery, *, cancelled: Cancel | None = None) -> int:
        """How many keys match query (for the scrollbar and the status line)."""
        return queries.count_keys(self, query, cancelled=cancelled)

    def key_window(
        self,
        query: KeyQuery,
        offset: int,
        limit: int,
        *,
        total: int | None = None,
        after: KeyInfo | None = None,
        before: KeyInfo | None = None,
        cancelled: Cancel | None = None,
    ) -> list[KeyInfo]:
        """Keys offset … offset + limit - 1 of query's order (`queries.key_window`)."""
        return queries.key_window(
            self,
            query,
            offset,
            limit,
            total=total,
            after=after,
            before_key=before,
            cancelled=cancelled,
        )

    def key_position(
        self, query: KeyQuery, owner: str, name: str, *, cancelled: Cancel | None = None
    ) -> int | None:
        """Where the key (owner, name) stands in query's order (`queries.key_position`)."""
        return queries.key_position(self, query, owner, name, cancelled=cancelled)

    def owner_counts(self) -> list[tuple[str, int]]:
        """The owners that have keys and how many each (`queries.owner_counts`)."""
        return queries.owner_counts(self)

    def change_marker(self) -> tuple[int, datetime | None]:
        """A cheap value that changes whenever keys change (newest event) or are used."""
        return audit.change_marker(self)

    # --- the lifetime policy -------------------------------------------------------------------

    def lifetime_policy(self) -> timedelta | None:
        """The maximum lifetime of new keys, or None when no policy is set."""
        return policy.lifetime_policy(self)

    def set_lifetime_policy(self, maximum: timedelta | None) -> list[KeyInfo]:
        """Hold new keys to a maximum lifetime (None: no policy); return the keys that break it.

        Existing keys are never changed: those that break the new policy are only listed (here
        and by list_keys(violating_policy=True)), for an admin to rotate or re-expire.
        """
        policy.set_lifetime_policy(self, maximum)
        return self.list_keys(violating_policy=True)

    # --- the scope catalog ---------------------------------------------------------------------

    def list_scopes(self) -> list[ScopeInfo]:
        """Return the scope catalog, sorted by name."""
        return catalog.list_scopes(self)

    def scope_usage(self) -> list[ScopeUsage]:
        """Return the scope catalog, sorted by name, with how many keys hold each scope."""
        return catalog.scope_usage(self)

    def add_scope(self, name: str, description: str = "") -> ScopeInfo:
        """Add a scope to the catalog."""
        return catalog.add_scope(self, name, description)

    def describe_scope(self, name: str, description: str) -> ScopeInfo:
        """Change the description of a catalog scope."""
        return catalog.describe_scope(self, name, description)

    def scope_holders(self, name: str, limit: int | None = None) -> list[str]:
        """'owner/name' of the keys holding a scope, by owner and name (at most limit)."""
        return catalog.scope_holders(self, name, limit)

    def remove_scope(self, name: str) -> None:
        """Remove a scope from the catalog; refused while keys hold it."""
        catalog.remove_scope(self, name)

    # --- the audit trail -----------------------------------------------------------------------

    def events(
        self, limit: int = 50, *, key: str = "", actor: str = "", action: str = ""
    ) -> list[Event]:
        """Return the newest events first, optionally only those whose key (owner, name or
        public id), actor or action contains the given text (case-insensitive)."""
        return audit.events(self, limit, key=key, actor=actor, action=action)

    def key_detail(self, owner: str, name: str, limit: int = 100) -> KeyDetail:
        """Return a key, the event that created or last recreated it, and its newest events."""
        return audit.key_detail(self, owner, name, limit)

    # --- leaks: keys found where they must not be (issue 17) -----------------------------------

    def contain_leak(
        self, credential: Credential, *, source: str, where: str, delete: bool = False
    ) -> Leak | None:
        """Disable (or delete) a key whose secret leaked, and record it (`leaks.contain_leak`)."""
        return leaks.contain_leak(self, credential, source=source, where=where, delete=delete)

    def check_containment(self, *, delete: bool = False) -> None:
        """Refuse (one line) where contain_leak could not stop a key (`leaks.check_containment`)."""
        leaks.check_containment(self, delete=delete)

    def leaks(self, owner: str, name: str, limit: int = 20) -> list[Leak]:
        """Where and when a key was found leaked (its key.leak events), newest first."""
        return leaks.leaks(self, owner, name, limit)

    def issued(self, public_ids: Collection[str]) -> set[str]:
        """Those of these public ids this database ever made a key with (their events name
        them), in one read of the trail per 1,000 (`leaks.issued`)."""
        return leaks.issued(self, public_ids)

    # --- usage -------------------------------------------------------------------------------

    def key_usage(self, owner: str, name: str, window: timedelta = DEFAULT_WINDOW) -> KeyUsage:
        """A key's use in the window ending now: per scope, 403s, wrong secrets, day and hour
        series (`usage.key_usage`)."""
        return usage.key_usage(self, owner, name, window)

    def daily_requests(
        self, public_ids: Iterable[str], days: int = 7
    ) -> dict[str, tuple[int, ...]]:
        """Allowed requests per UTC day (oldest first, ending today) of many keys at once."""
        return usage.daily_requests(self, public_ids, days)

    def usage_overview(
        self, window: timedelta = timedelta(days=7), *, limit: int = 20, owner: str | None = None
    ) -> UsageOverview:
        """The busiest keys, keys refused with 403 and keys given wrong secrets in the window."""
        return usage.overview(self, window, limit=limit, owner=owner)

    def rightsize(
        self,
        window: timedelta = DEFAULT_WINDOW,
        *,
        owner: str | None = None,
        name: str | None = None,
    ) -> Rightsizing:
        """Proposals to drop scopes keys older than the window never used in it."""
        return rightsizing.rightsize(self, window, owner=owner, name=name)

    def proposals(
        self,
        window: timedelta = DEFAULT_WINDOW,
        *,
        owner: str | None = None,
        limit: int | None = None,
    ) -> tuple[Proposal, ...]:
        """The first `limit` right-size proposals (None: all) in the database's (owner, name)
        order; the first few take milliseconds at any scale (the Usage view's first page)."""
        return rightsizing.proposals(self, window, owner=owner, limit=limit)

    def apply_proposal(self, proposal: Proposal, window: timedelta | None = None) -> KeyInfo:
        """Narrow the key as proposed: one `key.rightsize` event naming the scopes removed.

        Refused (KeyChangedError) if the key was recreated or rotated since the proposal.
        """
        note = f"unused for {format_duration(window)}" if window is not None else ""
        info = proposal.info
        return lifecycle.narrow_scopes(
            self, info.owner, info.name, proposal.drop, expected_public_id=info.public_id, note=note
        )

    def compact_usage(self, retention: timedelta = DEFAULT_RETENTION) -> Compaction:
        """Roll old usage minutes into hours and days; delete what is past the retention."""
        return usage_compaction.compact(self, retention)
