"""Prometheus metrics of a Verifier (needs the `metrics` extra: prometheus-client).

    from apikey_tui.integrations.prometheus import register
    register(verifier)                  # on prometheus_client's default REGISTRY
    register(verifier, registry)        # or on a service's own CollectorRegistry

The verifier counts in plain ints as it works (`Verifier.stats`); this collector only reads them
when Prometheus scrapes, so the request path never touches prometheus_client. Every label is
from a fixed set (the outcome of a check, the freshness mode): never a key, a public id, an
owner or a path.

Several worker processes (gunicorn) each count their own checks, and a scrape reaches one of
them: with PROMETHEUS_MULTIPROC_DIR set, each process copies its counts into prometheus_client's
per-process files every second (and at each scrape it answers), and a scrape sums them all.
"""

from __future__ import annotations

import atexit
import glob
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client import values
from prometheus_client.core import (
    REGISTRY,
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from apikey_tui import forksafety
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import BoundFreshness, CommitFreshness, PushFreshness
from apikey_tui.verifier.metrics import Timings

__all__ = ["MultiProcessVerifierCollector", "VerifierCollector", "register"]

log = logging.getLogger("apikey_tui.verifier")

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
        yield from self.counters()
        yield from self.gauges()

    def counters(self) -> Iterator[Metric]:
        """The counters and histograms: totals that only grow while the process lives."""
        stats, prefix = self.verifier.stats, self.namespace
        checks = CounterMetricFamily(
            f"{prefix}_checks",
            "API key checks by outcome: ok, missing (no ApiKey header), malformed (400), "
            "invalid (401), forbidden (403: a scope is missing), network (403: the key may not be "
            "used from there), limited (429: a limit is spent), "
            "unavailable (503).",
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
        usage = stats.usage
        if usage is not None:
            for name, count, documentation in (
                ("usage_recorded", usage.recorded, "Requests counted per key for usage."),
                ("usage_flushed", usage.flushed, "Counted requests written to the usage table."),
                (
                    "usage_dropped",
                    usage.dropped,
                    "Counted requests dropped: past the memory bound, or unwritable at close.",
                ),
            ):
                yield CounterMetricFamily(f"{prefix}_{name}", documentation, count)
            yield _histogram(
                f"{prefix}_usage_flush_seconds",
                "Time one flush of usage counts (one transaction of INSERTs) took.",
                usage.flush_seconds,
            )

    def gauges(self) -> Iterator[Metric]:
        """The gauges: what this process holds and how key changes reach it, right now."""
        prefix = self.namespace
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


# How each gauge of one process combines with the other live processes' in multiprocess mode.
_GAUGE_MODES = {
    "cached_keys": "livesum",  # verified keys remembered, all workers together
    "known_keys": "livemax",  # each worker indexes the same database
    "freshness_mode": "livemax",  # 1 for every mode some worker is in
    "revocation_bound_seconds": "livemax",
    "push_listening": "livemin",  # 1 only while every worker hears changes by push
    "push_proof_age_seconds": "livemax",  # the worker lagging most
}

# A value in the multiprocess files: (kind, family, sample name, (label, value, label, ...)).
_Key = tuple[str, str, str, tuple[str, ...]]


class _Publisher:
    """Copies one process's counts into prometheus_client's multiprocess files.

    Counters and histogram buckets are added as increments since the last copy (prometheus_client
    sums them over every process's file, live or dead, so a total never goes down when a worker
    restarts); gauges are set, and only once this process has answered a check: a preloading
    master that never checks neither pulls push_listening down to 0 nor writes at all.
    """

    INTERVAL = 1.0  # seconds between copies; a scrape copies its own process's counts first

    def __init__(self, collector: VerifierCollector) -> None:
        self._collector = collector
        self._lock = threading.Lock()
        self._values: dict[_Key, Any] = {}
        self._copied: dict[_Key, float] = {}
        self._failing = False
        self._start()
        forksafety.reset_in_child(self._after_fork)
        atexit.register(_publish_at_exit, weakref.ref(self))

    def _start(self) -> None:
        self._thread = threading.Thread(
            target=_publish_every, args=(weakref.ref(self),), name="apikey-tui-metrics", daemon=True
        )
        self._thread.start()

    def _after_fork(self) -> None:
        """In a child: count from here on (the parent copies its own), in a thread of its own.

        Runs after the verifier's own resets (registered earlier): its timings' locks are new.
        """
        self._lock = threading.Lock()
        self._values = {}
        self._copied = {
            key: count for family in self._collector.counters() for key, count in _counts(family)
        }
        self._start()

    def publish(self) -> None:
        """Copy the counts now; a failure (a full disk, a removed folder) is logged once."""
        try:
            with self._lock:
                self._copy()
        except (OSError, ValueError) as exc:
            if not self._failing:
                log.warning("verifier metrics cannot be shared with other processes: %s", exc)
            self._failing = True
            return
        self._failing = False

    def _copy(self) -> None:
        for family in self._collector.counters():
            for key, count in _counts(family):
                added = count - self._copied.get(key, 0.0)
                if added > 0:  # never down, even if a difference of plain ints briefly is
                    self._value(key, family.documentation).inc(added)
                    self._copied[key] = count
        if not any(self._collector.verifier.stats.outcomes().values()):
            return
        skip = len(self._collector.namespace) + 1
        for family in self._collector.gauges():
            mode = _GAUGE_MODES[family.name[skip:]]
            for sample in family.samples:
                key = ("gauge", family.name, sample.name, _flat(sample.labels))
                self._value(key, family.documentation, mode).set(sample.value)

    def _value(self, key: _Key, documentation: str, mode: str = "") -> Any:
        found = self._values.get(key)
        if found is None:
            kind, family, sample, labels = key
            found = self._values[key] = values.ValueClass(
                kind, family, sample, labels[::2], labels[1::2], documentation,
                multiprocess_mode=mode,
            )  # fmt: skip
        return found


def _counts(family: Metric) -> Iterator[tuple[_Key, float]]:
    """A counter's totals; a histogram's sum and each bucket's own count (files hold them so)."""
    below = 0.0
    for sample in family.samples:
        if family.type == "counter" and sample.name.endswith("_total"):
            yield ("counter", family.name, sample.name, _flat(sample.labels)), sample.value
        elif family.type == "histogram" and sample.name.endswith("_bucket"):
            key = ("histogram", family.name, sample.name, _flat(sample.labels))
            yield key, sample.value - below
            below = sample.value
        elif family.type == "histogram" and sample.name.endswith("_sum"):
            yield ("histogram", family.name, sample.name, ()), sample.value


def _flat(labels: dict[str, str]) -> tuple[str, ...]:
    """Labels as (name, value, name, value, ...) in a fixed order: a hashable key."""
    return tuple(part for item in sorted(labels.items()) for part in item)


def _publish_every(publisher: weakref.ref[_Publisher]) -> None:
    """The copying thread: ends with its publisher, or when a fork gave the child another."""
    while True:
        alive = publisher()
        if alive is None or alive._thread is not threading.current_thread():
            return
        alive.publish()
        interval = alive.INTERVAL
        del alive  # hold no reference while asleep
        time.sleep(interval)


def _publish_at_exit(publisher: weakref.ref[_Publisher]) -> None:
    """At a clean exit, copy the last counts (a worker killed by a signal, as uvicorn's end
    after a graceful shutdown, loses up to INTERVAL of them: never a decrease)."""
    alive = publisher()
    if alive is not None:
        alive.publish()


def _of_live_processes(files: list[str]) -> list[str]:
    """The files, less the live-mode gauges of processes that are gone.

    prometheus_client drops those only when the server calls mark_process_dead (gunicorn's
    child_exit hook); a worker that was killed, or a server without the hook, would otherwise
    keep its last cached_keys in the sum forever. Our scrape runs in a sibling process of the
    writers, so their pids are ours to look up.
    """
    kept = []
    for path in files:
        kind, _, rest = os.path.basename(path).partition("_")
        mode, _, pid = rest.removesuffix(".db").rpartition("_")
        if kind == "gauge" and mode.startswith("live") and pid.isdigit() and not _alive(int(pid)):
            continue
        kept.append(path)
    return kept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user
        return True
    return True


_publishers: weakref.WeakKeyDictionary[Verifier, dict[str, _Publisher]] = (
    weakref.WeakKeyDictionary()
)


class MultiProcessVerifierCollector(Collector):
    """The verifier's families summed over every process that shares PROMETHEUS_MULTIPROC_DIR.

    Only ours: a service's own MultiProcessCollector (for its own metrics) exports these too,
    so register the verifier on a registry without one.
    """

    def __init__(self, collector: VerifierCollector, path: str) -> None:
        self.collector, self.path = collector, path
        # One publisher per verifier and namespace, however many registries show it: two
        # would copy the same counts twice.
        shared = _publishers.setdefault(collector.verifier, {})
        if collector.namespace not in shared:
            shared[collector.namespace] = _Publisher(collector)
        self.publisher = shared[collector.namespace]

    def describe(self) -> Iterator[Metric]:
        """This process's families (the registry checks names for clashes with them)."""
        return self.collector.collect()

    def collect(self) -> Iterator[Metric]:
        """Copy this process's counts, then read every process's file."""
        self.publisher.publish()
        ours = {family.name for family in self.collector.collect()}
        files = _of_live_processes(glob.glob(os.path.join(self.path, "*.db")))
        merged = MultiProcessCollector.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        for family in merged:
            if family.name in ours:
                yield family


def register(
    verifier: Verifier,
    registry: CollectorRegistry = REGISTRY,
    *,
    namespace: str = "apikey_tui_verifier",
) -> VerifierCollector | MultiProcessVerifierCollector:
    """Register the verifier's metrics on registry (the default one unless given).

    One verifier per registry under one namespace: a second raises ValueError (duplicate names).
    When prometheus_client runs in multiprocess mode (PROMETHEUS_MULTIPROC_DIR was set before it
    was imported), the registry shows every process's counts summed.
    """
    collector = VerifierCollector(verifier, namespace)
    exposed: VerifierCollector | MultiProcessVerifierCollector = collector
    if getattr(values.ValueClass, "_multiprocess", False):
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ["prometheus_multiproc_dir"]
        exposed = MultiProcessVerifierCollector(collector, path)
    registry.register(exposed)
    return exposed
