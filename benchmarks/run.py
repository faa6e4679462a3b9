"""Run every benchmark and write benchmarks/RESULTS.md: `python -m benchmarks.run`."""

from __future__ import annotations

import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TIMEOUT = 3600  # seconds one benchmark may take before it counts as hung


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def spread(r: Any, what: str) -> str:
    """A paired ratio: its median and the range of the pairs."""
    return (
        f"{r[f'{what}_ratio_median']:.3f} ({r[f'{what}_ratio_min']:.2f} to "
        f"{r[f'{what}_ratio_max']:.2f})"
    )


STEPS = {
    "route_rules": "route rule lookup (`RouteScopes.required`)",
    "header": "finding the Authorization header (`authorization_header`)",
    "warm": "the header's hash (its digest), cache lookup, freshness and last-used test"
    " (`Verifier._warm`, one function)",
    "authorize": "scope test (`Verifier.authorize`)",
}


def middleware_section(m: Any) -> list[str]:
    """In-server cost of the ASGI middleware and the FastAPI dependency."""
    sm, fd, ins, prof = (
        m["starlette_middleware"],
        m["fastapi_dependency"],
        m["in_server"],
        m["profile"],
    )
    cost = (1 - sm["rps_ratio_median"]) * 100
    share = ins["check_p50_us"] / sm["cpu_us_baseline"] * 100
    ip = m.get("in_process")
    dep_added = ip["dependency_added_us"] if ip is not None else 0.0
    lines = [
        "## Inside a running server: ASGI middleware, FastAPI dependency (`bench_middleware.py`)",
        "",
        "Two uvicorn servers (one worker each; SQLite key database) run side by side and wrk (1"
        f" thread, 16 connections) loads them in {sm['pairs']} adjacent pairs of"
        f" {sm['seconds_per_run']:.0f}-second runs, alternating which goes first. Every request to"
        " either server carries the same valid, already cached key, so the check is the only"
        " difference. A ratio is subject / baseline within one pair: shown as the median of the"
        " pairs and, in brackets, the lowest and highest pair.",
        "",
        "| subject vs baseline | requests/s | ratio of requests/s | server CPU per request |"
        " ratio of CPU per request | target |",
        "|---|---|---|---|---|---|",
        f"| minimal Starlette app (one plain-text route) with `ApiKeyMiddleware` vs the same app"
        f" without it | {sm['rps_subject']:.0f} vs {sm['rps_baseline']:.0f} |"
        f" {spread(sm, 'rps')} | {sm['cpu_us_subject']:.0f} vs {sm['cpu_us_baseline']:.0f} µs |"
        f" {spread(sm, 'cpu')} | costs ≤ 3 %: {verdict(cost <= 3 and share <= 3)}"
        f" (requests/s {cost:.1f} %, timed span {share:.1f} % of the app's CPU) |",
        f'| FastAPI `ApiKeyAuth(verifier).require("project")` vs a hand-written dependency'
        " (SHA-256 of the key, one dict lookup, a scope test) |"
        f" {fd['rps_subject']:.0f} vs {fd['rps_baseline']:.0f} | {spread(fd, 'rps')} |"
        f" {fd['cpu_us_subject']:.0f} vs {fd['cpu_us_baseline']:.0f} µs | {spread(fd, 'cpu')} |"
        f" at least as fast: {verdict(fd['rps_ratio_median'] >= 1 and dep_added <= 0)}"
        f" ({dep_added:+.1f} µs per request without a server) |",
        "",
        "The target is judged on both measures: a paired wrk median alone cannot resolve 3 % on"
        " this shared 2-core machine (wrk, the server and other people's test runs share it;"
        " single pairs land on either side of 1), while the timed span below is steady from run"
        " to run.",
        "",
        "**The middleware's own work, timed inside the server** (a timestamp in an outer ASGI"
        " layer and another at the app's entry, alternating with a path that skips the"
        f" middleware to subtract the timers): **{ins['check_p50_us']:.1f} µs** median per"
        f" request ({ins['check_p10_us']:.1f} µs at the 10th percentile), against"
        f" {sm['cpu_us_baseline']:.0f} µs of server CPU per request for the bare app:"
        f" {share:.1f} % of it. The same warm check takes 1 to 2 µs in a tight loop"
        " (`bench_verifier.py`).",
        "",
        "Where those microseconds go: each step replaced in turn by a constant answer"
        " (`apps.starlette_knockout`, one server per variant,"
        f" {prof.get('rounds', 5)} rounds of 3-second wrk runs in alternating order). A step's"
        " cost is the span with it minus the span without it, at the 10th percentile: requests"
        " that were not preempted, the only figure steady enough to split a few microseconds"
        " (medians move by ±1 µs between runs here).",
        "",
        "| step | cost (10th percentile) |",
        "|---|---|",
    ]
    for step, label in STEPS.items():
        lines.append(f"| {label} | {prof['step_cost_p10_us'][step]:.1f} µs |")
    lines += [
        "| what is left with every step constant (two coroutine calls, scope and state work),"
        f" timers subtracted | {prof['span_p10_us']['everything'] - ins['control_p10_us']:.1f} µs"
        " |",
        f"| the whole span, every step in place (median: {prof['span_p50_us']['none']:.1f} µs) |"
        f" {prof['span_p10_us']['none']:.1f} µs |",
        "",
    ]
    if ip is not None:
        lines += [
            f"Without a server (the ASGI apps called in a loop, {ip.get('rounds', 31)}"
            " alternating rounds): the"
            f" middleware adds {ip['middleware_added_us']:.1f} µs to the Starlette app"
            f" ({ip['starlette_checked_us']:.1f} vs {ip['starlette_plain_us']:.1f} µs) and the"
            f" library's FastAPI dependency costs {ip['dependency_added_us']:.1f} µs more than the"
            f" hand-written one ({ip['fastapi_library_us']:.1f} vs"
            f" {ip['fastapi_handwritten_us']:.1f} µs).",
            "",
        ]
    sync = m.get("sync_in_process")
    if sync is not None:
        over = sync["wsgi_over_handwritten_us"]
        lines += [
            "The sync integrations (WSGI here; Django's middleware and DRF's authentication take"
            f" the same verifier path), called in a loop, {sync['rounds']} alternating rounds of"
            f" this thread's CPU time: the WSGI middleware {sync['wsgi_library_us']:.2f} µs a"
            " request, a hand-written one (SHA-256 of the key, a dict lookup)"
            f" {sync['wsgi_handwritten_us']:.2f} µs, the bare app {sync['wsgi_plain_us']:.2f} µs;"
            f" the middleware costs **{over:.2f} µs** more than the hand-written one (median of"
            f" the rounds' differences). Target (issue 31): within 1.5 µs {verdict(over <= 1.5)}."
            " Before the warm digest became the header's own hash (2026-11-28, this machine,"
            " three adjacent runs of this measurement against the earlier commit): 1.48 to 1.82"
            " µs, and DRF (next paragraph) 1.37 to 4.03 µs; the run before that, on a slower"
            " machine: 1.40"
            " and 5.6 µs. Each request now gets its own header string, as a server gives it (a"
            " reused one keeps its hash).",
            "",
        ]
    drf = m.get("drf_in_process")
    if drf is not None:
        over = drf["drf_over_handwritten_us"]
        lines += [
            "DRF (`drf_in_process`, a view with `ApiKeyAuthentication` and"
            ' `HasScopes.of("project")` against the same view with a hand-written authentication'
            " class, SHA-256 of the key and a dict lookup, and a scope permission; 61 alternating"
            " rounds of 1,000 requests after 300 of each to warm up, the start-up heap frozen as"
            f" a preloading server does, CPU time): **{over:+.1f} µs** per request"
            f" ({drf['drf_library_us']:.1f} vs {drf['drf_handwritten_us']:.1f} µs). Target"
            f" (issue 31): within 1.5 µs of a hand-written check {verdict(over <= 1.5)}."
            + (
                ""
                if over <= 1.5
                else " The same view on both sides reads -0.6 to +0.9 µs (9 runs), so the gap"
                " is real, and it follows the machine: the run before this one read +0.1 µs"
                " with the code this session began from, which here (2026-11-28 08:40, three"
                " adjacent runs each) reads +2.74 to +2.94 µs, and this code +3.03 to +3.38."
                " Callgrind (`python -m benchmarks.drf_instructions 300`): the library view"
                " runs 2,083 to 2,136 instructions more than the hand-written one with the"
                " earlier code and 3,466 to 3,490 with this one, of about 340k; this code with"
                " Django's client reader as before (no port-0 rule, the network-rules hole it"
                " closes) runs 3,087, and with the verifier as before (no WebSocket methods, no"
                " deadline on a lease) 2,483, though neither runs on this path: the hand-written"
                " view moves by 3,000 between the builds too. The verifier's warm path is about"
                " 156 of our bytecodes a request and DRF's glue about 150 more; once-a-request"
                " bytecode in a big Django request costs about 15 ns each here (first-level"
                " data misses and mispredicted branches, next to no last-level misses). Under"
                " 1.5 would take a warm check without the use recorded, or DRF without the"
                " request recorded once under the scopes its permissions will ask."
            ),
            "",
        ]
    return lines


