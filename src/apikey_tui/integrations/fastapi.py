"""FastAPI: a dependency that yields the Caller, answering failures as problem+json."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from fastapi import FastAPI
from fastapi.params import Depends
from fastapi.requests import HTTPConnection
from fastapi.responses import Response
from starlette.types import ExceptionHandler
from starlette.websockets import WebSocket, WebSocketState

from apikey_tui.errors import AuthError
from apikey_tui.integrations.asgi import DENIAL_EXTENSION, POLICY_VIOLATION, authorization_header
from apikey_tui.verifier import Caller, Verifier


class ApiKeyAuth:
    """Use: `auth = ApiKeyAuth(verifier)`; `auth.install(app)`; then in a route (HTTP or
    WebSocket), `caller: Caller = auth.require("project")`.
    """

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def install(self, app: FastAPI) -> None:
        """Register the handler that turns a failed check into its RFC 9457 response."""

        async def handle(connection: HTTPConnection, exc: Exception) -> Response | None:
            assert isinstance(exc, AuthError)
            status, headers, body = exc.response(self.verifier.realm)
            # Starlette hands a WebSocket to the handler for websocket scopes and sends a
            # returned Response as a denial, which only works before accept and only on
            # servers offering the extension; anywhere else the refusal is a 1008 close.
            if isinstance(connection, WebSocket) and (
                connection.application_state is not WebSocketState.CONNECTING
                or DENIAL_EXTENSION not in (connection.scope.get("extensions") or {})
            ):
                if connection.application_state is not WebSocketState.DISCONNECTED:
                    await connection.close(POLICY_VIOLATION)
                return None
            return Response(body, status, dict(headers))

        # Starlette types a handler as HTTP-only or WebSocket-only; this one answers both.
        app.add_exception_handler(AuthError, cast(ExceptionHandler, handle))

    def require(self, *scopes: str) -> Any:
        """A dependency that checks the key and that it holds all of `scopes`."""
        return Depends(self.dependency(*scopes))

    def dependency(self, *scopes: str) -> Callable[[HTTPConnection], Awaitable[Caller]]:
        """The bare dependency function, for `Depends(...)` or `dependencies=[...]`."""

        async def check(connection: HTTPConnection) -> Caller:
            # Read the raw ASGI headers: no Headers object, no list, and the same rule for two
            # Authorization headers as the middleware.
            header = authorization_header(connection.scope["headers"])
            caller = self.verifier.cached(header, scopes)
            return caller or await self.verifier.verify_async(header, scopes)

        return check
