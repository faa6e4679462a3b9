"""What the ASGI middleware and the FastAPI dependency cost inside a running server (wrk).

Two servers (one uvicorn worker each, on 127.0.0.1) run side by side: the app with the check
and the same app without it (or with a hand-written check). wrk loads them in adjacent pairs
of runs, alternating which goes first, and every request carries the same valid key, so the
only difference is the check itself. Each pair gives a ratio; the median ratio is reported
with the smallest and largest, because this 2-core machine is shared and drifts.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import MutableMapping
from typing import Any

from apikey_tui.store import KeyStore
from benchmarks import apps
from benchmarks.apps import KNOCKOUTS
from benchmarks.bench_verifier import fresh_copies
from benchmarks.mode import reps
from benchmarks.servers import Load, Server, database, wrk

PAIRS = int(os.environ.get("BENCH_PAIRS", reps(8, 4)))
SECONDS = float(os.environ.get("BENCH_SECONDS", reps(5, 3)))
ROUNDS = reps(5, 3)  # knockout rounds
LOOPS = reps(31, 11)  # in-process rounds


def paired(
    subject: Server, baseline: Server, headers_lua: str, pairs: int = PAIRS
) -> dict[str, Any]:
    """Adjacent, order-alternating wrk runs; ratios subject/baseline per pair."""
    for server in (subject, baseline):  # warm up: caches, the cached key, the allocator
        wrk(server, "/", 2, lua=headers_lua)
    runs: list[tuple[Load, Load]] = []
    for n in range(pairs):
        if n % 2 == 0:
            s = wrk(subject, "/", SECONDS, lua=headers_lua)
            b = wrk(baseline, "/", SECONDS, lua=headers_lua)
        else:
            b = wrk(baseline, "/", SECONDS, lua=headers_lua)
            s = wrk(subject, "/", SECONDS, lua=headers_lua)
        runs.append((s, b))
    rps_ratios = [s.rps / b.rps for s, b in runs]
    cpu_ratios = [s.cpu_ms_per_request / b.cpu_ms_per_request for s, b in runs]
    return {
        "pairs": pairs,
        "seconds_per_run": SECONDS,
        "rps_subject": statistics.median(s.rps for s, _ in runs),
        "rps_baseline": statistics.median(b.rps for _, b in runs),
        "rps_ratio_median": statistics.median(rps_ratios),
        "rps_ratio_min": min(rps_ratios),
        "rps_ratio_max": max(rps_ratios),
        "cpu_us_subject": statistics.median(s.cpu_ms_per_request for s, _ in runs) * 1000,
        "cpu_us_baseline": statistics.median(b.cpu_ms_per_request for _, b in runs) * 1000,
        "cpu_ratio_median": statistics.median(cpu_ratios),
        "cpu_ratio_min": min(cpu_ratios),
        "cpu_ratio_max": max(cpu_ratios),
        "rps_runs": [[round(s.rps), round(b.rps)] for s, b in runs],
    }


def _timings(server: Server) -> dict[str, dict[str, float]]:
    """The timed app's spans since the last call, by path (and reset them)."""
    status, body, _ = server.get("/_bench/timings")
    assert status == 200, body
    data: dict[str, dict[str, float]] = json.loads(body)
    return data


def in_server_span(url: str, key: str, lua: str, rounds: int = 4) -> dict[str, float]:
    """Microseconds from the outermost layer to the app's entry, through the middleware (`/`)
    and around it (`/control`, the timers' own cost), alternating paths in one server."""
    spans: dict[str, list[dict[str, float]]] = {"/": [], "/control": []}
    with Server("starlette_timed", {"BENCH_DATABASE_URL": url}) as server:
        assert server.get("/", {"Authorization": f"ApiKey {key}"})[0] == 200
        wrk(server, "/", 2, lua=lua)
        _timings(server)
        for n in range(rounds):
            for path in ("/", "/control") if n % 2 == 0 else ("/control", "/"):
                wrk(server, path, 3, lua=lua)
                spans[path].append(_timings(server)[path])
    result = {}
    for path, name in (("/", "middleware"), ("/control", "control")):
        for q in ("p10_us", "p50_us", "p90_us"):
            result[f"{name}_{q}"] = statistics.median(s[q] for s in spans[path])
    result["check_p50_us"] = result["middleware_p50_us"] - result["control_p50_us"]
    result["check_p10_us"] = result["middleware_p10_us"] - result["control_p10_us"]
    return result