def floods_section(f: Any) -> list[str]:
    """Forged keys against the example service: unknown ids, and the owner's first try."""
    lines = [
        "## Floods of forged keys (`bench_floods.py`, example service, wrk + `forge.lua`)",
        "",
        "Every request carries a different forged key with a valid checksum (CRC-32 computed in"
        " Lua; the benchmark parses wrk's sample keys to check it), on `GET /projects`. The"
        " database holds 1,000 other keys. Baseline: the same server answering one valid,"
        " cached key.",
        "",
        "**Unknown ids** (a random public id per request), three floods back to back:",
        "",
        "| database | forged ids | requests/s (vs a valid key) | server CPU per request |"
        " RSS before → after each flood | SQL statements |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in (
        ("unknown_ids_sqlite", "SQLite"),
        ("unknown_ids_postgresql", "PostgreSQL, `revocation_bound` 1 s (default)"),
        ("unknown_ids_postgresql_bound0", "PostgreSQL, `revocation_bound=0`"),
    ):
        u = f.get(name)
        if u is None:
            continue
        rss = " → ".join(f"{x:.1f}" for x in u["rss_mib"])
        lines.append(
            f"| {label} | {u['forged_ids']:,} ({u['answers_401']:,} answered 401,"
            f" {u.get('answers_503', 0):,} 503) | {u['flood_rps_median']:.0f}"
            f" ({u['flood_rps_median'] / u['valid_key_rps']:.2f}x) |"
            f" {u['flood_cpu_us_median']:.0f} µs | {rss} MiB (+{u['rss_growth_mib']:.1f}) |"
            f" {u['sql_statements']} ({u['sql_statements_per_1000_forged']:.1f} per 1,000) |"
        )
    lines += [
        "",
        "SQL statements are counted on the verifier's engine (SQLAlchemy `before_cursor_execute`)"
        " over the floods; they are the key index's refreshes (and last-used writes), not one per"
        " forged id. With `revocation_bound=0` every check may ask the database, and concurrent"
        " requests share one index refresh. On SQLite the key index sees every commit first, so"
        " an id it lacks is a 401. On PostgreSQL a new key's notice may lag its commit, so an id"
        " the index lacks reads the log again (3, then 1 a second) and is then looked up by itself"
        " (1,000, then 1,000 a second); past both budgets it is a 503, never a 401 that may be"
        " wrong (`docs/reference/verifier.md`): those 503s are that bound, not a failure, and"
        " those lookups are most of PostgreSQL's statements above (the 2026-11-27 page, before"
        " the late-notice fix: all 401, 0.5 and 72.9 statements per 1,000).",
        "",
        "**The owner's first try under a wrong-secret flood** (wrk: a new random secret per"
        " request for one real public id, 16 connections). *Steady*: one flood all along on"
        " another key's id, while each trial creates (odd trials: recreates) a key with the CLI"
        " and sends its first request at once. *Aimed*: each trial's flood targets the new key's"
        " own id from right after it is made; the first request comes 0.3 s into the flood.",
        "",
        "| database | scenario | first try succeeded | first-try latency, median (max) |"
        " flood requests/s | server CPU per flood request |",
        "|---|---|---|---|---|---|",
    ]
    for kind, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        o = f.get(f"first_try_{kind}")
        if o is None:
            continue
        st, ai, alone = o["steady"], o["aimed"], o["flood_alone"]
        lines += [
            f"| {label} | steady | {st['first_try_ok']} of {st['trials']} |"
            f" {st['first_try_ms_median']:.0f} ms ({st['first_try_ms_max']:.0f} ms) |"
            f" {st['flood']['rps']:.0f} | {st['flood']['cpu_us_per_request']:.0f} µs |",
            f"| {label} | aimed | {ai['first_try_ok']} of {ai['trials']} |"
            f" {ai['first_try_ms_median']:.0f} ms ({ai['first_try_ms_max']:.0f} ms) |"
            f" {ai['flood_rps_median']:.0f} | {ai['flood_cpu_us_median']:.0f} µs |",
            f"| {label} | flood alone, vs a valid cached key | | |"
            f" {alone['rps']:.0f} vs {o['valid_key_rps']:.0f}"
            f" ({alone['rps'] / o['valid_key_rps']:.2f}x) |"
            f" {alone['cpu_us_per_request']:.0f} vs {o['valid_key_cpu_us']:.0f} µs |",
        ]
    lines += [
        "",
        "A first try's latency includes the key index noticing the new key, one query and one"
        " argon2 check, while the flood keeps both cores busy (wrk and the server). The steady"
        " flood's rate is lower because the CLI runs beside it. The valid-key baselines of"
        " this section are single runs a few seconds apart from the floods, not pairs: their"
        " requests/s ratios carry the machine's noise (±30 % here); server CPU per request is"
        " the steadier comparison.",
        "",
    ]
    return lines


