"""Owners at a million keys: the offboarding dry run, the filter's terms, and caller.meta.

Each backend gets 1,000,000 keys (`scale_data.fast_fill`) spread over 2,000 owners (teams,
service accounts and people), made by 5,000 admins, tagged `env=…` and `team=t…`. The person
offboarded, alice, owns 30 keys, made 200 of the others and is responsible for a service
account with 300 keys; each of those has a month of daily usage rows (the busiest scopes).

*Dry run*: `KeyStore.offboard_preview` (what `offboard alice` prints), median of 5.
*Filter*: what the app's table asks for at a keystroke, its first window of keys
(`key_window`, `tui.key_table.CHUNK` rows), median of 3 per text; the count of all that match
follows once typing pauses (`count_keys`, recorded).
*caller.meta*: reading `Caller.meta` and one entry of it on a warm Caller, per read, against an
empty loop; and a warm `Verifier.verify` of a key with metadata against one without, in
adjacent, order-alternating pairs.

`python -m benchmarks.bench_owners [sqlite|postgresql ...]` prints one JSON object.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import text

from apikey_tui.db.models import DAY, usage_minute
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.store.types import Actor, KeyQuery
from apikey_tui.tui.key_table import CHUNK
from apikey_tui.verifier import Verifier
from benchmarks.scale_data import fast_fill

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SIZE = 1_000_000
FILTERS = (
    "tag:env=prod",
    "tag:team=t42 kind:team",
    "owner:team-7 state:disabled",
    "scope:serving tag:env=dev",
    "kind:service key-0001",
    "tag:env=prod owner:team-11 kind:team state:active scope:serving",
)


def median_ms(run: Callable[[], Any], times: int) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def shape(url: str) -> None:
    """Spread the filled keys over owners of three kinds, creators, tags and alice's share."""
    fast_fill(url, SIZE - 330, owner="bench", seed=1)
    fast_fill(url, 30, owner="alice", seed=2)
    fast_fill(url, 300, owner="svc-alice", seed=3)
    store = KeyStore.open(url)
    statements = [
        "UPDATE apikey_tui_key SET owner = 'team-' || CAST(id % 2000 AS TEXT),"
        " created_by = 'user-' || CAST(id % 5000 AS TEXT),"
        " tags = 'env=' || (CASE id % 3 WHEN 0 THEN 'prod' WHEN 1 THEN 'dev' ELSE 'test'"
        " END) || ' team=t' || CAST(id % 100 AS TEXT) WHERE owner = 'bench'",
        "UPDATE apikey_tui_key SET created_by = 'alice' WHERE created_by = 'user-17'",
        "UPDATE apikey_tui_key SET disabled_at = created_at WHERE id % 97 = 0",
        "INSERT INTO apikey_tui_owner_limit (owner, kind, description)"
        " SELECT DISTINCT owner, CASE WHEN owner LIKE 'svc-%' THEN 'service'"
        " WHEN owner LIKE 'team-%' AND owner NOT LIKE '%5' THEN 'team'"
        " WHEN owner LIKE 'team-%' THEN 'service' ELSE 'person' END, '' FROM apikey_tui_key",
        "INSERT INTO apikey_tui_owner_limit (owner, kind, description)"
        " VALUES ('bob', 'person', '')",
        "INSERT INTO apikey_tui_owner_member (owner, member) VALUES ('svc-alice', 'alice'),"
        " ('team-7', 'alice'), ('team-8', 'alice'), ('team-7', 'bob')",
    ]
    with store.engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
        ids = [
            r[0]
            for r in conn.execute(
                text(
                    "SELECT public_id FROM apikey_tui_key WHERE owner IN ('alice', 'svc-alice')"
                    " OR created_by = 'alice'"
                )
            )
        ]
        today = usage_minute(store.clock())
        today -= today % DAY
        rows = [
            {"p": pid, "m": today - d * DAY, "s": scope, "r": 10 + d}
            for pid in ids
            for d in range(30)
            for scope in ("project", "project serving")
        ]
        conn.execute(
            text(
                "INSERT INTO apikey_tui_usage (public_id, minute, span, kind, scope, requests)"
                " VALUES (:p, :m, 1440, 0, :s, :r)"
            ),
            rows,
        )
        if conn.dialect.name == "postgresql":
            conn.execute(text("ANALYZE"))
        else:
            conn.execute(text("ANALYZE"))
    store.close()


def measure_backend(url: str) -> dict[str, Any]:
    shape(url)
    store = KeyStore.open(url, actor=Actor("bench"))
    try:
        seen = store.offboard_preview("alice")
        result: dict[str, Any] = {
            "held": len(seen.keys),
            "dry_run_ms": median_ms(lambda: store.offboard_preview("alice"), 5),
        }
        filters = {}
        for words in FILTERS:
            query = KeyQuery(text=words)

            def app_read(query: KeyQuery = query) -> None:
                store.key_window(query, 0, CHUNK)

            filters[words] = {
                "ms": median_ms(app_read, 3),
                "count_ms": median_ms(lambda query=query: store.count_keys(query), 1),  # type: ignore[misc]
                "matches": store.count_keys(query),
            }
        result["filters"] = filters
        result["filter_max_ms"] = max(f["ms"] for f in filters.values())
        return result
    finally:
        store.close()