def where_the_time_goes(url: str, key: str, lua: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """The middleware's span with each step made constant in turn (see apps.starlette_knockout).

    A step's cost is the median span with every step in place minus the span without it;
    "everything" knocks out all of them, leaving the two coroutine calls and the scope work.
    """
    variants = {"none": "", **{step: step for step in KNOCKOUTS}}
    variants["everything"] = ",".join(KNOCKOUTS)
    servers: dict[str, Server] = {}
    spans: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    try:
        for name, out in variants.items():
            env = {"BENCH_DATABASE_URL": url, "BENCH_KNOCKOUT": out}
            servers[name] = Server("starlette_knockout", env)
            for _ in range(2):  # the first check, then the warm path (memoised constants)
                assert servers[name].get("/", {"Authorization": f"ApiKey {key}"})[0] == 200
        for n in range(rounds):
            order = list(variants) if n % 2 == 0 else list(reversed(variants))
            for name in order:
                _timings(servers[name])
                wrk(servers[name], "/", 3, lua=lua)
                spans[name].append(_timings(servers[name])["/"])
    finally:
        for server in servers.values():
            server.stop()
    p50 = {name: statistics.median(s["p50_us"] for s in spans[name]) for name in variants}
    p10 = {name: statistics.median(s["p10_us"] for s in spans[name]) for name in variants}
    return {
        "rounds": rounds,
        "span_p50_us": p50,
        "span_p10_us": p10,
        "step_cost_p50_us": {step: p50["none"] - p50[step] for step in KNOCKOUTS},
        "step_cost_p10_us": {step: p10["none"] - p10[step] for step in KNOCKOUTS},
    }


def in_process(url: str, key: str, rounds: int = LOOPS, requests: int = 1000) -> dict[str, float]:
    """Microseconds per request through each app's ASGI stack with no server: the four apps
    called in turn, `rounds` times, each round `requests` calls; medians of the rounds.

    No kernel, uvicorn or wrk in the way: steadier than wrk, but it misses what a server adds
    (cache misses between requests), so the in-server numbers above are the ones users pay.
    """
    os.environ["BENCH_DATABASE_URL"], os.environ["BENCH_KEY"] = url, key
    variants = {
        "starlette_checked": apps.starlette_checked(),
        "starlette_plain": apps.starlette_plain(),
        "fastapi_library": apps.fastapi_library(),
        "fastapi_handwritten": apps.fastapi_handwritten(),
    }
    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"ApiKey {key}".encode())]

    async def one(app: Any) -> None:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"",
            "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80), "state": {},
        }  # fmt: skip

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                assert message["status"] == 200, message

        await app(scope, receive, send)

    async def measure() -> dict[str, float]:
        times: dict[str, list[float]] = {name: [] for name in variants}
        for app in variants.values():
            for _ in range(3):  # the first check, then warm
                await one(app)
        for n in range(rounds):
            order = list(variants) if n % 2 == 0 else list(reversed(variants))
            for name in order:
                start = time.perf_counter()
                for _ in range(requests):
                    await one(variants[name])
                times[name].append((time.perf_counter() - start) / requests * 1e6)
        result = {f"{name}_us": statistics.median(t) for name, t in times.items()}
        result["rounds"] = rounds
        result["middleware_added_us"] = statistics.median(
            a - b for a, b in zip(times["starlette_checked"], times["starlette_plain"], strict=True)
        )
        result["dependency_added_us"] = statistics.median(
            a - b
            for a, b in zip(times["fastapi_library"], times["fastapi_handwritten"], strict=True)
        )
        return result

    return asyncio.run(measure())


