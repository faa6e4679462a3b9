"""Verifier per check, warm and cold, on SQLite and PostgreSQL, against a floor and a peer."""

from __future__ import annotations

import hashlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier
from benchmarks.bulk import fill
from benchmarks.servers import database


def fresh_copies(text: str, count: int) -> list[str]:
    """count equal strings, each its own object whose hash nobody has computed: what a server
    hands each request (it decodes the header anew). One string reused would carry the hash
    that the warm path's digest (the header's own hash) computed at its first call."""
    return [text[:-1] + text[-1:] for _ in range(count)]


def per_call_us(
    call: Callable[..., object], batches: int = 200, size: int = 250, fresh: str | None = None
) -> float:
    """Median over batches of the mean microseconds per call (timer overhead amortised).

    fresh: each call is given its own copy of this string (`fresh_copies`, made before the
    batch's timer starts), as `call(copy)`."""
    means = []
    for _ in range(batches):
        if fresh is None:
            start = time.perf_counter_ns()
            for _ in range(size):
                call()
        else:
            copies = fresh_copies(fresh, size)
            start = time.perf_counter_ns()
            for copy in copies:
                call(copy)
        means.append((time.perf_counter_ns() - start) / size / 1000)
    return statistics.median(means)


def checks(kind: str) -> dict[str, float]:
    """Warm and cold check times with the real argon2 profile."""
    with database(kind) as url:
        keys = fill(url, 100, profile="key-secret-v1")
        verifier = Verifier.from_url(url)
        header = f"ApiKey {keys[0]}"
        verifier.verify(header, ("project",))
        warm = per_call_us(lambda copy: verifier.verify(copy, ("project",)), fresh=header)
        cold = []
        for key in keys[1:]:
            start = time.perf_counter()
            verifier.verify(f"ApiKey {key}")
            cold.append((time.perf_counter() - start) * 1000)
        verifier.close()
    return {"warm_us": warm, "cold_ms": statistics.median(cold)}


