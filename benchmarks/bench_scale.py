"""The verifier at scale: start-up on a million keys, per-key invalidation, the index's size."""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import event

from apikey_tui import keyformat
from apikey_tui.db import VERIFIER_APPLICATION, make_engine
from apikey_tui.errors import AuthError
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from benchmarks.scale_data import fast_fill
from benchmarks.servers import database

CHEAPEST = SecretHasher("cheapest")
MILLION = int(os.environ.get("BENCH_SCALE_KEYS", "1000000"))


def _verifier(url: str, **options: Any) -> tuple[Verifier, list[str]]:
    """A verifier on its own engine, and the statements it runs (for counting)."""
    engine = make_engine(url, create=False, pre_ping=False, application_name=VERIFIER_APPLICATION)
    statements: list[str] = []
    event.listen(
        engine, "before_cursor_execute", lambda _c, _k, statement, *_a: statements.append(statement)
    )
    return Verifier(engine, hasher=CHEAPEST, **options), statements


def start_up(kind: str, count: int = MILLION) -> dict[str, float]:
    """A service starting on `count` keys: its first answer, the index's load and its size."""
    with database(kind) as url:
        fast_fill(url, count)
        store = KeyStore.open(url, hasher=CHEAPEST)
        key = store.create_key("bench", "presented", ["project"]).plaintext
        store.close()
        verifier, _ = _verifier(url)
        started = time.perf_counter()
        verifier.start()  # what serve-auth does at start-up: connect, schema, index load begun
        start = time.perf_counter() - started
        answered = time.perf_counter()
        caller = verifier.verify(f"ApiKey {key}")
        first = time.perf_counter() - answered
        assert caller.key_name == "presented"
        assert verifier.wait_index(600)
        loaded = time.perf_counter() - started
        size = verifier.index_bytes()
        held = verifier.known_keys()
        verifier.close()
    return {
        "keys": count,
        "start_ms": start * 1000,
        "first_answer_ms": first * 1000,
        "index_load_s": loaded,
        "index_mib": size / 2**20,
        "index_bytes_per_key": size / held,
    }


def new_key_race(
    kind: str, tries: int = 100, count: int = 10_000, flood_per_second: float = 0
) -> dict[str, Any]:
    """A key created while a log read runs, presented at once: how many first tries fail.

    With flood_per_second, a thread presents forged ids at that rate meanwhile (they spend the
    re-read budget): a new key may then get 503 (try again) but must never get 401.
    """

    with database(kind) as url:
        fast_fill(url, count)
        store = KeyStore.open(url, hasher=CHEAPEST)
        warm = store.create_key("bench", "warm", ["project"]).plaintext
        verifier, _ = _verifier(url)
        verifier.verify(f"ApiKey {warm}")
        assert verifier.wait_index(600)
        answers: dict[str, int] = {}
        stop = threading.Event()

        def flood() -> None:
            while not stop.wait(1 / flood_per_second):
                try:
                    verifier.verify(f"ApiKey {keyformat.generate()[1]}")
                except AuthError:
                    pass

        flooder = threading.Thread(target=flood, daemon=True)
        if flood_per_second:
            flooder.start()
        with ThreadPoolExecutor(1) as pool:
            for n in range(tries):
                store.describe_scope("project", f"edit {n}")  # moves the generation
                pool.submit(verifier.verify, f"ApiKey {warm}")  # starts a log read
                new = store.create_key("bench", f"new-{n}", ["project"]).plaintext
                try:
                    verifier.verify(f"ApiKey {new}")
                except AuthError as error:
                    answers[str(error.status)] = answers.get(str(error.status), 0) + 1
        stop.set()
        if flood_per_second:
            flooder.join()
        verifier.close()
        store.close()
    return {"tries": tries, "refused": answers.get("401", 0), "answers": answers,
            "flood_per_second": flood_per_second}  # fmt: skip