def sync_in_process(
    url: str, key: str, rounds: int = LOOPS, requests: int = 2000
) -> dict[str, float]:
    """Microseconds per request through the WSGI middleware against a hand-written one (SHA-256
    of the key and a dict lookup, the floor a sync integration is held to: within 1.5 µs) and
    the bare app, called in alternating rounds (this thread's CPU time); medians of the rounds
    and of the differences.
    Django's middleware and DRF's authentication take the same verifier path (`verify`,
    `identify`), so this is the sync integrations' cost."""
    import hashlib
    from collections.abc import Callable

    from apikey_tui.hashing import SecretHasher
    from apikey_tui.integrations.routes import route
    from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
    from apikey_tui.verifier import Verifier

    WSGI = Callable[[Any, Any], Any]

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        return [b"ok"]

    table = {hashlib.sha256(key.encode()).digest(): "caller"}

    def handwritten(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        header = environ.get("HTTP_AUTHORIZATION")
        caller = None
        if header is not None and header.startswith("ApiKey "):
            caller = table.get(hashlib.sha256(header[7:].encode()).digest())
        if caller is None:
            start_response("401 Unauthorized", [])
            return [b""]
        environ["apikey"] = caller
        return app(environ, start_response)

    verifier = Verifier.from_url(url, hasher=SecretHasher("cheapest"))
    variants: dict[str, WSGI] = {
        "wsgi_library": ApiKeyWSGIMiddleware(app, verifier, [route("/", "project")]),
        "wsgi_handwritten": handwritten,
        "wsgi_plain": app,
    }
    header = f"ApiKey {key}"
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_AUTHORIZATION": header}
    for variant in variants.values():
        assert variant(environ, None) == [b"ok"]  # the first check, then warm
    times: dict[str, list[float]] = {name: [] for name in variants}
    for n in range(rounds):
        for name in list(variants) if n % 2 == 0 else list(reversed(variants)):
            call = variants[name]
            copies = fresh_copies(header, requests)  # each request its own header, as served
            start = time.thread_time()  # CPU time: the machine's other load drops out
            for copy in copies:
                environ["HTTP_AUTHORIZATION"] = copy
                call(environ, None)
            times[name].append((time.thread_time() - start) / requests * 1e6)
    verifier.close()
    result = {f"{name}_us": statistics.median(t) for name, t in times.items()}
    result["rounds"] = rounds
    result["wsgi_over_handwritten_us"] = statistics.median(
        a - b for a, b in zip(times["wsgi_library"], times["wsgi_handwritten"], strict=True)
    )
    result["wsgi_added_us"] = statistics.median(
        a - b for a, b in zip(times["wsgi_library"], times["wsgi_plain"], strict=True)
    )
    return result


DRF = """
import gc, hashlib, json, statistics, sys, time
import django
from django.conf import settings
url, key = sys.argv[1], sys.argv[2]
ROUNDS = 61
from apikey_tui.hashing import SecretHasher
from apikey_tui.verifier import Verifier
verifier = Verifier.from_url(url, hasher=SecretHasher("cheapest"))
settings.configure(
    ALLOWED_HOSTS=["testserver"], SECRET_KEY="bench", DEBUG=False, ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"],
    APIKEY_TUI={"VERIFIER": verifier},
    REST_FRAMEWORK={"UNAUTHENTICATED_USER": None},
)
django.setup()
urlpatterns = []
from django.test import RequestFactory
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView
from apikey_tui.integrations.drf import ApiKeyAuthentication, HasScopes
from benchmarks.bench_verifier import fresh_copies

table = {hashlib.sha256(key.encode()).digest(): ("alice", frozenset({"project"}))}

class HandWritten(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if header is None or not header.startswith("ApiKey "):
            return None
        found = table.get(hashlib.sha256(header[7:].encode()).digest())
        if found is None:
            raise AuthenticationFailed("invalid key")
        return None, found

class HandScopes(BasePermission):
    def has_permission(self, request, view):
        return request.auth is not None and "project" in request.auth[1]

class Library(APIView):
    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [HasScopes.of("project")]
    def get(self, request):
        return Response("ok")

class ByHand(APIView):
    authentication_classes = [HandWritten]
    permission_classes = [HandScopes]
    def get(self, request):
        return Response("ok")

views = {"drf_library": Library.as_view(), "drf_handwritten": ByHand.as_view()}
request = RequestFactory().get("/", HTTP_AUTHORIZATION=f"ApiKey {key}")
for view in views.values():
    assert view(request).status_code == 200
    for _ in range(300):  # warm: specialized bytecode, the key's cache entry, the allocator
        view(request)
# Start-up's garbage collected and the heap as loaded frozen, as a preloading server does: a full
# collection would otherwise scan all of Django in whichever round it lands (a 100 us/request
# outlier at round 1 of every run); each view's own allocations still pay their collections.
gc.collect()
gc.freeze()
times = {name: [] for name in views}
header = f"ApiKey {key}"
for n in range(ROUNDS):
    for name in list(views) if n % 2 == 0 else list(reversed(views)):
        view = views[name]
        copies = fresh_copies(header, 1000)  # each request its own header, as served
        start = time.thread_time()
        for copy in copies:
            request.META["HTTP_AUTHORIZATION"] = copy
            view(request)
        times[name].append((time.thread_time() - start) / 1000 * 1e6)
result = {f"{name}_us": statistics.median(t) for name, t in times.items()}
result["drf_over_handwritten_us"] = statistics.median(
    a - b for a, b in zip(times["drf_library"], times["drf_handwritten"], strict=True)
)
print(json.dumps(result))
verifier.close()
"""


def drf_in_process(url: str, key: str) -> dict[str, float]:
    """Microseconds per request of a DRF view with ApiKeyAuthentication and HasScopes against
    the same view with a hand-written authentication class (SHA-256 of the key, a dict lookup)
    and scope permission: 61 alternating rounds of 1,000 requests after 300 of each to warm up,
    with start-up's heap frozen (gc.freeze), this thread's CPU time (in its own process, for
    Django's settings). Two hand-written views measured so differ by up to ~0.5 us."""
    import subprocess
    from pathlib import Path

    run = subprocess.run(
        [sys.executable, "-c", DRF, url, key],
        capture_output=True, text=True, check=True, timeout=600,
        cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip
    found: dict[str, float] = json.loads(run.stdout)
    return found


def main() -> None:
    """Print one JSON object: the middleware against no check, the dependency against by-hand,
    the middleware's own span inside the server, and where that span goes."""
    results: dict[str, Any] = {}

    def progress(name: str, value: Any) -> None:
        results[name] = value
        print(json.dumps({name: value}), file=sys.stderr, flush=True)

    with database("sqlite") as url:
        store = KeyStore.open(url)  # the real argon2 profile
        key = store.create_key("bench", "load", ["serving", "project"]).plaintext
        store.close()
        env = {"BENCH_DATABASE_URL": url, "BENCH_KEY": key}
        lua = f'wrk.headers["Authorization"] = "ApiKey {key}"\n'
        with Server("starlette_checked", env) as checked, Server("starlette_plain", env) as plain:
            status, _, _ = checked.get("/", {"Authorization": f"ApiKey {key}"})
            assert status == 200 and checked.get("/")[0] == 401
            progress("starlette_middleware", paired(checked, plain, lua))
        with (
            Server("fastapi_library", env) as library,
            Server("fastapi_handwritten", env) as by_hand,
        ):
            wrong = key[:-1] + ("b" if key.endswith("a") else "a")
            for server in (library, by_hand):
                assert server.get("/", {"Authorization": f"ApiKey {key}"})[0] == 200
                assert server.get("/", {"Authorization": f"ApiKey {wrong}"})[0] == 401
            progress("fastapi_dependency", paired(library, by_hand, lua))
        progress("in_server", in_server_span(url, key, lua))
        progress("profile", where_the_time_goes(url, key, lua))
        progress("in_process", in_process(url, key))
        progress("sync_in_process", sync_in_process(url, key))
        progress("drf_in_process", drf_in_process(url, key))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