def tui_scale_section(ts: Any) -> list[str]:
    """The app as the admin pays for it, 10k to 1M keys, and the CLI's start-up."""
    lines = [
        "## Terminal app at scale (`bench_tui_scale.py`, real terminal: tmux 120x40)",
        "",
        "From spawning `python -m apikey_tui --owner bench` until the pane shows the first key's"
        " row (median of 3), then the app's memory once the status line has the count. Keys made"
        " by `scale_data.fast_fill` (fake hashes: the table never reads them), in databases with"
        " the key table's indexes (`apikey_tui/db/key_indexes.py`: a trigram index for the filter,"
        " B-trees for the sorts).",
        "",
        "| backend | keys | first rows | count shown | app CPU until then | RSS (peak) | target |",
        "|---|---|---|---|---|---|---|",
    ]
    targets = {10_000: None, 100_000: 0.5, 1_000_000: 1.0}
    for kind, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        for count, limit in targets.items():
            r = ts.get(f"{kind}_{count}")
            if r is None:
                continue
            first = r["first_rows_s"]
            goal = (
                ""
                if limit is None
                else f"first rows ≤ {limit:g} s {verdict(first <= limit)} ({first / limit:.2f}x)"
            )
            if count == 1_000_000:
                peak = r["peak_rss_mib"]
                goal += f"; ≤ 150 MiB {verdict(peak <= 150)} ({peak / 150:.2f}x)"
            lines.append(
                f"| {label} | {count:,} | {first:.2f} s | {r['counted_s']:.2f} s |"
                f" {r['cpu_s_until_counted']:.2f} s | {r['rss_mib']:.0f} MiB"
                f" ({r['peak_rss_mib']:.0f}) | {goal} |"
            )
    cli = ts.get("cli")
    if cli is not None and "import_textual_sqlmodel_s" in cli:
        lines += [
            "",
            "First rows hardly grow with the table: what is left is start-up. Importing the two"
            f' libraries the app is built on, `python -c "import textual.app, sqlmodel"`, takes'
            f" {cli['import_textual_sqlmodel_s']:.2f} s here (whole process, median of 9), and"
            f" importing the app {cli['import_app_s']:.2f} s. On SQLite the app reads its first"
            " window through sqlite3 before it imports SQLAlchemy, SQLModel or pydantic (issue 31,"
            " `store/first_window.py`), so its first rows come before those imports would end; on"
            " PostgreSQL they come through the store, after them, and the driver, the connection"
            " and the version check add about 0.2 s. The first window itself is 2 to 5 ms at a"
            " million keys; the count follows once the store has opened in a thread. Before the"
            " table read windows (0.1.0: all keys"
            " loaded, sorted and filtered in Python): 2.5 to 3.2 s and 175 MiB at 100,000 keys,"
            " 17 to 19 s and 1 GiB at 1,000,000.",
        ]
    lines += [
        "",
        "Filter keystroke at the largest size (in-process pilot, 120x40): from setting the filter"
        " to the repaint of the database's answer, typing the text one character at a time and"
        " deleting it again. 'common' types `key-0123` (matches cluster in name order);"
        " 'rare' types `999999`, whose last steps match a handful of keys in a million.",
        "",
        "| backend | typed | median | worst | target |",
        "|---|---|---|---|---|",
    ]
    for kind, label in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        r = ts.get(f"{kind}_1000000")
        if r is None or "filter_common_median_ms" not in r:
            continue
        for typed, name in (("common", "`key-0123`"), ("rare", "`999999`")):
            median, worst = r[f"filter_{typed}_median_ms"], r[f"filter_{typed}_max_ms"]
            lines.append(
                f"| {label} | {name} | {median:.0f} ms | {worst:.0f} ms |"
                f" ≤ 150 ms {verdict(median <= 150)} ({median / 150:.2f}x, median) |"
            )
    lines += [
        "",
        "The database's part of a keystroke is 2 to 50 ms at every step on both backends (the"
        " store's `key_window` on the same data); the rest is Textual's repaint and the pilot's"
        " own waits. The worst keystroke is the first (one character, and the run's first"
        " query). Without the trigram index (the same benchmark, 2026-11-21): `999999` took a"
        " median of 460 ms on SQLite and 1089 ms on PostgreSQL. Every owner's keys by name, or"
        " any list by last use, took 0.1 to 0.7 s for the first window at a million keys before"
        " the two B-tree indexes, 2 to 7 ms with them. The indexes' cost: on SQLite the FTS5"
        " table adds about half the key table (343 MB to 505 MB at a million keys); `db upgrade`"
        " built all of them on an existing million-key database in 10 to 13 s on SQLite and about"
        " 10 s on PostgreSQL.",
    ]
    if cli is not None:
        base = cli["python_pass_s"]
        both = cli.get("import_textual_sqlmodel_s")
        lines += [
            "",
            "CLI start-up, whole process (median of 15; `keys list` on the 10,000-key SQLite"
            " database):",
            "",
            "| command | time | vs `python -c pass` | target |",
            "|---|---|---|---|",
            f"| `python -c pass` | {base * 1000:.0f} ms | 1x | |",
            f'| `python -c "import sqlmodel"` | {cli["import_sqlmodel_s"] * 1000:.0f} ms |'
            f" {cli['import_sqlmodel_s'] / base:.0f}x | |",
            *(
                [
                    f'| `python -c "import textual.app, sqlmodel"` | {both * 1000:.0f} ms |'
                    f" {both / base:.0f}x | |"
                ]
                if both is not None
                else []
            ),
            f"| `apikey-tui keys list` (10,000 keys) | {cli['keys_list_s'] * 1000:.0f} ms |"
            f" {cli['keys_list_s'] / base:.0f}x | |",
            "",
            "`--help` and usage errors: see *CLI start-up* below (`bench_cli_start.py`).",
        ]
    return [*lines, ""]


