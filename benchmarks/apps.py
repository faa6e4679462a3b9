"""The apps the in-server benchmarks serve: `uvicorn --factory benchmarks.apps:<name>`.

Configured by the environment: BENCH_DATABASE_URL (the verifier's database) and, for the
hand-written baseline, BENCH_KEY (the one valid key it knows). Each pair of apps differs only
in the check under measurement; the handler and the request are the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from sqlalchemy import event
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from apikey_tui.db import make_engine
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.fastapi import ApiKeyAuth
from apikey_tui.integrations.routes import route
from apikey_tui.verifier import Caller, Verifier

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _verifier() -> Verifier:
    # BENCH_RECORD_USAGE=0: the same verifier without usage recording (bench_usage's pair).
    record = os.environ.get("BENCH_RECORD_USAGE", "1") != "0"
    # BENCH_LIMITS_LEASE: tokens a lease asks for (bench_limits: a lease always in hand).
    lease = int(os.environ.get("BENCH_LIMITS_LEASE", "16"))
    return Verifier.from_url(
        os.environ["BENCH_DATABASE_URL"], record_usage=record, limits_lease=lease
    )


def _closing(verifier: Verifier | None) -> Callable[[Any], Any]:
    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        if verifier is not None:
            verifier.close()

    return lifespan


async def plain(request: Any) -> PlainTextResponse:
    return PlainTextResponse("ok")


# --- a minimal Starlette app, with and without the ASGI middleware --------------------------


def starlette_plain() -> Starlette:
    """One plain-text route, nothing else."""
    return Starlette(routes=[Route("/", plain)])


def starlette_checked() -> Starlette:
    """The same app behind ApiKeyMiddleware: `/` needs a key with the `project` scope."""
    verifier = _verifier()
    middleware = [
        Middleware(ApiKeyMiddleware, verifier=verifier, routes=[route("/", "project")]),
    ]
    return Starlette(routes=[Route("/", plain)], middleware=middleware, lifespan=_closing(verifier))


class _Stamp:
    """Outermost layer: note when a request arrives; only `/` goes through the layers under test."""

    def __init__(self, checked: Any, control: Any) -> None:
        self.checked, self.control = checked, control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.checked(scope, receive, send)
            return
        scope["bench.t0"] = time.perf_counter_ns()
        if scope["path"] == "/":
            await self.checked(scope, receive, send)
        else:
            await self.control(scope, receive, send)


class _Reached:
    """Innermost layer: the time since _Stamp, by path; `/_bench/timings` reports and resets."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.samples: dict[str, list[int]] = {"/": [], "/control": []}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            elapsed = time.perf_counter_ns() - scope["bench.t0"]
            if scope["path"] == "/_bench/timings":
                await _send_json(send, {path: _summary(ns) for path, ns in self.samples.items()})
                for ns in self.samples.values():
                    ns.clear()
                return
            self.samples[scope["path"]].append(elapsed)
        await self.app(scope, receive, send)


def _summary(samples: list[int]) -> dict[str, float]:
    if not samples:
        return {"count": 0}
    ordered = sorted(samples)
    pick = [ordered[int(q * (len(ordered) - 1))] / 1000 for q in (0.1, 0.5, 0.9, 0.99)]
    return {
        "count": len(ordered),
        "p10_us": pick[0],
        "p50_us": pick[1],
        "p90_us": pick[2],
        "p99_us": pick[3],
        "mean_us": statistics.fmean(ordered) / 1000,
    }


async def _send_json(send: Send, data: object) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(data).encode()})


def starlette_timed() -> Any:
    """Times the middleware's own work per request inside the server.

    `/` goes through ApiKeyMiddleware (needs `project`), `/control` skips it; both are timed
    from the outermost layer to the app's entry, so `/control` is the timers' own cost.
    """
    verifier = _verifier()
    inner = _Reached(Starlette(routes=[Route("/", plain), Route("/control", plain)]))
    middleware = ApiKeyMiddleware(inner, verifier=verifier, routes=[route("/", "project")])
    return _Stamp(middleware, inner)


# The warm path's steps as the code has them: the split and the salted SHA-256 are inline in
# Verifier._warm (a call there cost a tenth of the path), so they go with it.
KNOCKOUTS = ("route_rules", "header", "warm", "authorize")


