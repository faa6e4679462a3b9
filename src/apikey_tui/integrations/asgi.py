"""ASGI middleware (Starlette, FastAPI, any ASGI app) with per-route scope requirements."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from apikey_tui.errors import AuthError, MalformedHeaderError
from apikey_tui.integrations.routes import RouteGuard

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def authorization_header(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The one Authorization header of an ASGI request; two of them are a malformed request."""
    found = [value for name, value in headers if name.lower() == b"authorization"]
    if len(found) > 1:
        raise MalformedHeaderError()
    return found[0].decode("latin-1") if found else None


async def send_problem(send: Send, error: AuthError, realm: str) -> None:
    """Answer with the error's status, headers and application/problem+json body."""
    status, headers, body = error.response(realm)
    encoded = [(k.encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware(RouteGuard[ASGIApp]):
    """Check every HTTP request's key against the route's scopes before the app sees it.

    The caller lands in `scope["state"]["apikey"]` (Starlette: `request.state.apikey`).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        required = self.rules.required(scope["method"], scope["path"])
        if required is not None:
            try:
                header = authorization_header(scope["headers"])
                caller = await self.verifier.verify_async(header, required)
            except AuthError as error:
                await send_problem(send, error, self.verifier.realm)
                return
            scope["state"] = {**scope.get("state", {}), "apikey": caller}
        await self.app(scope, receive, send)
