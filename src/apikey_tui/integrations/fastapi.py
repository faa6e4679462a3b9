"""FastAPI: a dependency that yields the Caller, answering failures as problem+json."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.params import Depends
from fastapi.responses import Response

from apikey_tui.errors import AuthError, MalformedHeaderError
from apikey_tui.verifier import Caller, Verifier


class ApiKeyAuth:
    """Use: `auth = ApiKeyAuth(verifier)`; `auth.install(app)`; then in a route,
    `caller: Caller = auth.require("project")`.
    """

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def install(self, app: FastAPI) -> None:
        """Register the handler that turns a failed check into its RFC 9457 response."""

        async def handle(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, AuthError)
            status, headers, body = exc.response(self.verifier.realm)
            return Response(body, status, dict(headers))

        app.add_exception_handler(AuthError, handle)

    def require(self, *scopes: str) -> Any:
        """A dependency that checks the key and that it holds all of `scopes`."""
        return Depends(self.dependency(*scopes))

    def dependency(self, *scopes: str) -> Callable[[Request], Awaitable[Caller]]:
        """The bare dependency function, for `Depends(...)` or `dependencies=[...]`."""

        async def check(request: Request) -> Caller:
            values = request.headers.getlist("authorization")
            if len(values) > 1:
                raise MalformedHeaderError()
            return await self.verifier.verify_async(values[0] if values else None, scopes)

        return check