def cache_rss_lines(v: Any) -> list[str]:
    """What the verified cache costs a process in RSS (bench_verifier.cache_rss), if measured."""
    if "rss_bytes_per_key" not in v:
        return []
    rss, bare = v["rss_bytes_per_key"], v["rss_bytes_per_key_unrecorded"]
    return [
        "What a process pays (RSS growth while 100,000 distinct keys are verified once each, a"
        f" fresh process after the key index loaded): **{rss:.0f} bytes per key** with usage"
        f" recording on ({v['rss_bytes_per_key_trimmed']:.0f} after malloc_trim), **{bare:.0f}**"
        f" with it off ({v['rss_bytes_per_key_unrecorded_trimmed']:.0f}). Target (issue 31):"
        f" ≤ 300 for the cache, {verdict(bare <= 300)} (usage recording's tallies besides,"
        f" bounded by `usage_limit`, below: {verdict(rss <= 300)} with them). The figure above"
        " is a deep size of the cache's dicts;"
        " this one is what the process pays. The keys are now made by another process: made"
        " in the measured one (as until 2026-11-28), the memory their making freed held part"
        " of the cache at no cost in RSS, and the figures read 514 and 355 bytes where the"
        " same code pays 680 and 478. Earlier still (run of 2026-11-27 18:25): 854 and 538"
        " bytes, before a cached key became one object (its entry is its Caller), usage"
        " counters lived only from one reading to the next and SQLite's usage INSERTs stopped"
        " leaving a prepared statement per flush. Runs since: 493 and 396 bytes (2026-11-28"
        " 03:02, a 16-byte BLAKE2b digest a key), 483 and 367 (05:16, another machine), 500"
        " and 366 (07:40), 491 and 366 (14:00, the last run before a cached key kept 4 slots and"
        " shared its terms). With usage recording off the figure is at the edge of its"
        " target: seven runs of the measurement on this evening's code read 288 to 301 bytes"
        " (2026-11-28 evening; what the allocator keeps of freed memory differs by run)."
        " With recording on the figure follows the machine's speed: past `usage_limit` tallies"
        " (50,000) a request waits in the drain's queue for"
        " up to a second, and a faster machine verifies more of the 100,000 keys between two"
        " drains.",
        "",
        "What a key costs now (since 2026-11-28 evening; 366 bytes with usage recording off"
        " before). CPython's small-object allocator hands out blocks in steps of 16 bytes"
        " (measured: RSS per object, 200,000 of each), so a key pays its entry, which is its"
        " Caller (4 slots: its name, its id, its terms and its seal; 64 bytes, where 11 slots"
        " took 128), its public id (18 characters: 67, 80 paid) and name (the benchmark's 10"
        " characters: 59, 64 paid), its digest (60 bits: 32, where 64 bits took 48), its slot"
        " in the cache's one dict (about 36) and its place in the last-used writer's list (8):"
        " about 284. Its owner, scopes, limits, rules and metadata are one `Terms` that keys"
        " alike share (a key with limits or network rules holds its own, about 112 bytes). (The"
        " figures after malloc_trim are lower: the key index's load freed heap memory before the"
        " measurement began, which the cache reuses and trim hands back.) Usage recording adds"
        " a tally and its counter (about 100 bytes), then a count waiting to be written, for"
        " each key used since the last reading, at most `usage_limit` (50,000) of each: memory"
        " bounded by that setting, not by the keys cached, and here, 100,000 keys each used"
        " once in the same minutes, about 170 bytes a key.",
        "",
    ]


