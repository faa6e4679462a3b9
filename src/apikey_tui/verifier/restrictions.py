"""Every restriction on a key's use beyond its scopes, decided in one place: where the request
comes from (network rules) and how often (limits)."""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections.abc import Sequence

from sqlalchemy import Engine

from apikey_tui.clock import Clock, system_clock
from apikey_tui.config import (
    LIMITS_FAIL_ENV,
    LIMITS_PROCESSES_ENV,
    resolve_limits_url,
)
from apikey_tui.errors import InvalidInputError, LimitsUnavailableError, RateLimitedError
from apikey_tui.limits import (
    LEASE_DEFAULT,
    Admitted,
    AppliedLimit,
    Decision,
    FailMode,
    Limiter,
    Outage,
    Refused,
    parse_fail_mode,
)
from apikey_tui.limits.model import key_subject, owner_subject
from apikey_tui.limits.where import open_store
from apikey_tui.networks import ADDRESSES, Fence, address_of
from apikey_tui.store.credentials import Credential

Applied = tuple[AppliedLimit, ...]
# A network judgement: the request passes; passes but rules in shadow mode would refuse it
# (recorded); or is refused (403).
PASS, WOULD_REFUSE, REFUSE = 0, 1, 2


class Placement:
    """Where a key may be used from: its own rules and its owner's, each compiled (`Fence`).

    A request must pass both (the owner's rules are a fence around all of its keys). Judged
    before the scopes and the limits: a key used from the wrong place learns nothing of its
    scopes, and its refusal consumes no limit and no last-used time.
    """

    __slots__ = ("allowed", "fences", "noted", "ranges")

    def __init__(self, fences: tuple[Fence, ...]) -> None:
        self.fences = fences
        # Each fence as plain lists, for judge's inlined test (`Fence.admits`, without a call).
        self.ranges = tuple(
            (f.enforce, f.readable, f.deny_starts, f.deny_ends, f.allow_starts, f.allow_ends)
            for f in fences
        )
        # The usual case, one readable allow list enforced and no deny: its ranges alone.
        self.allowed: tuple[list[int], list[int]] | None = None
        if len(fences) == 1:
            one = fences[0]
            if one.enforce and one.readable and not one.deny_starts and one.allow_starts:
                self.allowed = (one.allow_starts, one.allow_ends)
        # The last-used writer's epoch in which this key's use was noted (the verifier's).
        self.noted: object = None

    def judge(self, client: str | None) -> int:
        """PASS, WOULD_REFUSE or REFUSE for a request from this address (None: unknown, which
        no rule admits). The address is parsed once per process (`networks.address_of`); then
        `Fence.admits`, inlined: two bisects over integers."""
        address = ADDRESSES.get(client)
        if address is None:
            address = address_of(client)
        allowed = self.allowed
        if allowed is not None and address is not None:
            i = bisect_right(allowed[0], address)
            return PASS if i and address <= allowed[1][i - 1] else REFUSE
        verdict = PASS
        for enforce, readable, deny_starts, deny_ends, allow_starts, allow_ends in self.ranges:
            if address is None or not readable:
                admitted = False
            elif (
                deny_starts
                and (i := bisect_right(deny_starts, address))
                and (address <= deny_ends[i - 1])
            ):
                admitted = False
            elif allow_starts:
                i = bisect_right(allow_starts, address)
                admitted = i > 0 and address <= allow_ends[i - 1]
            else:
                admitted = True
            if not admitted:
                if enforce:
                    return REFUSE
                verdict = WOULD_REFUSE
        return verdict


def placement(stored: Credential) -> Placement | None:
    """The network rules a key's requests must pass (None: from anywhere), for its Caller."""
    if stored.info.networks is None and stored.owner_networks is None:
        return None  # most keys: no list built
    rules = [r for r in (stored.info.networks, stored.owner_networks) if r is not None]
    return Placement(tuple(r.fence for r in rules)) if rules else None