def starlette_knockout() -> Any:
    """starlette_timed with the steps named in BENCH_KNOCKOUT (comma-separated) made constant.

    A diagnostic for where the middleware's time goes: a step's cost is the timed span with
    every step in place minus the span with that step replaced by a constant answer. It
    patches the package's internals (names as of this benchmark), so it is not a test.
    """
    import apikey_tui.integrations.asgi_messages as asgi_messages
    import apikey_tui.integrations.routes as routes

    out = {s for s in os.environ.get("BENCH_KNOCKOUT", "").split(",") if s}
    unknown = out - set(KNOCKOUTS)
    if unknown:
        raise SystemExit(f"unknown knockout {sorted(unknown)}; choose from {KNOCKOUTS}")
    memo: dict[str, Any] = {}

    def once(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def constant(*args: Any) -> Any:
            found = memo.get(name)
            if found is None:  # the first real answer (a cache miss answers None) is kept
                found = memo[name] = real(*args)
            return found

        return constant

    if "route_rules" in out:
        routes.RouteScopes.required = once("rules", routes.RouteScopes.required)  # type: ignore[method-assign]
    if "header" in out:
        module = vars(asgi_messages)
        module["authorization_header"] = once("header", module["authorization_header"])
    if "warm" in out:
        Verifier._warm = once("warm", Verifier._warm)  # type: ignore[method-assign]
    if "authorize" in out:
        Verifier.authorize = once("authorize", Verifier.authorize)  # type: ignore[method-assign]
    return starlette_timed()


# --- FastAPI: the library's dependency against a hand-written SHA-256 + dict check ----------


# The dependencies are given as default values: under `from __future__ import annotations` an
# Annotated[...] naming a local (`auth`) cannot be resolved by FastAPI.


def fastapi_library() -> FastAPI:
    """`caller: Caller = ApiKeyAuth(verifier).require("project")` on one plain-text route."""
    verifier = _verifier()
    auth = ApiKeyAuth(verifier)
    app = FastAPI(lifespan=_closing(verifier), openapi_url=None)
    auth.install(app)

    @app.get("/")
    async def root(caller: Caller = auth.require("project")) -> PlainTextResponse:  # noqa: B008
        return PlainTextResponse("ok")

    return app


def fastapi_handwritten() -> FastAPI:
    """What a team writes by hand: SHA-256 of the presented key, one dict lookup, a scope test.

    It knows one key (BENCH_KEY), has no revocation, no database and no error format: the floor
    a library dependency is held to.
    """
    key = os.environ["BENCH_KEY"]
    table = {hashlib.sha256(key.encode()).digest(): ("bench", frozenset({"project", "serving"}))}

    async def check(request: Request) -> tuple[str, frozenset[str]]:
        header = request.headers.get("authorization", "")
        scheme, _, credential = header.partition(" ")
        found = table.get(hashlib.sha256(credential.encode()).digest())
        if scheme.lower() != "apikey" or found is None:
            raise HTTPException(401, headers={"WWW-Authenticate": "ApiKey"})
        if "project" not in found[1]:
            raise HTTPException(403)
        return found

    app = FastAPI(openapi_url=None)

    @app.get("/")
    async def root(caller: tuple[str, frozenset[str]] = Depends(check)) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return app


# --- the example service, counting its SQL statements ---------------------------------------


def example() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """examples/service.py's app, built as its `_from_environment` does, plus `/_bench/stats`.

    The stats route (outside the middleware) reports the SQL statements the verifier's engine
    has run, the key index size and the cache size, so a flood's database work is counted.
    """
    sys.path.insert(0, str(EXAMPLES))
    from service import build_app

    engine = make_engine(os.environ["APIKEY_TUI_DATABASE_URL"], create=False)
    counts = {"statements": 0}

    def count(*_: Any) -> None:
        counts["statements"] += 1

    event.listen(engine, "before_cursor_execute", count)
    verifier = Verifier(
        engine,
        revocation_bound=float(os.environ.get("APIKEY_TUI_REVOCATION_BOUND", "1.0")),
        failure_burst=float(os.environ.get("APIKEY_TUI_FAILURE_BURST", "5")),
    )
    inner = build_app(verifier, with_baseline=os.environ.get("EXAMPLE_BASELINE") == "1")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/_bench/stats":
            stats = {
                "statements": counts["statements"],
                "known_keys": verifier.known_keys(),
                "cache_size": verifier.cache_size(),
            }
            await _send_json(send, stats)
            return
        await inner(scope, receive, send)

    return app