def unprepared_read_lines(u: Any) -> list[str]:
    """What not preparing statements (the default, for PgBouncer) costs a check that reads."""
    if u is None:
        return []
    return [
        "A check that reads PostgreSQL (`revocation_bound=0`: one SELECT, no argon2) on a direct"
        f" connection takes {u['unprepared_us']:.0f} µs with statements not prepared (the"
        f" default, so that transaction-pooling PgBouncer works) against {u['prepared_us']:.0f} µs"
        " with psycopg preparing it (`?prepare_threshold=0`): a ratio of"
        f" {u['ratio_median']:.2f} ({u['ratio_min']:.2f} to {u['ratio_max']:.2f} over adjacent"
        " pairs). Warm checks send no query and pay nothing.",
        "",
    ]


def verifier_section(v: Any) -> list[str]:
    """`bench_verifier.py`: the warm and cold check beside the floor and the peer, and memory."""
    floor, peer = v["floor_us"], v["peer"]["is_valid_us"]
    lines = [
        "## Verifier, per check (`bench_verifier.py`)",
        "",
        "| check | time | vs floor | vs peer | target |",
        "|---|---|---|---|---|",
    ]
    for kind in ("sqlite", "postgresql"):
        warm = v[kind]["warm_us"]
        lines.append(
            f"| warm (cached), {kind} | {warm:.2f} µs | {warm / floor:.1f}x | "
            f"{peer / warm:.0f}x faster | <5 µs {verdict(warm < 5)}; ≤10x floor "
            f"{verdict(warm <= 10 * floor)}; ≥20x faster than peer {verdict(peer / warm >= 20)} |"
        )
    for kind in ("sqlite", "postgresql"):
        cold = v[kind]["cold_ms"]
        lines.append(
            f"| cold (argon2 `key-secret-v1` + lookup), {kind} | {cold:.2f} ms | | | once per key |"
        )
    split = v.get("floor_split_us")
    if split is not None:
        warm = v["sqlite"]["warm_us"]
        lines.append(
            f"| floor with the header split: `table[sha256(header[7:])]` | {split:.2f} µs | | |"
            f" warm SQLite {warm / split:.2f}x: ≤2.5x {verdict(warm <= 2.5 * split)} |"
        )
    return [
        *lines,
        f"| floor: SHA-256 + dict lookup | {floor:.2f} µs | 1x | | |",
        f"| peer: djangorestframework-api-key `APIKey.objects.is_valid` (SQLite) | "
        f"{peer:.0f} µs | | 1x | |",
        f"| peer, crypto only (`KeyGenerator.verify`, SHA-512, no lookup) | "
        f"{v['peer']['crypto_only_us']:.2f} µs | | | |",
        "",
        "The peer's full check includes its database lookup, as every request of its users pays;"
        " its crypto-only line is shown for honesty: our warm path does a freshness check the peer"
        " does not (SQLite: 48 bytes of the WAL-index header; PostgreSQL: a clock read).",
        "",
        *unprepared_read_lines(v.get("unprepared_read")),
        f"Cache memory with 100,000 distinct verified keys: **{v['cache_mib_100k']:.1f} MiB** "
        f"({v['cache_bytes_per_key']:.0f} bytes per key; callers by public id with their"
        " digests, no key)"
        + (
            f"; the key index (public id and fingerprint of every key in the database, held"
            f" whatever the traffic) adds **{v['index_mib_100k']:.1f} MiB** for 100,000 keys."
            if "index_mib_100k" in v
            else "."
        ),
        "",
        *cache_rss_lines(v),
    ]


