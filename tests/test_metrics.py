"""Prometheus metrics of the verifier: outcomes, cache, cold checks, revocation, errors, labels."""

from __future__ import annotations

import http.client
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from apikey_tui import keyformat
from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    InvalidKeyError,
    RateLimitedError,
    VerifierUnavailableError,
)
from apikey_tui.integrations.prometheus import register
from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import PushFreshness
from apikey_tui.verifier.gate import CheckGate
from apikey_tui.verifier.metrics import OUTCOMES
from tests.conftest import CHEAP, eventually
from tests.test_gunicorn_load import Gunicorn, get

NS = "apikey_tui_verifier"


def header(key: str) -> str:
    """The Authorization value for key."""
    return f"ApiKey {key}"


def wrong(key: str) -> str:
    """The key with its last character changed (so its checksum fails): never the key itself."""
    return key[:-1] + ("b" if key[-1] == "a" else "a")


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """One sample's value; fails the test when the sample is missing."""
    found = registry.get_sample_value(f"{NS}_{name}", labels)
    assert found is not None, f"no sample {name} {labels}"
    return found


def outcomes(registry: CollectorRegistry) -> dict[str, float]:
    """apikey_tui_verifier_checks_total by outcome."""
    return {o: value(registry, "checks_total", outcome=o) for o in OUTCOMES}


