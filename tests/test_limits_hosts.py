"""Two hosts, each gunicorn with several uvicorn workers checking keys through the verifier,
sharing one store of counts (Redis, PostgreSQL, SQLite): counted at the upstream, no window
serves more than N of a key's requests, and none under demand serves fewer than N - P * lease."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from apikey_tui.limits import lease_size, parse_limit
from apikey_tui.limits.limiter import LEASE_DEFAULT
from apikey_tui.store import KeyStore
from tests.conftest import ACTOR, CHEAP
from tests.redis_server import RedisServer
from tests.test_gunicorn_load import Gunicorn, get

ROOT = Path(__file__).resolve().parent.parent
COUNT, SECONDS, WINDOWS = 50, 2, 3  # 50 per 2 s for three windows
HOSTS, WORKERS = 2, 2  # P = 4 verifier processes in all
CLIENTS = 4
MAX_REQUESTS_PER_CLIENT = 100_000  # a bound on the loop, never reached in WINDOWS windows


@dataclass
class Seen:
    """What the clients saw: each answer, and the windows (by their wall clock around the
    call) in which a 429 came back: windows whose demand the store could not meet."""

    statuses: Counter[int] = field(default_factory=Counter)
    refused_in: set[int] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _client(ports: list[int], key: str, start: float, stop: float, seen: Seen) -> None:
    """From `start` to `stop`, GET /metered on each host in turn, a fresh connection each."""
    while time.time() < start:
        time.sleep(0.001)
    for n in range(MAX_REQUESTS_PER_CLIENT):
        before = time.time()
        if before >= stop:
            return
        try:
            status = get(ports[n % len(ports)], "/metered", key)
        except (OSError, http.client.HTTPException) as exc:
            with seen.lock:
                seen.errors[type(exc).__name__] += 1
            continue
        after = time.time()
        with seen.lock:
            seen.statuses[status] += 1
            if status == 429 and int(before // SECONDS) == int(after // SECONDS):
                seen.refused_in.add(int(before // SECONDS))


def _served(notes: Path) -> tuple[Counter[int], Counter[tuple[int, int]], set[str]]:
    """The upstream's notes per window: requests whose arrival and service fell in one window,
    those that straddled a turn (either window may hold them), and the pids that served."""
    inside: Counter[int] = Counter()
    straddling: Counter[tuple[int, int]] = Counter()
    pids: set[str] = set()
    for line in notes.read_text().splitlines():
        arrived, served, pid = line.split()
        first, last = int(float(arrived) // SECONDS), int(float(served) // SECONDS)
        if first == last:
            inside[first] += 1
        else:
            straddling[(first, last)] += 1
        pids.add(pid)
    return inside, straddling, pids


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["redis", "postgresql", "sqlite"])
def test_two_gunicorn_hosts_on_one_store_serve_at_most_n_per_window(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two gunicorn masters (two hosts) of two workers each, one key limited to 50 per 2 s,
    four clients for three windows: the upstream serves at most 50 in every window, at least
    50 - 4 * lease in every window where a client got a 429, and every answer is 200 or 429."""
    url: str = request.getfixturevalue("postgres_url" if kind == "postgresql" else "sqlite_url")
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    key = store.create_key("hal", "k", ["project"], limits=[parse_limit(f"{COUNT}/{SECONDS}s")])
    store.close()
    notes = tmp_path / "served.log"
    env = {"PYTHONPATH": str(ROOT), "LIMITS_UPSTREAM_NOTES": str(notes)}
    redis = RedisServer() if kind == "redis" else None
    hosts: list[Gunicorn] = []
    try:
        if redis is not None:
            redis.start()
            env["APIKEY_TUI_LIMITS_URL"] = redis.url
        for n in range(HOSTS):
            host = Gunicorn(url, tmp_path / f"host{n}.log", app="tests.limits_upstream:app",
                            workers=WORKERS, env=env)  # fmt: skip
            hosts.append(host)
            host.wait_ready()
        start = (time.time() // SECONDS + 1) * SECONDS  # the next turn
        stop = start + WINDOWS * SECONDS
        seen = Seen()
        ports = [host.port for host in hosts]
        clients = [
            threading.Thread(target=_client, args=(ports[n % 2 :] + ports[: n % 2], key.plaintext,
                                                   start, stop, seen))
            for n in range(CLIENTS)
        ]  # fmt: skip
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=WINDOWS * SECONDS + 120)
        assert not any(client.is_alive() for client in clients), "a client did not finish"
    finally:
        for host in hosts:
            host.stop()
        if redis is not None:
            redis.cleanup()
    inside, straddling, pids = _served(notes)
    assert not seen.errors, dict(seen.errors)
    assert set(seen.statuses) == {200, 429}, dict(seen.statuses)
    assert seen.statuses[200] == inside.total() + straddling.total()  # each 200 was served
    assert max(inside.values()) <= COUNT, (inside, straddling)
    assert len(pids) > 1, pids  # the requests really were spread over processes
    lease = lease_size(COUNT, LEASE_DEFAULT)
    first = int(start // SECONDS)
    for window in range(first, first + WINDOWS):
        served = inside[window] + sum(n for w, n in straddling.items() if window in w)
        if window in seen.refused_in:  # demand beyond what the store granted
            assert served >= COUNT - HOSTS * WORKERS * lease, (window, inside, straddling)
    assert seen.refused_in & set(range(first, first + WINDOWS)), "no window ran out"
    print(f"{kind}: served per window {dict(inside)}, straddling {dict(straddling)}, "
          f"answers {dict(seen.statuses)}, {len(pids)} processes served")  # fmt: skip