def applied_limits(stored: Credential) -> Applied:
    """The limits a key's request must have room in: the key's own, then its owner's pool.

    Both secrets of a rotation count as one key (`key_subject`); every key of an owner draws
    from one pool (`owner_subject`).
    """
    info = stored.info
    if not info.limits and not stored.owner_limits:
        return ()  # most keys: no subjects named, no generators
    key = key_subject(info.owner, info.name)
    own = tuple(AppliedLimit(key, limit) for limit in info.limits)
    owner = owner_subject(info.owner)
    return own + tuple(AppliedLimit(owner, limit) for limit in stored.owner_limits)


def refusal(decision: Decision) -> RateLimitedError | LimitsUnavailableError | None:
    """The answer to a limiter's decision: None to pass, else the error to raise."""
    if isinstance(decision, Admitted):
        return None
    if isinstance(decision, Refused):
        applied = decision.limit
        of = applied.subject.partition(":")[0]
        limit = applied.limit
        return RateLimitedError(of, str(limit), limit.count, limit.seconds, decision.retry_after)
    return LimitsUnavailableError(decision.retry_after)


class Restrictions:
    """Decides whether a key, already known good and holding its scopes, may make a request now.

    Network rules are judged by `Placement` (pure, in memory: no store). Limits are judged
    after the key and its scopes (a wrong key learns nothing of limits, a 401 or 403
    consumes nothing). Limits come with the key's cached record (`Caller.limits`); an unlimited
    key costs nothing here. The limiter leases tokens from the store of counts: a Redis-protocol
    server (`limits_url`, `APIKEY_TUI_LIMITS_URL`) or else the key database.
    """

    def __init__(self, limiter: Limiter, where: str) -> None:
        self.limiter = limiter
        self.where = where  # the store of counts, password masked (for logs and errors)

    @classmethod
    def build(
        cls,
        engine: Engine,
        *,
        limits_url: str | None = None,
        fail: FailMode | str | None = None,
        processes: int | None = None,
        lease: int = LEASE_DEFAULT,
        clock: Clock = system_clock,
    ) -> Restrictions:
        """The restrictions of a verifier on `engine`: arguments first, then the environment
        (APIKEY_TUI_LIMITS_URL, APIKEY_TUI_LIMITS_FAIL, APIKEY_TUI_LIMITS_PROCESSES). No
        connection is made here."""
        url = resolve_limits_url(limits_url)
        if fail is None:
            fail = os.environ.get(LIMITS_FAIL_ENV) or FailMode.CLOSED
        mode = fail if isinstance(fail, FailMode) else parse_fail_mode(fail)
        if processes is None:
            text = os.environ.get(LIMITS_PROCESSES_ENV) or "1"
            if not (text.strip().isdigit() and text.isascii()):  # '²' is a digit to isdigit
                raise InvalidInputError(
                    f"{LIMITS_PROCESSES_ENV}={text[:20]!a} is not allowed: write a whole number"
                )
            processes = int(text)
        store, where = open_store(engine, url, clock=clock)
        outage = Outage(mode, processes)
        return cls(Limiter(store, lease=lease, outage=outage, clock=clock), where)

    def admit(self, limits: Sequence[AppliedLimit]) -> None:
        """Pass, or raise RateLimitedError (429) or LimitsUnavailableError (503). Blocking: may
        take a lease from the store (one round trip per lease, none while a window is spent)."""
        error = refusal(self.limiter.admit(limits, time.monotonic()))
        if error is not None:
            raise error

    def admit_local(self, limits: Sequence[AppliedLimit]) -> bool:
        """admit without a store call: True if it passed, False if only the store can say
        (an event loop then runs `admit` in a thread); raises like admit."""
        decision = self.limiter.admit_local(limits, time.monotonic())
        if decision is None:
            return False
        error = refusal(decision)
        if error is not None:
            raise error
        return True
