"""Who is calling (Caller) and the terms keys alike in all but their name and id share."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import FrozenInstanceError
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from apikey_tui.store.credentials import NO_META

if TYPE_CHECKING:
    from apikey_tui.limits import AppliedLimit, Lease
    from apikey_tui.verifier.restrictions import Placement

__all__ = ["Caller", "Terms"]


class Terms:
    """What a caller holds besides its key's name and id, shared by every key that holds the
    same (`Verifier` makes one per owner, scope set and metadata): most keys of a service are
    alike in all but name and id, and a cache of a million keys then holds a few of these, not
    a million (issue 31: a cached key in under 300 bytes).

    noted: the last-used writer's epoch in which the keys holding these terms were noted (the
    verifier's). Shared terms never change once made: a key noted in a new epoch moves to the
    terms of its kind made for that epoch (`noted_in`), shared like them. heads: the verifier's
    newest terms of each kind, under `alike`; None for a key's own terms.
    """

    __slots__ = (
        "alike", "heads", "leases", "limits", "meta", "networks", "noted", "owner", "scopes",
    )  # fmt: skip

    def __init__(
        self,
        owner: str,
        scopes: frozenset[str],
        limits: tuple[AppliedLimit, ...] = (),
        networks: Placement | None = None,
        leases: tuple[Lease, ...] = (),
        meta: Mapping[str, str] = NO_META,
        noted: object = None,
        *,
        heads: dict[Hashable, Terms] | None = None,
        alike: Hashable = None,
    ) -> None:
        self.owner = owner
        self.scopes = scopes
        self.limits = limits
        self.networks = networks
        self.leases = leases
        self.meta = meta
        self.noted = noted
        # Where the newest terms of this kind are kept (shared terms only): a key with limits or
        # network rules holds its own (its leases and its Placement are its own), noted in
        # place. Not a link from old terms to new ones: a kind one key holds (an owner with one
        # key) is then one object, not the terms and their twin of the epoch.
        self.heads = heads
        self.alike = alike

    def noted_in(self, epoch: object) -> Terms:
        """These terms as noted in epoch: their kind's newest terms if made for that epoch, else
        new ones, the newest from now on; a key's own terms, themselves."""
        heads = self.heads
        if heads is None:
            self.noted = epoch
            return self
        alike = self.alike
        head = heads.get(alike)
        if head is None or head.noted is not epoch:
            head = Terms(
                self.owner, self.scopes, self.limits, self.networks, self.leases, self.meta,
                epoch, heads=heads, alike=alike,
            )  # fmt: skip
            heads[alike] = head  # two threads at once: each key holds one of them, both right
        return head


class Caller:
    """Who is calling: the key's owner, name, public id and scopes. Read-only.

    limits: the limits each of its requests must have room in (the key's own, then its owner's
    pool), held here so a warm check reads them with the key (`verifier.restrictions`);
    leases: the limiter's lease of each, in the same order, spent without a lookup or a lock.
    networks: where its requests may come from (its own rules and its owner's), None for
    anywhere; held here likewise. meta: the owner's metadata with the key's on top (schema
    version 11), read with the key, so a request reads it from memory.

    Two callers are equal when their owner, name, id and scopes are. Only the name and id are
    the caller's own: the rest is read from its terms (`Terms`), which keys alike share.
    """

    __slots__ = ("_terms", "key_name", "public_id")
    __match_args__ = ("owner", "key_name", "public_id", "scopes")
    key_name: str
    public_id: str
    _terms: Terms

    def __init__(
        self,
        owner: str,
        key_name: str,
        public_id: str,
        scopes: frozenset[str],
        limits: tuple[AppliedLimit, ...] = (),
        networks: Placement | None = None,
        leases: tuple[Lease, ...] = (),
        meta: Mapping[str, str] = NO_META,
    ) -> None:
        _set(self, "key_name", key_name)
        _set(self, "public_id", public_id)
        _set(self, "_terms", Terms(owner, scopes, limits, networks, leases, meta))

    # The terms' fields, read through (a property call each: the verifier's own hot paths read
    # `_terms` once instead).
    @property
    def owner(self) -> str:
        return self._terms.owner

    @property
    def scopes(self) -> frozenset[str]:
        return self._terms.scopes

    @property
    def limits(self) -> tuple[AppliedLimit, ...]:
        return self._terms.limits

    @property
    def networks(self) -> Placement | None:
        return self._terms.networks

    @property
    def leases(self) -> tuple[Lease, ...]:
        return self._terms.leases

    @property
    def meta(self) -> Mapping[str, str]:
        return self._terms.meta

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Caller):
            return NotImplemented
        mine, theirs = self._terms, other._terms
        return (
            self.public_id == other.public_id
            and self.key_name == other.key_name
            and mine.owner == theirs.owner
            and mine.scopes == theirs.scopes
        )

    def __hash__(self) -> int:
        # Equal callers have equal ids; a str caches its hash (serve-auth hashes one a request).
        return hash(self.public_id)

    def __repr__(self) -> str:
        return (
            f"Caller(owner={self.owner!r}, key_name={self.key_name!r},"
            f" public_id={self.public_id!r}, scopes={self.scopes!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # A copy or a pickle is a plain Caller: never a cache entry's digest, nor the verifier's
        # leases (its own tokens to spend); the metadata as items (a read-only view pickles not).
        t = self._terms
        fields = (t.owner, self.key_name, self.public_id, t.scopes, t.limits, t.networks)
        return (_remade, (*fields, tuple(t.meta.items())))


def _remade(
    owner: str,
    key_name: str,
    public_id: str,
    scopes: frozenset[str],
    limits: tuple[AppliedLimit, ...],
    networks: Placement | None,
    meta: tuple[tuple[str, str], ...],
) -> Caller:
    """A copied or unpickled Caller (`Caller.__reduce__`)."""
    view = MappingProxyType(dict(meta)) if meta else NO_META
    return Caller(owner, key_name, public_id, scopes, limits, networks, meta=view)


_set = object.__setattr__  # a caller's slots, set past its read-only __setattr__
