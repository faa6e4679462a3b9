"""An example HTTP API protected by apikey-tui: a project endpoint and a served-model endpoint."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as HttpRoute

from apikey_tui.config import resolve_database_url
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.routes import route
from apikey_tui.verifier import Verifier

PROJECTS = [{"id": 1, "name": "fraud-detection"}, {"id": 2, "name": "churn"}]


async def health(request: Request) -> JSONResponse:
    """Public: no key needed."""
    return JSONResponse({"status": "ok"})


async def projects(request: Request) -> JSONResponse:
    """The project API: needs a key with the 'project' scope."""
    caller = request.state.apikey
    return JSONResponse({"owner": caller.owner, "projects": PROJECTS})


async def predict(request: Request) -> JSONResponse:
    """A served model: needs both 'serving' and 'project'."""
    payload = await request.json() if await request.body() else {}
    values = payload.get("inputs", [])
    score = sum(float(v) for v in values) / len(values) if values else 0.0
    caller = getattr(request.state, "apikey", None)  # absent only on the benchmark's open copy
    return JSONResponse(
        {
            "model": request.path_params["model"],
            "score": round(score, 4),
            "called_by": caller.key_name if caller else None,
        }
    )


def build_app(verifier: Verifier, *, with_baseline: bool = False) -> Starlette:
    """Assemble the service around a verifier."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        verifier.close()  # flush last-used times

    routes = [
        HttpRoute("/health", health),
        HttpRoute("/projects", projects),
        HttpRoute("/models/{model}/predict", predict, methods=["POST"]),
    ]
    rules = [
        route("/health", public=True),
        route("/projects", "project"),
        route("/models", "serving", "project"),
    ]
    if with_baseline:
        # The same handler without a key check: the throughput benchmark's baseline.
        routes.append(HttpRoute("/open/models/{model}/predict", predict, methods=["POST"]))
        rules.append(route("/open", public=True))
    middleware = [Middleware(ApiKeyMiddleware, verifier=verifier, routes=rules)]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    # No trailing-slash redirect: Starlette would build its Location from the Host header, which
    # the client chooses (an open redirect). /projects/ is a 404 like any unknown path.
    app.router.redirect_slashes = False
    return app


def _from_environment() -> Starlette:
    verifier = Verifier.from_url(
        resolve_database_url(None),
        revocation_bound=float(os.environ.get("APIKEY_TUI_REVOCATION_BOUND", "1.0")),
        failure_burst=float(os.environ.get("APIKEY_TUI_FAILURE_BURST", "5")),
    )
    return build_app(verifier, with_baseline=os.environ.get("EXAMPLE_BASELINE") == "1")


app = _from_environment()