def pass_after_commit(count: int = 10_000) -> dict[str, float]:
    """SQLite: one pass over `count` cached keys, warm, and right after one unrelated commit."""
    with database("sqlite") as url:
        store = KeyStore.open(url, hasher=CHEAPEST)
        headers = [
            f"ApiKey {store.create_key('bench', f'k{n}', ['project']).plaintext}"
            for n in range(count)
        ]
        verifier, statements = _verifier(url)
        verifier.verify(headers[0])
        assert verifier.wait_index(600)  # the steady state: the index is in
        for header in headers:
            verifier.verify(header)

        def one_pass() -> float:
            started = time.perf_counter()
            for header in headers:
                verifier.verify(header)
            return time.perf_counter() - started

        warm = statistics.median(one_pass() for _ in range(5))
        after = []
        for n in range(5):
            store.describe_scope("project", f"unrelated {n}")
            before = len(statements)
            after.append(one_pass())
            reads = len(statements) - before
        verifier.close()
        store.close()
    cold = statistics.median(after)
    return {
        "keys": count,
        "warm_pass_s": warm,
        "after_commit_pass_s": cold,
        "ratio": cold / warm,
        "statements_in_pass": reads,
    }


def _changing_key(url: str) -> tuple[KeyStore, str, Verifier]:
    """A store, the header of its key 'changing' (scope project), and a verifier (as services
    build it, `from_url`) that has verified it once: what each re-read below starts from."""
    store = KeyStore.open(url, hasher=CHEAPEST)
    header = f"ApiKey {store.create_key('bench', 'changing', ['project']).plaintext}"
    verifier = Verifier.from_url(url, hasher=CHEAPEST)
    verifier.verify(header)
    return store, header, verifier