def test_importing_the_verifier_never_needs_prometheus_client() -> None:
    """Without prometheus_client the verifier and its adapters import; only metrics needs it."""
    code = (
        "import sys\n"
        "sys.modules['prometheus_client'] = None  # as if not installed\n"
        "import apikey_tui.verifier, apikey_tui.integrations.asgi, apikey_tui.integrations.wsgi\n"
        "try:\n"
        "    import apikey_tui.integrations.prometheus\n"
        "except ImportError:\n"
        "    print('metrics needs prometheus_client')\n"
        "print(sorted(m for m, v in sys.modules.items() if m.startswith('prometheus') and v))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["metrics needs prometheus_client", "[]"]


def test_checks_are_counted_by_outcome(store: KeyStore, database_url: str) -> None:
    """Each check lands in one outcome (a 429 as limited); hits, cold checks and argon2 runs add
    up, on both DBs."""
    proj = store.create_key("alice", "proj", ["project"])
    both = store.create_key("alice", "both", ["project", "serving"], limits=[parse_limit("1/d")])
    verifier = Verifier.from_url(
        database_url, hasher=CHEAP, revocation_bound=60, flush_interval=3600
    )
    registry = CollectorRegistry()
    register(verifier, registry)
    freshness = verifier._freshness
    if isinstance(freshness, PushFreshness):
        # The listener drops the cache when it connects: let it connect before the checks.
        freshness.generation()
        assert eventually(lambda: freshness.listening)
    try:
        assert outcomes(registry) == dict.fromkeys(OUTCOMES, 0)
        for refused in (None, "ApiKey a b", header(wrong(proj.plaintext))):
            with pytest.raises(AuthError):
                verifier.verify(refused)
        assert verifier.verify(header(proj.plaintext), ["project"]).key_name == "proj"
        # On PostgreSQL a commit by any test sharing the database is pushed and drops the
        # cache: check again until the cache answers, and count those checks too.
        again = 0
        while verifier.cached(header(proj.plaintext), ["project"]) is None:
            assert verifier.verify(header(proj.plaintext), ["project"]).key_name == "proj"
            again += 1
            assert again < 100, "the cache never answered"
        with pytest.raises(InsufficientScopeError):
            verifier.verify(header(proj.plaintext), ["serving"])
        assert verifier.verify(header(both.plaintext), ["serving"]).key_name == "both"
        with pytest.raises(RateLimitedError):  # its one request a day is spent
            verifier.verify(header(both.plaintext), ["serving"])
        assert outcomes(registry) == {
            "ok": 3 + again,
            "missing": 1,
            "malformed": 1,
            "invalid": 1,
            "forbidden": 1,
            "network": 0,
            "limited": 1,
            "unavailable": 0,
        }
        # A revalidation never runs argon2 again: one run per key verified in this process.
        assert value(registry, "argon2_total") == 2
        hits, cold = value(registry, "cache_hits_total"), value(registry, "cold_checks_total")
        assert hits + cold == 5 + again and cold >= 2
        queued = value(registry, "check_queue_seconds_count")
        assert queued == value(registry, "check_run_seconds_count") >= cold
        assert value(registry, "check_queue_seconds_bucket", le="+Inf") == queued
        assert verifier.wait_index()  # the key index loads in the background
        assert value(registry, "cached_keys") == 2 and value(registry, "known_keys") == 2

        # Revocation: the cached key is refused once the deletion is seen (at once on SQLite,
        # within the bound on PostgreSQL: by push, or the 60 s bound if the listener is down).
        store.delete_key("alice", "proj")
        passed_meanwhile = 0
        deadline = time.monotonic() + 70
        while True:
            try:
                verifier.verify(header(proj.plaintext))
            except InvalidKeyError:
                break
            passed_meanwhile += 1
            assert time.monotonic() < deadline, "the deleted key was never refused"
            time.sleep(0.01)
        assert value(registry, "revocations_seen_total") == 1
        assert outcomes(registry)["ok"] == 3 + again + passed_meanwhile
        assert outcomes(registry)["invalid"] == 2
        mode = "commit" if database_url.startswith("sqlite") else "push"
        assert value(registry, "freshness_mode", mode=mode) == 1
        if mode == "push":
            assert value(registry, "push_listening") in (0, 1)
            assert value(registry, "push_proof_age_seconds") >= 0
            assert value(registry, "revocation_bound_seconds") == 60
        else:
            assert value(registry, "revocation_bound_seconds") == 0
    finally:
        verifier.close()


def test_sqlite_counts_hits_revalidations_exactly(store: KeyStore, sqlite_url: str) -> None:
    """On SQLite, where freshness moves only with commits, each counter has its exact value."""
    del store  # the fixture's store is on the parametrized URL; this test wants SQLite only
    keys = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = keys.create_key("bob", "k", ["project"]).plaintext
    verifier = Verifier.from_url(sqlite_url, hasher=CHEAP, flush_interval=3600)
    registry = CollectorRegistry()
    register(verifier, registry)
    try:
        for _ in range(5):
            verifier.verify(header(key))
        keys.create_key("bob", "other", ["project"])  # another key's change: still a hit
        verifier.verify(header(key))
        keys.set_key_scopes("bob", "k", ["project", "serving"])  # this key's: re-read once
        verifier.verify(header(key))
        verifier.verify(header(key))
        assert value(registry, "cache_hits_total") == 6
        assert value(registry, "cold_checks_total") == 2
        assert value(registry, "revalidations_total") == 1
        assert value(registry, "argon2_total") == 1
        assert value(registry, "revocations_seen_total") == 0
        assert outcomes(registry)["ok"] == 8
    finally:
        verifier.close()
        keys.close()


def test_unreachable_database_counts_unavailable_and_database_errors() -> None:
    """A database that refuses connections: the check is 503 and the driver's error is counted."""
    verifier = Verifier.from_url(
        "postgresql+psycopg://nobody@127.0.0.1:1/none", hasher=CHEAP, revocation_bound=0
    )
    registry = CollectorRegistry()
    register(verifier, registry)
    try:
        _, key = keyformat.generate()
        with pytest.raises(VerifierUnavailableError):
            verifier.verify(header(key))
        assert outcomes(registry)["unavailable"] == 1
        assert value(registry, "database_errors_total") >= 1
        assert value(registry, "freshness_mode", mode="bound") == 1
    finally:
        verifier.close()


def test_full_queue_and_deadline_are_counted() -> None:
    """A 503 for a full check queue and one for a passed deadline each have their counter."""
    verifier = Verifier.from_url(
        "sqlite://", hasher=CHEAP, check_workers=1, max_pending_checks=1, check_timeout=0.05
    )
    registry = CollectorRegistry()
    register(verifier, registry)
    gate = verifier.stats.gate
    assert isinstance(gate, CheckGate)
    release = threading.Event()
    try:
        busy = gate.submit("busy", release.wait)
        with pytest.raises(VerifierUnavailableError):
            gate.submit("another", lambda: None)
        with pytest.raises(VerifierUnavailableError):
            gate.wait(busy, time.monotonic())
        assert value(registry, "checks_rejected_total") == 1
        assert value(registry, "check_timeouts_total") == 1
    finally:
        release.set()
        verifier.close()


def test_no_metric_holds_a_key_an_id_or_a_name(store: KeyStore, database_url: str) -> None:
    """The exposition names no key, public id, owner or key name; labels come from fixed sets."""
    created = store.create_key("carol-secret-owner", "very-private-name", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, flush_interval=3600)
    registry = CollectorRegistry()
    register(verifier, registry)
    try:
        verifier.verify(header(created.plaintext))
        with pytest.raises(InvalidKeyError):
            verifier.verify(header(wrong(created.plaintext)))
        text = generate_latest(registry).decode()
        for secret in (
            created.plaintext,
            wrong(created.plaintext),
            created.info.public_id,
            "carol-secret-owner",
            "very-private-name",
        ):
            assert secret not in text
        for family in registry.collect():
            for sample in family.samples:
                assert set(sample.labels) <= {"outcome", "mode", "le"}, sample
                assert sample.labels.get("outcome", "ok") in OUTCOMES
                assert sample.labels.get("mode", "push") in {"commit", "push", "bound", "other"}
    finally:
        verifier.close()


def test_one_registry_takes_one_verifier() -> None:
    """A service's own registry takes the metrics; registering a second verifier there fails."""
    first = Verifier.from_url("sqlite://", hasher=CHEAP)
    second = Verifier.from_url("sqlite://", hasher=CHEAP)
    registry = CollectorRegistry()
    register(first, registry)
    with pytest.raises(ValueError, match="Duplicated"):
        register(second, registry)
    register(second, registry, namespace="other_verifier")
    assert registry.get_sample_value("other_verifier_cache_hits_total") == 0
    first.close()
    second.close()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    """One GET /metrics on a fresh connection: every counter and histogram sample by name and
    labels (the values Prometheus requires never to go down)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        page = response.read().decode()
        assert response.status == 200, page
    finally:
        connection.close()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        if family.type in ("counter", "histogram")
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


OK = (f"{NS}_checks_total", (("outcome", "ok"),))


def answered(folder: Path) -> set[int]:
    """The pids whose verifier has answered a check: those that wrote gauges to the folder."""
    return {int(path.stem.rpartition("_")[2]) for path in folder.glob("gauge_livesum_*.db")}


def ok_in_files(folder: Path) -> float:
    """checks_total{outcome="ok"} summed from the workers' files, without asking any worker."""
    files = [str(path) for path in folder.glob("*.db")]
    for family in MultiProcessCollector.merge(files):  # type: ignore[no-untyped-call]
        for sample in family.samples:
            if sample.name == OK[0] and sample.labels == dict(OK[1]):
                return float(sample.value)
    return 0.0


def gauge(port: int, name: str, **labels: str) -> float | None:
    """One gauge sample from a fresh scrape, None when absent."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        page = connection.getresponse().read().decode()
    finally:
        connection.close()
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == f"{NS}_{name}" and sample.labels == labels:
                return float(sample.value)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("preload", [False, True], ids=["app-per-worker", "preload"])
def test_scrapes_of_two_gunicorn_workers_never_see_a_counter_go_down(
    tmp_path: Path, preload: bool
) -> None:
    """serve-auth's app in 2 gunicorn workers with PROMETHEUS_MULTIPROC_DIR (built in each
    worker, or in the master before forking): whichever worker answers a scrape, and across a
    worker's restart, no counter ever decreases, checks_total adds up every worker's checks,
    and a gauge counts only live workers that have checked keys."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    keys = KeyStore.open(url)  # the profile the workers' verifiers hash with: no upgrade
    key = keys.create_key("alice", "scraped", ["project"]).plaintext
    keys.close()
    folder = tmp_path / "prometheus"
    folder.mkdir()
    running = Gunicorn(
        url,
        tmp_path / "gunicorn.log",
        app=f"apikey_tui.integrations.forward_auth:create_app({url!r})",
        workers=2,
        ready_path="/metrics",
        env={"PROMETHEUS_MULTIPROC_DIR": str(folder)},
        preload=preload,
    )
    sent, scrapes = 0, list[Samples]()

    def rounds(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            for _ in range(5):  # fresh connections: the kernel spreads them over both workers
                assert get(running.port, "/auth?scope=project", key) == 200
                sent += 1
            scrapes.extend(scrape(running.port) for _ in range(4))

    try:
        running.wait_ready()
        rounds(8)
        # Every worker's checks show up (each copies its counts within a second) ...
        assert eventually(lambda: scrape(running.port).get(OK) == sent), scrape(running.port)
        assert gauge(running.port, "freshness_mode", mode="commit") == 1
        # ... and stay counted after a worker that answered checks is replaced.
        first = running.workers()
        assert eventually(lambda: bool(answered(folder) & first))
        victim = min(answered(folder) & first)
        os.kill(victim, signal.SIGTERM)
        assert eventually(lambda: len(running.workers() - first) == 1), "no new worker"
        running.wait_ready()
        rounds(8)
        assert eventually(lambda: scrape(running.port).get(OK) == sent), scrape(running.port)
        scrapes.append(scrape(running.port))
        # Every worker copies its counts by itself, scraped or not (each has its own thread).
        for _ in range(10):
            assert get(running.port, "/auth?scope=project", key) == 200
            sent += 1
        assert eventually(lambda: ok_in_files(folder) == sent), (ok_in_files(folder), sent)
        # A gauge sums live workers only: the key is cached once in each that has checked it.
        assert eventually(
            lambda: gauge(running.port, "cached_keys") == len(answered(folder) - {victim})
        ), (gauge(running.port, "cached_keys"), answered(folder), victim)
    finally:
        running.stop()
    for before, after in itertools.pairwise(scrapes):
        fell = {k[0]: (before[k], v) for k, v in after.items() if v < before.get(k, 0)}
        assert not fell, f"counters that went down between two scrapes: {fell}"


def test_ok_never_goes_down_while_a_forbidden_check_is_half_counted() -> None:
    """A check counted as a hit but not yet as forbidden is ok for a scrape; the scrape after
    it is counted forbidden must not show fewer ok checks (Prometheus would see a reset)."""
    verifier = Verifier.from_url("sqlite://", hasher=CHEAP)
    registry = CollectorRegistry()
    register(verifier, registry)
    try:
        verifier.stats.hits += 1  # a cached check, scraped before its scope test refuses it
        first = outcomes(registry)["ok"]
        verifier.stats.forbidden += 1  # its 403 is counted
        assert outcomes(registry)["ok"] >= first
        verifier.stats.hits += 1  # a cached check that passes
        assert outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0), "ok": 1, "forbidden": 1}
    finally:
        verifier.close()