def service_section(s: Any) -> list[str]:
    """`bench_service.py`: the example service under wrk, with and without the check."""
    tp, ip = s["throughput"], s["in_process"]
    lines = [
        "## Example service under load (`bench_service.py`, wrk, 1 thread, 16 connections)",
        "",
        "| endpoint | requests/s | server CPU per request | in-process app time |",
        "|---|---|---|---|",
        f"| `POST /models/m/predict` with a valid key | {tp['rps_with_key']:.0f} | "
        f"{tp['cpu_ms_with_key'] * 1000:.0f} µs | {ip['app_us_with_key']:.1f} µs |",
        f"| same handler, no check (`/open/...`) | {tp['rps_without_check']:.0f} | "
        f"{tp['cpu_ms_without_check'] * 1000:.0f} µs | {ip['app_us_without_check']:.1f} µs |",
        "",
        f"In a tight in-process loop (31 adjacent, order-alternating pairs, no server) the"
        f" middleware and the check add {ip['app_us_added']:.1f} µs per request, which would be"
        f" {s['verifier_share_pct']:.1f} % of a request's time under wrk. **That is not what a"
        " server pays**: inside uvicorn the same work takes several times longer (cold caches,"
        " the allocator, the event loop); the in-server figures are in the next section.",
        "",
        "Measured directly with wrk (the unchecked run also sends no Authorization header), the"
        f" median of six back-to-back pairs was {tp['verifier_cost_pct']:.1f} % of requests/s"
        f" and {tp['verifier_cpu_cost_pct']:.1f} % of server CPU per request, single pairs"
        f" ranging from {tp['pair_cost_min_pct']:.1f} % to {tp['pair_cost_max_pct']:.1f} %.",
        "",
        "Flood of distinct wrong secrets (valid checksums, `forge.lua`) for one real public id,"
        " `GET /projects`:",
        "",
        "| the flooded key | requests/s served | server CPU per request |",
        "|---|---|---|",
    ]
    floods = [
        ("flood_fingerprinted", "has a fingerprint (schema 2): refused from memory"),
        ("flood_with_budget", "made before fingerprints, failure budget on (burst 5, 1 argon2/s)"),
        ("flood_without_budget", "made before fingerprints, budget off (argon2 every time)"),
    ]
    for name, label in floods:
        if name in s:
            lines.append(
                f"| {label} | {s[name]['rps']:.0f} | "
                f"{s[name]['server_cpu_ms_per_request']:.2f} ms |"
            )
    return [*lines, ""]


def tui_section(t: Any) -> list[str]:
    """`bench_tui.py`: first rows beside a minimal Textual app, and the headless pilot's times."""
    return [
        *tui_first_rows_section(t.get("tmux_first_rows_10000")),
        "## Terminal app (`bench_tui.py`, headless, 120x40)",
        "",
        "| measure | result | target |",
        "|---|---|---|",
        f"| first paint, 10,000 keys | {t['first_paint_10000_s']:.2f} s | "
        f"<1 s {verdict(t['first_paint_10000_s'] < 1)} |",
        f"| first paint, 100,000 keys | {t['first_paint_100000_s']:.2f} s | (recorded) |",
        f"| filter keystroke, 100,000 keys, median | "
        f"{t['filter_keystroke_100000_median_ms']:.0f} ms | <100 ms "
        f"{verdict(t['filter_keystroke_100000_median_ms'] < 100)} |",
        f"| filter keystroke, 100,000 keys, worst of 16 | "
        f"{t['filter_keystroke_100000_max_ms']:.0f} ms | (recorded) |",
        "",
        "A keystroke is timed from setting the filter to the end of the repaint, including about"
        " 20 ms that Textual's test pilot itself spends waiting for the screen to settle. The"
        " worst keystrokes are Python's garbage collector walking the 100,000 loaded keys: with"
        " the collector off, the worst measured was about 115 ms.",
        "",
    ]


def hashing_section(h: Any) -> list[str]:
    """`bench_hashing.py`: each argon2 profile's hash, verify and memory."""
    lines = [
        "## Hashing (`bench_hashing.py`, one core)",
        "",
        "| profile | hash | verify | extra peak memory |",
        "|---|---|---|---|",
    ]
    for profile, r in h.items():
        lines.append(
            f"| `{profile}` | {r['hash_ms']:.2f} ms | {r['verify_ms']:.2f} ms | "
            f"{r['peak_mib']:.1f} MiB |"
        )
    return [*lines, ""]


def tui_first_rows_section(r: Any) -> list[str]:
    """`bench_tui.py`: the app's first rows in tmux beside a minimal Textual DataTable app."""
    if r is None:
        return []

    def ratio(name: str) -> str:
        return (
            f"{r[f'{name}_ratio_median']:.2f}x ({r[f'{name}_ratio_min']:.2f} to"
            f" {r[f'{name}_ratio_max']:.2f})"
        )

    met = verdict(r["app_ratio_median"] <= 2)
    return [
        "## Terminal app: first rows beside a minimal Textual app (`bench_tui.py`, tmux 120x40)",
        "",
        "From spawning the process in a private tmux server until the pane shows `key-000000`:"
        " the app (`python -m apikey_tui --owner bench`, SQLite, 10,000 keys), a minimal Textual"
        " app with one DataTable of 40 rows (`benchmarks/minimal_table.py`), and the same minimal"
        " app importing SQLModel and SQLAlchemy's SQLite dialect first (the floor of any app that"
        f" reads its rows through them). {r['triples']} adjacent triples, the order reversed"
        " every other triple; a ratio is taken within a triple (median, then lowest and highest)."
        " Bytecode is compiled first, as pip does at install.",
        "",
        "| process | first rows (median) | vs the minimal app | target |",
        "|---|---|---|---|",
        f"| minimal Textual DataTable app | {r['minimal_s']:.2f} s | 1x | |",
        f"| the same, importing SQLModel and SQLAlchemy first (floor) | {r['floor_s']:.2f} s |"
        f" {ratio('floor')} | |",
        f"| the app | {r['app_s']:.2f} s | {ratio('app')} | ≤ 2x {met} |",
        "",
        "Issue 31 measured 0.85 to 1.09 s, 2.8x to 3.2x the minimal app, in an environment with"
        " `PYTHONDONTWRITEBYTECODE=1`, as this machine's shells have: there every start compiles"
        " the package's modules again, a cost no installed package pays (measured 2026-11-27 in 8"
        " adjacent pairs: 1.69 s, 3.58x without bytecode; 1.22 s, 2.70x with it). The floor is"
        " about 2x the minimal app: importing SQLAlchemy 2.1, its ORM, pydantic and SQLModel"
        " costs about as much CPU as importing and starting Textual. Until the first window came"
        " through sqlite3 the app read its first rows through the store, above that floor: 0.81"
        " s, 2.68x (1.69 to 3.05) in the last run before it, 0.17 s above the floor. Now, for a"
        " plain SQLite URL of a file at this release's schema, the app reads its first window"
        " with sqlite3 (`apikey_tui/store/first_window.py`: the store's own statements, a test"
        " holds them equal) and paints it before it imports any of them; the store opens in a"
        " thread after that paint, reads the window again and counts (so the count follows the"
        f" rows). The app is now {r['floor_s'] - r['app_s']:.2f} s below the floor: its own"
        " modules, Textual's start and a screen with a filter, status line and footer. Measured"
        " on a two-core machine loaded by other jobs (the minimal app alone takes about 0.3 s"
        " unloaded): the ratios within a triple are what carries over.",
        "",
    ]