def _spread(times: list[float]) -> dict[str, float]:
    """Rounds, median and 90th percentile of times (µs)."""
    times = sorted(times)
    return {
        "rounds": len(times),
        "p50_us": times[len(times) // 2],
        "p90_us": times[len(times) * 9 // 10],
    }


def cold_reread(rounds: int = 400) -> dict[str, float]:
    """SQLite: verify a cached key right after it changed (re-read, argon2 skipped).

    On a verifier as services build it (`from_url`): no statement-counting listener, which
    makes each read take the listened path (a cursor, the listener's call) a service never pays.
    """
    with database("sqlite") as url:
        store, header, verifier = _changing_key(url)
        times = []
        scopes = (["project"], ["project", "serving"])
        for n in range(rounds):
            store.set_key_scopes("bench", "changing", scopes[n % 2])
            started = time.perf_counter_ns()
            verifier.verify(header)
            times.append((time.perf_counter_ns() - started) / 1000)
        assert verifier.stats.argon2 == 1
        verifier.close()
        store.close()
    return _spread(times)


def cold_reread_lean_admin(rounds: int = 400) -> dict[str, float]:
    """cold_reread with the admin's change written by sqlite3 in the same process: one row in
    the change log naming the key (the verifier reads the key again, as after any change), so
    what the store's ORM work costs the CPU's caches is left out of the timed check."""
    import sqlite3

    with database("sqlite") as url:
        store, header, verifier = _changing_key(url)
        store.close()
        admin = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        public_id = header[len("ApiKey ") :][: keyformat.ID_LENGTH]
        when = datetime.now(UTC).replace(tzinfo=None).isoformat(" ")
        times = []
        for _ in range(rounds):
            admin.execute("BEGIN IMMEDIATE")
            admin.execute(
                "INSERT INTO apikey_tui_change (public_id, changed_at) VALUES (?, ?)",
                (public_id, when),
            )
            admin.execute("COMMIT")
            started = time.perf_counter_ns()
            verifier.verify(header)
            times.append((time.perf_counter_ns() - started) / 1000)
        assert verifier.stats.argon2 == 1 and verifier.stats.cold == rounds + 1
        admin.close()
        verifier.close()
    return _spread(times)


def _admin(url: str, orders: Any) -> None:
    """In its own process: change the key's scopes at each order, answer when committed."""
    store = KeyStore.open(url, hasher=CHEAPEST)
    scopes = (["project", "serving"], ["project"])
    n = 0
    while orders.recv():
        store.set_key_scopes("bench", "changing", scopes[n % 2])
        n += 1
        orders.send(True)
    store.close()


def cold_reread_apart(rounds: int = 400) -> dict[str, float]:
    """cold_reread with the admin in another process, as a service meets a change: its own
    caches hold its own code, not the admin's (the in-process admin's ORM work evicts them
    before every timed check, which no service pays)."""
    import multiprocessing

    with database("sqlite") as url:
        store, header, verifier = _changing_key(url)
        store.close()
        here, there = multiprocessing.get_context("spawn").Pipe()
        admin = multiprocessing.get_context("spawn").Process(target=_admin, args=(url, there))
        admin.start()
        times = []
        try:
            for _ in range(rounds):
                here.send(True)
                # The admin's answer, or a loud failure: an admin that died (it imports this
                # module afresh, spawned) would leave recv() waiting for ever.
                if not here.poll(60):
                    raise RuntimeError(f"the admin process stopped answering ({admin.exitcode})")
                here.recv()
                started = time.perf_counter_ns()
                verifier.verify(header)
                times.append((time.perf_counter_ns() - started) / 1000)
        finally:
            here.send(False)
            admin.join(60)
        assert verifier.stats.argon2 == 1
        verifier.close()
    return _spread(times)


def forged_flood_while_loading(
    kind: str, count: int = MILLION, requests: int = 20_000
) -> dict[str, Any]:
    """Forged ids during the index's load: the key reads they buy, and the memory they cost."""
    import resource

    with database(kind) as url:
        fast_fill(url, count)
        verifier, statements = _verifier(url)

        forged = [f"ApiKey {keyformat.generate()[1]}" for _ in range(2000)]
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        answers: dict[str, int] = {}
        done = 0
        while done < requests and not verifier.wait_index(0):
            try:
                verifier.verify(forged[done % len(forged)])
            except AuthError as error:
                answers[str(error.status)] = answers.get(str(error.status), 0) + 1
            done += 1
        seconds = time.perf_counter() - started
        reads = sum("apikey_tui_key_scope" in s for s in statements)
        verifier.wait_index(600)
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        verifier.close()
    return {
        "requests": done,
        "seconds": seconds,
        "key_reads": reads,
        "reads_per_second": reads / seconds,
        "answers": answers,
        "max_rss_growth_mib": (rss_after - rss_before) / 1024,
    }


def main() -> None:
    """Print one JSON object with every measurement."""
    which = sys.argv[1:] or ["start_up", "race", "after_commit", "reread", "flood"]
    results: dict[str, Any] = {}
    if "after_commit" in which:
        results["after_commit"] = pass_after_commit()
    if "reread" in which:
        results["cold_reread"] = cold_reread()
        results["cold_reread_apart"] = cold_reread_apart()
        results["cold_reread_lean_admin"] = cold_reread_lean_admin()
    for kind in ("sqlite", "postgresql"):
        if "race" in which:
            results[f"race_{kind}"] = new_key_race(kind)
            results[f"race_flood_{kind}"] = new_key_race(kind, flood_per_second=200)
        if "start_up" in which:
            results[f"start_up_{kind}"] = start_up(kind)
        if "flood" in which:
            results[f"flood_{kind}"] = forged_flood_while_loading(kind)
    print(json.dumps(results))


if __name__ == "__main__":
    main()


def markdown(r: Any) -> list[str]:
    """The scale section of RESULTS.md, each figure beside the issue's "today" and its target."""
    if r is None:
        return []

    def met(ok: bool) -> str:
        return "met" if ok else "**missed**"

    lines = [
        "## The verifier at scale (`bench_scale.py`)",
        "",
        "Before: the figures the scale issue measured on this machine with release 0.3 (and,"
        " where marked, 0.3 rerun here side by side). After: this release.",
        "",
        "| measure | before | after | target |",
        "|---|---|---|---|",
    ]
    for kind in ("sqlite", "postgresql"):
        s = r.get(f"start_up_{kind}")
        if s:
            lines.append(
                f"| first request after start, {s['keys']:,} keys, {kind} | 503 at 2 s;"
                " 111-112 ms (PostgreSQL, issue 31) |"
                f" 200 in {s['first_answer_ms']:.0f} ms"
                + (
                    f" after `start()` ({s['start_ms']:.0f} ms at start-up)"
                    if "start_ms" in s
                    else ""
                )
                + f" (index loaded in the background in"
                f" {s['index_load_s']:.1f} s) | 200 in ≤ 100 ms:"
                f" {met(s['first_answer_ms'] <= 100)} |"
            )
    for kind in ("sqlite", "postgresql"):
        race = r.get(f"race_{kind}")
        if race:
            lines.append(
                f"| new key's first request while a log read runs, {kind} | 401 (5 of 5) |"
                f" {race['refused']} of {race['tries']} refused | 0 of 100:"
                f" {met(race['refused'] == 0)} |"
            )
        race = r.get(f"race_flood_{kind}")
        if race:
            retry = race["answers"].get("503", 0)
            lines.append(
                f"| the same under {race['flood_per_second']:.0f} forged ids a second, {kind} |"
                f" 401 (5 of 100, PostgreSQL) | {race['refused']} of {race['tries']} refused"
                f" (401), {retry} asked to retry (503) | no 401: {met(race['refused'] == 0)} |"
            )
    a = r.get("after_commit")
    if a:
        before = r.get("after_commit_0_3")
        old = (
            f"{before['after_commit_pass_s']:.2f} s ({before['ratio']:.0f}x warm; 0.3 rerun)"
            if before
            else "4.6 s (177x warm)"
        )
        lines.append(
            f"| SQLite pass over {a['keys']:,} cached keys after one unrelated commit | {old} |"
            f" {a['after_commit_pass_s']:.3f} s ({a['ratio']:.2f}x the warm pass of"
            f" {a['warm_pass_s']:.3f} s; {a['statements_in_pass']} statement(s)) | ≤ 2x warm:"
            f" {met(a['ratio'] <= 2)} |"
        )
    for kind in ("sqlite", "postgresql"):
        s = r.get(f"start_up_{kind}")
        if s:
            lines.append(
                f"| key index memory, {s['keys']:,} keys, {kind} | 292-370 MiB |"
                f" {s['index_mib']:.1f} MiB ({s['index_bytes_per_key']:.1f} B a key) |"
                f" ≤ 40 MiB: {met(s['index_mib'] <= 40)} |"
            )
    c = r.get("cold_reread")
    if c:
        before = r.get("cold_reread_0_3")
        old = f"{before['p50_us']:.0f} µs (0.3 rerun)" if before else "~480 µs"
        lines.append(
            f"| re-read of a changed, cached key (argon2 skipped), SQLite, median | {old} |"
            f" {c['p50_us']:.0f} µs (p90 {c['p90_us']:.0f} µs) | ≤ 100 µs:"
            f" {met(c['p50_us'] <= 100)} |"
        )
    lean = r.get("cold_reread_lean_admin")
    if lean:
        lines.append(
            "| the same, the admin's change written by sqlite3 in this process (no ORM work"
            f" between checks), median | — | {lean['p50_us']:.0f} µs (p90 {lean['p90_us']:.0f} µs)"
            " | (recorded) |"
        )
    a = r.get("cold_reread_apart")
    if a:
        lines.append(
            "| the same, the admin in another process (as in a deployment), median | — |"
            f" {a['p50_us']:.0f} µs (p90 {a['p90_us']:.0f} µs) | ≤ 100 µs:"
            f" {met(a['p50_us'] <= 100)} |"
        )
    lines.append("")
    for kind in ("sqlite", "postgresql"):
        f = r.get(f"flood_{kind}")
        if f:
            lines.append(
                f"Forged ids while the index of {MILLION:,} keys loads ({kind}):"
                f" {f['requests']:,} requests in {f['seconds']:.1f} s bought {f['key_reads']}"
                f" key reads ({f['reads_per_second']:.0f} a second; the budget is 1,000, then"
                f" 1,000 a second), answers {f['answers']}, peak RSS +{f['max_rss_growth_mib']:.0f}"
                " MiB (the index itself included; `ru_maxrss`, so a later run in the same"
                " process shows only growth past the earlier peak)."
            )
    lines += [
        "",
        "The re-read is timed the way a request pays it: `verify()` right after an admin"
        " changed that key's scopes, so it includes the change-log read that notices the change"
        " and the key's own read (inline on SQLite: no handoff to a check thread).",
        "",
        "How much of the in-process figure is the admin's: with its change written by sqlite3"
        " instead of the store (one row in the change log naming the key, which the verifier"
        " reads again as after any change), the same `verify()` pays what the store's ORM work"
        " costs it, in the CPU's caches, no more (the row above; 72 to 82 µs against 126 to 131"
        " in scratch runs of 600 rounds on this machine). A service's admins run elsewhere.",
        " The apart row is the deployment's figure. The run of 2026-11-28 05:16 read both"
        " re-reads 2 to 4 times slower than the runs before and after it (121 and 74 µs, then"
        " 128 and 81: each another machine), with the same code on this path.",
        "",
    ]
    return lines
