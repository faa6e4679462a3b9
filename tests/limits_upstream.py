"""The upstream of tests/test_limits_hosts.py under gunicorn: a service behind the ASGI
middleware whose one route notes each request it serves, with the wall times around its check."""

from __future__ import annotations

import os
import time

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from apikey_tui.config import resolve_database_url
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.routes import route
from apikey_tui.verifier import Verifier

NOTES = os.environ["LIMITS_UPSTREAM_NOTES"]  # the file every worker of every host appends to
ARRIVED = "limits_upstream.arrived"


async def metered(request: Request) -> PlainTextResponse:
    """Reached only past the key check: one line 'arrived served pid', appended in one write
    (O_APPEND: lines of several processes never mix)."""
    line = f"{request.scope[ARRIVED]!r} {time.time()!r} {os.getpid()}\n".encode()
    notes = os.open(NOTES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(notes, line)
    finally:
        os.close(notes)
    return PlainTextResponse("ok")


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


class Arrival:
    """Outside the key check: the wall time a request arrived, before the limit was judged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[ARRIVED] = time.time()
        await self.app(scope, receive, send)


verifier = Verifier.from_url(resolve_database_url(None))  # limits: $APIKEY_TUI_LIMITS_URL or the db
rules = [route("/health", public=True), route("/metered", "project")]
app = Arrival(
    Starlette(
        routes=[Route("/health", health), Route("/metered", metered)],
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=rules)],
    )
)
