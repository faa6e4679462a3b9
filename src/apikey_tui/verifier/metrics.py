"""What the verifier counts as it works: plain ints and fixed-bucket timings, no dependency.

The warm path pays one integer increment (`hits`); everything else is counted on the cold path
or on a refusal. `apikey_tui.integrations.prometheus` turns these into Prometheus metrics when
a service asks; nothing here knows Prometheus. No counter holds a key, a public id, a path or
any other value a caller chooses: only totals.
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any, Protocol

from apikey_tui import forksafety
from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    MalformedHeaderError,
    MissingKeyError,
    NetworkNotAllowedError,
    VerifierUnavailableError,
)

if TYPE_CHECKING:
    from apikey_tui.verifier.freshness import Freshness

# The counters (not the parts the stats only point to).
COUNTERS = (
    "hits",
    "cold_answers",
    "cold",
    "argon2",
    "revalidated",
    "revoked",
    "database_errors",
    "missing",
    "malformed",
    "invalid",
    "forbidden",
    "unavailable",
    "limited",
    "limits_unavailable",
    "network_refused",
    "network_shadowed",
)
# What a check ends in: the label values of apikey_tui_verifier_checks_total.
OUTCOMES = (
    "ok",
    "missing",
    "malformed",
    "invalid",
    "forbidden",
    "network",
    "limited",
    "unavailable",
)


class Timings:
    """A histogram with fixed bounds (seconds): counts per bucket and their sum.

    Observed on the cold path only (a check's queue wait and run), under a lock (a wait of
    0 s by `zeros` alone).
    """

    BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

    def __init__(self) -> None:
        self._counts = [0] * (len(self.BOUNDS) + 1)  # the last one is +Inf
        self._sum = 0.0
        # Durations of 0 s counted by a bare `zeros += 1` (no call, no lock, no search; CPython
        # hands the GIL over only at calls and loop ends, so no increment is lost), added to
        # the first bucket when read: an inline check's wait, twice per SQLite re-read.
        self.zeros = 0
        self._lock = threading.Lock()
        forksafety.reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it at the fork

    def observe(self, seconds: float) -> None:
        """Count one duration."""
        index = bisect.bisect_left(self.BOUNDS, seconds)  # the first bound >= seconds
        with self._lock:
            self._counts[index] += 1
            self._sum += seconds

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        """Cumulative (upper bound, count) pairs ending with +Inf, and the sum of all durations."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        counts[0] += self.zeros
        cumulative, running = [], 0
        for bound, count in zip((*self.BOUNDS, float("inf")), counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative, total


class GateCounts(Protocol):
    """What the stats read of the CheckGate: its timings and its two kinds of 503."""

    waited: Timings
    ran: Timings
    timeouts: int
    rejected: int


class UsageCounts(Protocol):
    """What the stats read of the usage counter: requests counted, written and dropped."""

    recorded: int
    flushed: int
    dropped: int
    flush_seconds: Timings


class VerifierStats:
    """Counters one Verifier keeps: read them with snapshot(), or register them for Prometheus.

    Each check is exactly one of: a cache hit (`hits`), an answer after a cold check
    (`cold_answers`), or a refusal before any caller was known (missing, malformed, invalid,
    unavailable); `forbidden` is a hit or cold answer whose key lacked a scope. Plain ints:
    an increment from two threads at once may, rarely, lose one count; no lock on the warm path.
    """

    __slots__ = (*COUNTERS, "_ok_high", "freshness", "gate", "revocation_bound", "usage")

    def __init__(
        self,
        gate: GateCounts,
        freshness: Freshness,
        revocation_bound: float,
        usage: UsageCounts | None = None,
    ) -> None:
        # Read at scrape time: the CheckGate's timings and 503 counts, and whether changes
        # reach this process by push (PostgreSQL LISTEN) or by the time bound.
        self.gate, self.freshness, self.revocation_bound = gate, freshness, revocation_bound
        self.usage = usage  # requests counted per key for the usage table (read at scrape time)
        self.hits = 0  # checks answered from the cache (no query, no argon2)
        self.cold_answers = 0  # checks answered after a cold check (their own or a shared one)
        self.cold = 0  # cold checks run: one database read, argon2 when the key is new here
        self.argon2 = 0  # argon2 verifications run
        self.revalidated = 0  # cached keys re-read because the freshness generation moved
        self.revoked = 0  # cached keys refused after the database changed (deleted, recreated)
        self.database_errors = 0  # errors the database driver raised (any statement, connect)
        self.missing = self.malformed = self.invalid = 0
        self.forbidden = self.unavailable = 0
        # A good key with its scopes refused by a limit: 429 (limited), or 503 because the store
        # of counts failed and limits fail closed (limits_unavailable, an `unavailable` outcome).
        self.limited = self.limits_unavailable = 0
        # A good key used from where its network rules refuse it: 403 (network_refused), or
        # admitted because those rules are in shadow mode (network_shadowed: ok, and recorded).
        self.network_refused = self.network_shadowed = 0
        self._ok_high = 0  # the most ok checks outcomes() has reported

    def refused(self, error: AuthError) -> None:
        """Count a refusal by its kind (a 403 for scopes is counted where it is raised)."""
        if isinstance(error, MissingKeyError):
            self.missing += 1
        elif isinstance(error, MalformedHeaderError):
            self.malformed += 1
        elif isinstance(error, VerifierUnavailableError):
            self.unavailable += 1
        elif not isinstance(error, InsufficientScopeError | NetworkNotAllowedError):
            self.invalid += 1

    def database_error(self, _context: Any = None) -> None:
        """SQLAlchemy's handle_error hook: one more error from the database driver."""
        self.database_errors += 1

    def outcomes(self) -> dict[str, int]:
        """Checks by outcome, every key of OUTCOMES present; `ok` never goes down.

        `ok` is a difference: a refused check is counted as a hit (or cold answer) first and as
        forbidden a moment later, so read between the two it is one too many. Reporting the
        highest value seen keeps it a counter (a drop would read as a reset); the extra one is
        absorbed by the next ok check.
        """
        refused = self.forbidden + self.network_refused + self.limited + self.limits_unavailable
        ok = self.hits + self.cold_answers - refused
        if ok > self._ok_high:
            self._ok_high = ok
        return {
            "ok": self._ok_high,
            "missing": self.missing,
            "malformed": self.malformed,
            "invalid": self.invalid,
            "forbidden": self.forbidden,
            "network": self.network_refused,
            "limited": self.limited,
            "unavailable": self.unavailable + self.limits_unavailable,
        }

    def snapshot(self) -> dict[str, int]:
        """Every counter by name, plus the outcomes as `checks_<outcome>`."""
        values: dict[str, int] = {name: getattr(self, name) for name in COUNTERS}
        values["check_timeouts"], values["checks_rejected"] = self.gate.timeouts, self.gate.rejected
        values.update({f"checks_{k}": v for k, v in self.outcomes().items()})
        if self.usage is not None:
            values["usage_recorded"] = self.usage.recorded
            values["usage_flushed"] = self.usage.flushed
            values["usage_dropped"] = self.usage.dropped
        return values