def unprepared_read(pairs: int = 31, size: int = 200) -> dict[str, float]:
    """A check that reads the database (revocation_bound=0: one SELECT, no argon2) on a direct
    PostgreSQL connection: our default (never prepare, safe behind PgBouncer's transaction
    pooling) against psycopg preparing it at first use (?prepare_threshold=0).

    Adjacent batches in alternating order; the ratio is the median of the pairs' ratios.
    """
    with database("postgresql") as url:
        key = fill(url, 1, profile="cheapest")[0]
        header = f"ApiKey {key}"
        verifiers = {
            "unprepared": Verifier.from_url(
                url, hasher=SecretHasher("cheapest"), revocation_bound=0
            ),
            "prepared": Verifier.from_url(
                f"{url}&prepare_threshold=0", hasher=SecretHasher("cheapest"), revocation_bound=0
            ),
        }
        times: dict[str, list[float]] = {"unprepared": [], "prepared": []}
        for verifier in verifiers.values():
            for _ in range(size):  # warm up: the pool connected, the statement prepared
                verifier.verify(header)
        for n in range(pairs):
            order = ("unprepared", "prepared") if n % 2 == 0 else ("prepared", "unprepared")
            for name in order:
                check = verifiers[name].verify
                times[name].append(per_call_us(check, batches=1, size=size, fresh=header))
        for verifier in verifiers.values():
            verifier.close()
    ratios = [u / p for u, p in zip(times["unprepared"], times["prepared"], strict=True)]
    return {
        "unprepared_us": statistics.median(times["unprepared"]),
        "prepared_us": statistics.median(times["prepared"]),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def floor_us() -> float:
    """The floor: SHA-256 of the key and one dict lookup, nothing else."""
    key = "ak" + "a" * 16 + "." + "b" * 59
    table = {hashlib.sha256(key.encode()).digest(): "caller"}
    return per_call_us(lambda copy: table[hashlib.sha256(copy.encode()).digest()], fresh=key)


def floor_split_us() -> float:
    """The floor with the header split: `table[sha256(header[7:])]`, what verify() is held to
    (at most 2.5x, issue 31)."""
    header = "ApiKey ak" + "a" * 16 + "." + "b" * 59
    table = {hashlib.sha256(header[7:].encode()).digest(): "caller"}
    return per_call_us(lambda copy: table[hashlib.sha256(copy[7:].encode()).digest()], fresh=header)


PEER = """
import json
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework",
                    "rest_framework_api_key"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from rest_framework_api_key.crypto import KeyGenerator
from rest_framework_api_key.models import APIKey
from benchmarks.bench_verifier import per_call_us  # the same timer as ours
obj, key = APIKey.objects.create_key(name="bench")
assert APIKey.objects.is_valid(key)
generator = KeyGenerator()
print(json.dumps({
    "is_valid_us": per_call_us(lambda: APIKey.objects.is_valid(key), batches=100, size=50),
    "crypto_only_us": per_call_us(lambda: generator.verify(key, obj.hashed_key)),
}))
"""


def peer() -> dict[str, float]:
    """djangorestframework-api-key's check (in its own process, for Django's settings)."""
    result = subprocess.run(
        [sys.executable, "-c", PEER],
        capture_output=True, text=True, check=True, timeout=300, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    data: dict[str, float] = json.loads(result.stdout)
    return data


def deep_size(roots: list[object]) -> int:
    """Bytes of the objects reachable from roots, each counted once (slots and containers)."""
    seen: set[int] = set()
    stack = list(roots)
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        else:
            for cls in type(item).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if hasattr(item, slot):
                        stack.append(getattr(item, slot))
    return total


def cache_memory(count: int = 100_000) -> dict[str, float]:
    """Bytes the verifier's cache holds for count distinct verified keys."""
    with database("sqlite") as url:
        keys = fill(url, count)
        verifier = Verifier.from_url(url, hasher=SecretHasher("cheapest"))
        for key in keys:
            verifier.verify(f"ApiKey {key}")
        assert verifier.cache_size() == count
        size = deep_size([verifier._entries, verifier._scope_sets])
        # The key index (public id -> fingerprint of every key in the database) is held
        # whatever the traffic; measured apart from the cache.
        assert verifier.wait_index() and verifier.known_keys() == count
        index = verifier.index_bytes()
        verifier.close()
    return {
        "cache_mib_100k": size / 2**20,
        "cache_bytes_per_key": size / count,
        "index_mib_100k": index / 2**20,
    }


FILL = """
import sys
from benchmarks.bulk import fill
print("\\n".join(fill(sys.argv[1], int(sys.argv[2]))))
"""

CACHE_RSS = """
import ctypes, gc, json, os, sys
from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier
url, count, record = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
headers = [f"ApiKey {key}" for key in sys.stdin.read().split()]  # filled by another process
verifier = Verifier.from_url(
    url, hasher=SecretHasher("cheapest"), record_usage=record, flush_interval=3600
)
verifier.verify(headers[-1])
assert verifier.wait_index()
gc.collect()
before = rss()
for header in headers[:count]:
    verifier.verify(header)
gc.collect()
after = rss()
ctypes.CDLL("libc.so.6").malloc_trim(0)
print(json.dumps({"rss": (after - before) / count, "trimmed": (rss() - before) / count}))
sys.stdout.flush()  # os._exit drops what a pipe's buffer holds
os._exit(0)  # no close: its flush would write every count
"""


def cache_rss(count: int = 100_000) -> dict[str, float]:
    """What the verified cache costs a process: RSS growth per key while `count` distinct keys
    are verified once each (a fresh process each, after the key index loaded), with usage
    recording on and off; also after malloc_trim (what the allocator could give back).

    The keys are made by another process: made in the measured one, the memory their making
    freed would hold part of the cache at no cost in RSS (80 bytes a key of 398 did)."""
    result: dict[str, float] = {}
    root = Path(__file__).parent.parent
    for record in (True, False):
        with database("sqlite") as url:
            keys = subprocess.run(
                [sys.executable, "-c", FILL, url, str(count + 1)],
                capture_output=True, text=True, check=True, timeout=900, cwd=root,
            ).stdout  # fmt: skip
            run = subprocess.run(
                [sys.executable, "-c", CACHE_RSS, url, str(count), "1" if record else "0"],
                input=keys, capture_output=True, text=True, check=True, timeout=900, cwd=root,
            )  # fmt: skip
        data = json.loads(run.stdout)
        name = "rss_bytes_per_key" + ("" if record else "_unrecorded")
        result[name], result[name + "_trimmed"] = data["rss"], data["trimmed"]
    return result


def main() -> None:
    """Print one JSON object with every measurement."""
    results: dict[str, object] = {
        "floor_us": floor_us(),
        "floor_split_us": floor_split_us(),
        "peer": peer(),
    }
    for kind in ("sqlite", "postgresql"):
        results[kind] = checks(kind)
    results["unprepared_read"] = unprepared_read()
    results.update(cache_memory())
    results.update(cache_rss())
    print(json.dumps(results))


if __name__ == "__main__":
    main()
