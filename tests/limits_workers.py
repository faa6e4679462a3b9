"""A process hammering one limit for tests/test_limits_processes.py (run with -m)."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter

from apikey_tui.limits import AppliedLimit, Limit, Limiter, Outage, Refused, Unavailable
from apikey_tui.limits.port import LimitStore


def open_store(kind: str, url: str) -> LimitStore:
    """The store of counts a test names: redis, or the key database (sqlite, postgresql)."""
    if kind == "redis":
        from apikey_tui.limits.redis_store import RedisLimitStore

        return RedisLimitStore(url)
    from apikey_tui.db.engine import make_engine
    from apikey_tui.limits.sql_store import SqlLimitStore

    return SqlLimitStore(make_engine(url, create=False))


def hammer(kind: str, url: str, count: int, seconds: int, lease: int) -> dict[str, object]:
    """Say ready, read the wall times start and stop from stdin, and between them ask admit()
    as fast as it answers; count each answer.

    Every admitted request is placed in a window by two readings of the wall clock around the
    call (the servers run on this host, so theirs is the same clock): `admitted` counts those
    whose readings agree, `straddling` those that fell on a turn (either window may hold them).
    """
    limiter = Limiter(open_store(kind, url), lease=lease, outage=Outage(retry_seconds=0.2))
    applied = (AppliedLimit("key:akhammer", Limit(count, seconds)),)
    admitted: Counter[int] = Counter()
    straddling: Counter[int] = Counter()
    answers: Counter[str] = Counter()
    refused_with_a_call = 0
    print("ready", flush=True)
    start, stop = map(float, sys.stdin.readline().split())
    while time.time() < start:
        time.sleep(0.001)
    while time.time() < stop:
        before, calls = time.time(), limiter.store_calls
        decision = limiter.admit(applied, time.monotonic())
        after = time.time()
        if isinstance(decision, Refused):
            answers["refused"] += 1
            refused_with_a_call += limiter.store_calls != calls
        elif isinstance(decision, Unavailable):
            answers["unavailable"] += 1
            time.sleep(0.001)
        else:
            answers["admitted"] += 1
            first, last = int(before // seconds), int(after // seconds)
            (admitted if first == last else straddling)[first] += 1
    return {
        "admitted": dict(admitted), "straddling": dict(straddling), "answers": dict(answers),
        "store_calls": limiter.store_calls, "refused_with_a_call": refused_with_a_call,
    }  # fmt: skip


if __name__ == "__main__":
    kind, url, count, seconds, lease = sys.argv[1:6]
    found = hammer(kind, url, int(count), int(seconds), int(lease))
    print(json.dumps(found))