def cli_start_section(cs: Any) -> list[str]:
    """`bench_cli_start.py`: the CLI's own start-up beside a bare interpreter, run in turns."""
    base = cs["python_pass_s"]
    rows = [
        ("`apikey-tui --help`", cs["help_s"], True),
        *(
            [("`python -m apikey_tui --help`", cs["module_help_s"], False)]
            if "module_help_s" in cs
            else []
        ),
        ("`apikey-tui keys --help`", cs["keys_help_s"], False),
        ("usage error (`keys create x`, no `--scope`)", cs["usage_error_s"], False),
        ("`apikey-tui completion bash`", cs["completion_bash_s"], False),
    ]
    lines = [
        "",
        "## CLI start-up (`bench_cli_start.py`, whole processes run in turns, median of 25)",
        "",
        "| command | time | vs `python -c pass` | target |",
        "|---|---|---|---|",
        f"| `python -c pass` | {base * 1000:.0f} ms | 1x | |",
    ]
    for label, seconds, targeted in rows:
        target = f"≤ 3x {verdict(seconds <= 3 * base)}" if targeted else ""
        lines.append(f"| {label} | {seconds * 1000:.0f} ms | {seconds / base:.1f}x | {target} |")
    lines += [
        "",
        "The commands run the `apikey-tui` script pip installs, as a user does. `--help` loads"
        " argparse and a few small modules of ours, and nothing heavy: no SQLAlchemy, no"
        " Textual, no completion generator, and not the standard library's typing, json, shutil"
        " or http either (`tests/test_completion.py` checks all of them). Those four cost"
        " `--help` about 10 ms, 3.4x `python -c pass` before they went (48 ms, 2026-11-24)."
        " What is left above `python -c pass` is argparse with its gettext lookups, our"
        " modules, and building the top-level parser.",
    ]
    return lines


Section = Callable[[Any], list[str]]


def own(module: str) -> Section:
    """The section a benchmark module renders itself (its `markdown(result)`)."""

    def section(r: Any) -> list[str]:
        lines: list[str] = import_module(f"benchmarks.{module}").markdown(r)
        return lines

    return section


# Every benchmark, in the page's order, with the function that renders its section from its
# JSON. A new benchmark is one entry here (and its section function).
MODULES: dict[str, Section] = {
    "bench_verifier": verifier_section,
    "bench_service": service_section,
    "bench_middleware": middleware_section,
    "bench_floods": floods_section,
    "bench_revocation": own("bench_revocation"),
    "bench_scale": own("bench_scale"),
    "bench_restart": own("bench_restart"),
    "bench_limits": own("bench_limits"),
    "bench_networks": own("bench_networks"),
    "bench_forward_auth": own("bench_forward_auth"),
    "bench_leaks": own("bench_leaks"),
    "bench_usage": own("bench_usage"),
    "bench_usage_app": own("bench_usage_app"),
    "bench_owners": own("bench_owners"),
    "bench_tui": tui_section,
    "bench_tui_scale": tui_scale_section,
    "bench_table_sorts": own("bench_table_sorts"),
    "bench_hashing": hashing_section,
    "bench_cli_start": cli_start_section,
}


