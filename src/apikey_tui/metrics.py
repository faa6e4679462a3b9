"""Prometheus metrics of a Verifier (needs the `metrics` extra: prometheus-client).

    from apikey_tui.metrics import register
    register(verifier)                  # on prometheus_client's default REGISTRY
    register(verifier, registry)        # or on a service's own CollectorRegistry

The verifier counts in plain ints as it works (`Verifier.stats`); this collector only reads them
when Prometheus scrapes, so the request path never touches prometheus_client. Every label is
from a fixed set (the outcome of a check, the freshness mode): never a key, a public id, an
owner or a path.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    REGISTRY,
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import BoundFreshness, CommitFreshness, PushFreshness
from apikey_tui.verifier.metrics import Timings

__all__ = ["VerifierCollector", "register"]

# The counters and what they mean: (metric name without _total, VerifierStats field, help).
_COUNTERS = (
    ("cache_hits", "hits", "Checks answered from this process's cache: no query, no argon2."),
    (
        "cold_checks",
        "cold",
        "Checks that read the key database (argon2 too when the key is new to this process); "
        "requests presenting the same new key share one.",
    ),
    ("argon2", "argon2", "argon2 verifications run."),
    (
        "revalidations",
        "revalidated",
        "Cached keys re-read because the freshness generation moved (a change may have been "
        "committed); the database still held the same key.",
    ),
    (
        "revocations_seen",
        "revoked",
        "Cached keys refused after the database changed (the key was deleted or recreated).",
    ),
    (
        "database_errors",
        "database_errors",
        "Errors the database driver raised (connect or statement), retries included.",
    ),
)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _histogram(name: str, documentation: str, timings: Timings) -> HistogramMetricFamily:
    buckets, total = timings.snapshot()
    return HistogramMetricFamily(
        name,
        documentation,
        buckets=[(_le(bound), count) for bound, count in buckets],
        sum_value=total,
    )


class VerifierCollector(Collector):
    """Reads a Verifier's counters at scrape time; register it once per registry."""

    def __init__(self, verifier: Verifier, namespace: str = "apikey_tui_verifier") -> None:
        self.verifier = verifier
        self.namespace = namespace

    def describe(self) -> Iterator[Metric]:
        """The same families as collect() (the registry checks names for clashes with it)."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        """One consistent-enough read of the counters: plain ints, no lock on the request path."""
        stats, prefix = self.verifier.stats, self.namespace
        checks = CounterMetricFamily(
            f"{prefix}_checks",
            "API key checks by outcome: ok, missing (no ApiKey header), malformed (400), "
            "invalid (401), forbidden (403: a scope is missing), unavailable (503).",
            labels=["outcome"],
        )
        for outcome, count in stats.outcomes().items():
            checks.add_metric([outcome], count)
        yield checks
        for name, field, documentation in _COUNTERS:
            yield CounterMetricFamily(f"{prefix}_{name}", documentation, getattr(stats, field))
        gate = stats.gate
        yield CounterMetricFamily(
            f"{prefix}_check_timeouts",
            "Requests answered 503 because the database or argon2 did not answer in time.",
            gate.timeouts,
        )
        yield CounterMetricFamily(
            f"{prefix}_checks_rejected",
            "Requests answered 503 at once because max_pending_checks were queued or running.",
            gate.rejected,
        )
        yield _histogram(
            f"{prefix}_check_queue_seconds",
            "Time a cold check (database read, argon2) waited for a check thread.",
            gate.waited,
        )
        yield _histogram(
            f"{prefix}_check_run_seconds",
            "Time a cold check (database read, argon2) or a key index refresh ran.",
            gate.ran,
        )
        yield GaugeMetricFamily(
            f"{prefix}_cached_keys",
            "Verified keys this process remembers.",
            self.verifier.cache_size(),
        )
        yield GaugeMetricFamily(
            f"{prefix}_known_keys",
            "Public ids in this process's key index.",
            self.verifier.known_keys(),
        )
        yield from self._freshness()

    def _freshness(self) -> Iterator[Metric]:
        """How changes reach this process, and so how late a revocation can be seen."""
        stats, prefix = self.verifier.stats, self.namespace
        freshness = stats.freshness
        if isinstance(freshness, CommitFreshness):
            mode, bound = "commit", 0.0  # every check reads the SQLite commit marker
        elif isinstance(freshness, PushFreshness):
            mode, bound = "push", stats.revocation_bound
        elif isinstance(freshness, BoundFreshness):
            mode, bound = "bound", stats.revocation_bound
        else:
            mode, bound = "other", stats.revocation_bound
        info = GaugeMetricFamily(
            f"{prefix}_freshness_mode",
            "How key changes reach this process: commit (SQLite commit marker, every check), "
            "push (PostgreSQL LISTEN/NOTIFY, the bound while it is down) or bound (time bound).",
            labels=["mode"],
        )
        info.add_metric([mode], 1)
        yield info
        yield GaugeMetricFamily(
            f"{prefix}_revocation_bound_seconds",
            "The longest a deleted, recreated or re-scoped key can still be accepted when "
            "changes are not pushed (0: every check sees every commit).",
            bound,
        )
        if isinstance(freshness, PushFreshness):
            yield GaugeMetricFamily(
                f"{prefix}_push_listening",
                "1 while key changes reach this process by LISTEN/NOTIFY, 0 while the time "
                "bound applies (listener down, reconnecting, or LISTEN not working).",
                1 if freshness.listening else 0,
            )
            yield GaugeMetricFamily(
                f"{prefix}_push_proof_age_seconds",
                "Seconds since the listener last proved, by a round trip, that every change "
                "committed before it had reached this process: the most a cached answer can lag "
                "a commit right now (a gap longer than the bound switches to the bound).",
                freshness.proof_age(),
            )


def register(
    verifier: Verifier,
    registry: CollectorRegistry = REGISTRY,
    *,
    namespace: str = "apikey_tui_verifier",
) -> VerifierCollector:
    """Register the verifier's metrics on registry (the default one unless given).

    One verifier per registry under one namespace: a second raises ValueError (duplicate names).
    """
    collector = VerifierCollector(verifier, namespace)
    registry.register(collector)
    return collector
