"""Limits: what admit() adds to a check with a lease in hand, and round trips on a real store."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

from apikey_tui.limits import AppliedLimit, Grant, Limit, Limiter
from benchmarks.mode import reps

PAIRS = reps(31, 5)
LEASE = 1_000_000  # tokens a lease holds: the pairs never meet a take


class _Generous:
    """A store that always grants: the bench measures the local path, not a server."""

    def take(
        self, limit_key: str, n: int, window_seconds: int, want: int, known_boot: str
    ) -> Grant:
        now = time.time()
        return Grant(want, (now // window_seconds + 1) * window_seconds, now, "bench")

    def forget_connections(self) -> None:
        pass


def per_call_us(call: Callable[[], object], size: int = 20_000) -> float:
    """Mean microseconds per call over one batch."""
    start = time.perf_counter_ns()
    for _ in range(size):
        call()
    return (time.perf_counter_ns() - start) / size / 1000


def admit_cost() -> dict[str, float]:
    """Adjacent pairs: admit() of one limit with a lease in hand, and of a key with no limits.

    The lease is a million tokens of a day-long limit, so the pairs never meet a take."""
    limiter = Limiter(_Generous(), lease=LEASE)
    limited = (AppliedLimit("key:akbench", Limit(999_999_999, 86_400)),)
    unlimited: tuple[AppliedLimit, ...] = ()
    now = time.monotonic()
    limiter.admit(limited, now)
    held = limiter.leases(limited)  # what a verifier's cached caller holds: spent lock-free
    extra = []
    for pair in range(PAIRS):
        calls = [lambda: limiter.admit(limited, now), lambda: limiter.admit(unlimited, now)]
        if pair % 2:
            calls.reverse()
        first, second = (per_call_us(call) for call in calls)
        with_limit, without = (first, second) if pair % 2 == 0 else (second, first)
        extra.append(with_limit - without)
    return {
        "extra_us_median": statistics.median(extra),
        "extra_us_max": max(extra),
        "with_limit_us": per_call_us(lambda: limiter.admit(limited, now)),
        "without_us": per_call_us(lambda: limiter.admit(unlimited, now)),
        "spend_us": per_call_us(lambda: limiter.spend(held)),
        "no_call_us": per_call_us(lambda: None),  # a verifier that skips admit() for no limits
    }


def verify_cost() -> dict[str, float]:
    """Adjacent pairs of warm `Verifier.verify` checks (SQLite, the key database's store): a
    key with a limit and a lease in hand, and the same kind of key with no limits."""
    import tempfile

    from apikey_tui.hashing import SecretHasher
    from apikey_tui.store import KeyStore
    from apikey_tui.verifier import Verifier

    cheap = SecretHasher("cheapest")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/keys.db"
        store = KeyStore.open(url, hasher=cheap)
        day = Limit(999_999_999, 86_400)
        metered = "ApiKey " + store.create_key("b", "metered", ["project"], limits=[day]).plaintext
        free = "ApiKey " + store.create_key("b", "free", ["project"]).plaintext
        store.close()
        verifier = Verifier.from_url(url, hasher=cheap, limits_lease=LEASE)
        scopes = ("project",)
        for header in (metered, free):  # warm: cached, and the limit's lease taken
            verifier.verify(header, scopes)
        extra = []
        for pair in range(PAIRS):
            calls = [
                lambda: verifier.verify(metered, scopes),
                lambda: verifier.verify(free, scopes),
            ]
            if pair % 2:
                calls.reverse()
            first, second = (per_call_us(call) for call in calls)
            with_limit, without = (first, second) if pair % 2 == 0 else (second, first)
            extra.append(with_limit - without)
        found = {
            "verify_extra_us_median": statistics.median(extra),
            "verify_limited_us": per_call_us(lambda: verifier.verify(metered, scopes)),
            "verify_free_us": per_call_us(lambda: verifier.verify(free, scopes)),
            "store_calls": float(verifier.restrictions.limiter.store_calls),
            # every check of the metered key: the warm-up, the pairs' batches, the last batch
            "admitted": 1 + (PAIRS + 1) * 20_000,
            "pairs": PAIRS,
        }
        verifier.close()
    return found


def in_server(pairs: int = reps(8, 3), seconds: float = 5) -> dict[str, float]:
    """Inside uvicorn (`apps.starlette_checked`, SQLite, the key database's store): wrk with a
    limited key against the same server with an unlimited one, in adjacent order-alternating
    pairs; with a lease always in hand (1,000,000 tokens) and with the default lease of 16."""
    from apikey_tui.store import KeyStore
    from benchmarks.servers import Server, database, wrk

    found: dict[str, float] = {}
    with database("sqlite") as url:
        store = KeyStore.open(url)
        day = Limit(999_999_999, 86_400)
        metered = store.create_key("b", "metered", ["project"], limits=[day]).plaintext
        free = store.create_key("b", "free", ["project"]).plaintext
        store.close()
        for name, lease in (("in_hand", 1_000_000), ("lease16", 16)):
            env = {"BENCH_DATABASE_URL": url, "BENCH_LIMITS_LEASE": str(lease)}
            with Server("starlette_checked", env) as server:
                scripts = [
                    f'wrk.headers["Authorization"] = "ApiKey {key}"\n' for key in (metered, free)
                ]
                for lua in scripts:  # warm: cached, the lease taken
                    wrk(server, "/", 2, lua=lua)
                rps, cpu = [], []
                for pair in range(pairs):
                    order = scripts if pair % 2 == 0 else scripts[::-1]
                    first, second = (wrk(server, "/", seconds, lua=lua) for lua in order)
                    limited, unlimited = (first, second) if pair % 2 == 0 else (second, first)
                    rps.append(unlimited.rps / limited.rps)
                    cpu.append(limited.cpu_ms_per_request / unlimited.cpu_ms_per_request)
                found[f"{name}_rps_ratio"] = statistics.median(rps)
                found[f"{name}_rps_min"], found[f"{name}_rps_max"] = min(rps), max(rps)
                found[f"{name}_cpu_ratio"] = statistics.median(cpu)
                found[f"{name}_cpu_min"], found[f"{name}_cpu_max"] = min(cpu), max(cpu)
    found["server_pairs"] = pairs
    return found


def markdown(found: dict[str, float]) -> list[str]:
    """The RESULTS.md section, each added cost judged against issue 28's targets."""
    admit, verify = found["extra_us_median"], found["verify_extra_us_median"]
    per_admitted = found["store_calls"] / found["admitted"]
    bound = 1 / LEASE + 0.01
    pairs = found.get("pairs", 31)

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lines = [
        "## Limits: a check with a lease in hand (`bench_limits.py`)",
        "",
        "| what | time | target (issue 28) |",
        "|---|---|---|",
        f"| `admit()` of one limit, lease in hand | {found['with_limit_us']:.2f} µs | |",
        f"| `admit()` of a key with no limits | {found['without_us']:.2f} µs | |",
        *(
            [
                "| `spend()` of one held lease, without the lock (a warm check's path; its"
                f" clock read included) | {found['spend_us']:.2f} µs | |"
            ]
            if "spend_us" in found
            else []
        ),
        f"| added by the limit, median of {pairs} adjacent pairs | {admit:.2f} µs"
        f" (up to {found['extra_us_max']:.2f}) | ≤ 0.3 µs {met(admit <= 0.3)} |",
        f"| the loop's own call (`lambda: None`) | {found['no_call_us']:.2f} µs | |",
        "",
        "Inside the verifier a key without limits never calls the limiter (one attribute test);"
        " a limited key's warm check calls `spend()` on the leases its cached caller holds (no"
        " lock, no lookup: a C `next()` and a clock read):",
        "",
        "| what | result | target (issue 28) |",
        "|---|---|---|",
        f"| warm `verify()` of a key with a limit, lease in hand |"
        f" {found['verify_limited_us']:.2f} µs | |",
        f"| warm `verify()` of a key with no limits | {found['verify_free_us']:.2f} µs | |",
        f"| added by the limit, median of {pairs} adjacent pairs | {verify:.2f} µs |"
        f" ≤ 0.3 µs {met(verify <= 0.3)} |",
        f"| store round trips per admitted check (lease of {LEASE:,}):"
        f" {found['store_calls']:.0f} in {found['admitted']:,.0f} |"
        f" {per_admitted:.1e} | ≤ 1/L + 1 % {met(per_admitted <= bound)} |",
        "",
    ]
    if "in_hand_rps_ratio" not in found:
        return [*lines, "Inside uvicorn: not measured in this run.", ""]
    server_pairs = found.get("server_pairs", 8)
    in_hand = max(found["in_hand_rps_ratio"], found["in_hand_cpu_ratio"])
    lines += [
        "Inside uvicorn (`apps.starlette_checked`, SQLite, wrk 1 thread 16 connections,"
        f" {server_pairs:.0f} adjacent order-alternating pairs of 5 s on one server, a limited key"
        " against an unlimited one; median ratio, lowest and highest pair in brackets; the target"
        " is judged on both medians):",
        "",
        "| lease | unlimited / limited requests/s | limited / unlimited CPU per request |"
        " target (issue 28) |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("in_hand", "always in hand (1,000,000 tokens)"),
        ("lease16", "the default, 16 tokens (a store take every 16 requests)"),
    ):
        if f"{name}_rps_ratio" not in found:
            continue
        goal = f"≤ 1.1x {met(in_hand <= 1.1)}" if name == "in_hand" else "(recorded)"
        lines.append(
            f"| {label} | {found[f'{name}_rps_ratio']:.2f} ({found[f'{name}_rps_min']:.2f}"
            f" to {found[f'{name}_rps_max']:.2f}) | {found[f'{name}_cpu_ratio']:.2f}"
            f" ({found[f'{name}_cpu_min']:.2f} to {found[f'{name}_cpu_max']:.2f}) | {goal} |"
        )
    lines += [
        "",
        "With the default lease on SQLite every 16th request takes a lease in its own write"
        " transaction (`PRAGMA synchronous=FULL`: a sync to disk) through a CheckGate thread,"
        " which is what the second row's CPU per request pays: a larger `limits_lease` (or"
        " Redis) is what a busy SQLite service wants; not a target of issue 28, which asks for"
        " the lease in hand. Overshoot and the refused requests' round trips are counted by the"
        " tests (`tests/test_limits*.py`), not timed here.",
        "",
    ]
    return lines


if __name__ == "__main__":
    print(json.dumps({**admit_cost(), **verify_cost(), **in_server()}))