def sqlite_run() -> dict[str, Any]:
    folder = tempfile.mkdtemp()
    return measure_backend(f"sqlite:///{folder}/owners.db")


def postgres_run() -> dict[str, Any]:
    schema = f"bench_owners_{uuid.uuid4().hex[:8]}"
    libpq = POSTGRES.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        return measure_backend(f"{POSTGRES}?options=-csearch_path%3D{schema}")
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def meta_run() -> dict[str, Any]:
    """caller.meta on the warm path (SQLite; the warm path reads no database)."""
    folder = tempfile.mkdtemp()
    url = f"sqlite:///{folder}/meta.db"
    store = KeyStore.open(url, hasher=SecretHasher("cheapest"), actor=Actor("bench"))
    store.add_owner("payments", "team", meta=[("cost", "42"), ("region", "eu")])
    with_meta = store.create_key("payments", "m", ["project"], meta=[("plan", "gold")])
    without = store.create_key("bob", "plain", ["project"])
    verifier = Verifier.from_url(url, hasher=SecretHasher("cheapest"))
    try:
        a, b = f"ApiKey {with_meta.plaintext}", f"ApiKey {without.plaintext}"
        caller = verifier.verify(a, ["project"])
        verifier.verify(b, ["project"])
        n = 1_000_000

        def loop(read: bool) -> float:
            start = time.perf_counter()
            if read:
                for _ in range(n):
                    caller.meta["plan"]
            else:
                for _ in range(n):
                    pass
            return (time.perf_counter() - start) / n * 1e6

        reads = [loop(True) - loop(False) for _ in range(7)]
        pairs = []
        for i in range(31):
            first, second = (a, b) if i % 2 == 0 else (b, a)
            times = {}
            for header in (first, second):
                start = time.perf_counter()
                for _ in range(20_000):
                    verifier.verify(header, ["project"])
                times[header] = time.perf_counter() - start
            pairs.append(times[a] / times[b])
        return {
            "meta_read_us": statistics.median(reads),
            "verify_meta_ratio_median": statistics.median(pairs),
            "verify_meta_ratio_min": min(pairs),
            "verify_meta_ratio_max": max(pairs),
        }
    finally:
        verifier.close()
        store.close()


def markdown(r: Any) -> list[str]:
    """The RESULTS.md section for these numbers (for benchmarks/run.py to render)."""
    if r is None:
        return []
    lines = [
        "## Owners, offboarding and the filter's terms (`bench_owners.py`)",
        "",
        "1,000,000 keys over 2,000 owners of three kinds, made by 5,000 admins, each tagged;"
        " the person offboarded owns 30 keys, made 200 others and answers for a service"
        " account's 300, each with a month of usage. *Dry run*: `offboard PERSON` (median of"
        " 5). *Filter*: the app's read at a keystroke, its first window of rows (median of 3),"
        " the slowest of the texts listed; the count follows once typing pauses (recorded).",
        "",
        "| measure | result | target |",
        "|---|---|---|",
    ]
    for backend in ("sqlite", "postgresql"):
        b = r.get(backend)
        if b is None:
            continue
        lines += [
            f"| offboarding dry run, {backend} ({b['held']} keys held) |"
            f" {b['dry_run_ms']:.0f} ms | ≤1 s {verdict(b['dry_run_ms'] <= 1000)} |",
            f"| filter, slowest text, {backend} | {b['filter_max_ms']:.0f} ms |"
            f" ≤150 ms {verdict(b['filter_max_ms'] <= 150)} |",
        ]
    m = r.get("meta")
    if m is not None:
        lines += [
            f"| `caller.meta[...]` on a warm Caller | {m['meta_read_us'] * 1000:.0f} ns |"
            f" ≤0.1 µs {verdict(m['meta_read_us'] <= 0.1)} |",
            f"| warm `verify`, key with metadata vs without (31 pairs) |"
            f" {m['verify_meta_ratio_median']:.3f} ({m['verify_meta_ratio_min']:.2f} to"
            f" {m['verify_meta_ratio_max']:.2f}) | (recorded) |",
        ]
    lines.append("")
    for backend in ("sqlite", "postgresql"):
        b = r.get(backend)
        if b is None:
            continue
        texts = "; ".join(
            f"`{t}` {f['ms']:.0f} ms (count {f['count_ms']:.0f} ms, {f['matches']:,} keys)"
            for t, f in b["filters"].items()
        )
        lines += [f"Filter texts, {backend} (first window; count): {texts}.", ""]
    return lines


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def main() -> None:
    wanted = sys.argv[1:] or ["sqlite", "postgresql"]
    result: dict[str, Any] = {"meta": meta_run()}
    if "sqlite" in wanted:
        result["sqlite"] = sqlite_run()
    if "postgresql" in wanted:
        result["postgresql"] = postgres_run()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