def runs_section(runs: dict[str, Any], full: Any, measured: set[str]) -> list[str]:
    """When each section's numbers were measured, in which mode, and how busy the machine was."""
    lines = [
        "## How this page was made",
        "",
        "Each benchmark runs in its own process, one after the other. *Others' CPU* is how many"
        " of the machine's cores other processes kept busy while it ran (the machine's busy time"
        " from `/proc/stat` less the benchmark's own processes; the PostgreSQL server's work for"
        " it counts as others'), the load it competed with.",
        "",
        "| benchmark | finished (UTC) | mode | took | others' CPU | load average (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for module in MODULES:
        r = runs.get(module)
        if r is None:
            state = "run before runs were recorded (no record)" if module in measured else "not run"
            lines.append(f"| `{module}` | {state} | | | | |")
            continue
        state = f"**failed** ({r['failed']}), older figures shown" if "failed" in r else r["mode"]
        lines.append(
            f"| `{module}` | {r['finished']} | {state} | {r['seconds'] / 60:.1f} min |"
            f" {r['others_cores']:.2f} of {os.cpu_count()} cores |"
            f" {r['load_before']:.1f} → {r['load_after']:.1f} |"
        )
    if full is not None:
        lines += [
            "",
            f"The last full run (`python -m benchmarks.run{' --quick' if full['quick'] else ''}`)"
            f" started {full['started']} and took {full['seconds'] / 60:.0f} minutes.",
        ]
    return [*lines, ""]


def render(results: dict[str, Any]) -> str:
    """The results page: every benchmark's section, each number with its baseline and target."""
    runs: dict[str, Any] = results.get("_runs", {})
    full: Any = results.get("_full_run")
    same = full is not None and all(
        runs.get(m, {}).get("batch") == full["started"] and "failed" not in runs[m] for m in MODULES
    )
    if same:
        mode = "quick mode (`--quick`: fewer repetitions)" if full["quick"] else "full mode"
        origin = f"one finished run of every benchmark (`python -m benchmarks.run`, {mode})"
    else:
        origin = (
            "each benchmark's latest run (`results.json`), not one run of them all: see the"
            " table at the end"
        )
    lines = [
        "# Benchmark results",
        "",
        f"Rendered {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, from {origin}; every ratio"
        " comes from one run of one benchmark. The machine is shared and noisy (the last"
        " section says how busy it was during each benchmark): read ratios, not absolutes.",
        "",
    ]
    for module, section in MODULES.items():
        r = results.get(module)
        lines += (
            section(r)
            if r is not None
            else [f"## `{module}.py`", "", f"Not run yet: `python -m benchmarks.run {module}`.", ""]
        )
    lines += runs_section(runs, full, {m for m in MODULES if m in results})
    return "\n".join(lines).rstrip("\n") + "\n"


def _cpu_seconds() -> tuple[float, float]:
    """(the machine's busy CPU seconds since boot, this process's children's CPU seconds)."""
    with open("/proc/stat") as stat:
        ticks = [int(x) for x in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK"),
        children.ru_utime + children.ru_stime,
    )


def run(module: str, quick: bool, batch: str) -> tuple[Any, dict[str, Any]]:
    """Run one benchmark module in its own process: its JSON (None if it failed) and a record
    of the run (when, how long, how busy the machine was)."""
    print(f"running {module} …", file=sys.stderr, flush=True)
    env = {**os.environ, "BENCH_QUICK": "1" if quick else "0"}
    load_before, (busy, own_cpu), started = os.getloadavg()[0], _cpu_seconds(), time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", f"benchmarks.{module}"],
        stdout=subprocess.PIPE, text=True, cwd=HERE.parent, env=env, start_new_session=True,
    )  # fmt: skip
    failed = None
    try:
        out, _ = process.communicate(timeout=TIMEOUT)
        if process.returncode != 0:
            failed = f"exit {process.returncode}"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # and the servers it started
        out, _ = process.communicate()
        failed = f"over {TIMEOUT // 60} minutes"
    seconds = time.monotonic() - started
    busy_after, own_after = _cpu_seconds()
    record: dict[str, Any] = {
        "batch": batch,
        "mode": "quick" if quick else "full",
        "finished": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
        "seconds": round(seconds, 1),
        "others_cores": round(max(0.0, (busy_after - busy) - (own_after - own_cpu)) / seconds, 2),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }
    result = None
    if failed is None:
        try:
            result = json.loads(out.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            failed = "no JSON on its last line"
    if failed is not None:
        record["failed"] = failed
        print(f"{module} failed: {failed}", file=sys.stderr, flush=True)
    print(f"{module}: {seconds / 60:.1f} min", file=sys.stderr, flush=True)
    return result, record


def main() -> None:
    """Run the benchmarks (all, or those named), keep raw numbers in results.json, write RESULTS.md.

    `python -m benchmarks.run bench_service` reruns one and reuses the others' stored numbers;
    `python -m benchmarks.run render` only rewrites RESULTS.md. `--quick` sets BENCH_QUICK=1:
    each benchmark takes fewer repetitions (and, where a size dominates, fewer sizes), still
    producing every figure of its section. Exits 1 if a benchmark failed (its older figures
    are kept, and the page says so).
    """
    args = sys.argv[1:]
    quick = "--quick" in args
    wanted = [a for a in args if a != "--quick"] or list(MODULES)
    if wanted == ["render"]:  # only re-render RESULTS.md from results.json
        wanted = []
    unknown = set(wanted) - set(MODULES)
    if unknown:
        raise SystemExit(f"unknown benchmark {sorted(unknown)}; choose from {', '.join(MODULES)}")
    stored = HERE / "results.json"
    results = json.loads(stored.read_text()) if stored.exists() else {}
    runs = results.setdefault("_runs", {})
    batch, started, failed = f"{datetime.now(UTC):%Y-%m-%d %H:%M}", time.monotonic(), []
    for module in wanted:
        result, runs[module] = run(module, quick, batch)
        if result is None:
            failed.append(module)
        else:
            results[module] = result
        stored.write_text(json.dumps(results, indent=2) + "\n")  # a later crash loses nothing
    if set(wanted) == set(MODULES):
        results["_full_run"] = {
            "started": batch,
            "seconds": round(time.monotonic() - started),
            "quick": quick,
        }
    stored.write_text(json.dumps(results, indent=2) + "\n")
    page = render(results)
    (HERE / "RESULTS.md").write_text(page)
    print(page)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
