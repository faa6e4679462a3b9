"""ASGI middleware (Starlette, FastAPI, any ASGI app) checking HTTP requests and WebSockets."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from apikey_tui.errors import AuthError, MalformedHeaderError
from apikey_tui.integrations.routes import RouteGuard

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger(__name__)

# ASGI's "Websocket Denial Response" extension: the server lets the app answer a refused
# handshake with a whole HTTP response instead of a bare 403.
DENIAL_EXTENSION = "websocket.http.response"
# RFC 6455 close code "policy violation", for servers without the denial extension.
POLICY_VIOLATION = 1008


def authorization_header(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The one Authorization header of an ASGI request; two of them are a malformed request."""
    found: bytes | None = None
    for name, value in headers:
        # Servers should lower-case header names but ASGI does not require it; the length test
        # keeps the other headers from paying for a lower-case copy.
        if len(name) == 13 and name.lower() == b"authorization":
            if found is not None:
                raise MalformedHeaderError()
            found = value
    return None if found is None else found.decode("latin-1")


def route_path(scope: Scope) -> str:
    """The path below the mount point (`root_path`), as Starlette's router sees it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        if len(path) == len(root):
            return ""
        if path[len(root)] == "/":
            return path[len(root) :]
    return path


async def send_problem(scope: Scope, send: Send, error: AuthError, realm: str) -> None:
    """Refuse an HTTP request or a WebSocket handshake (before accept) with the error's answer.

    HTTP and a WebSocket on a server offering the denial extension get the same status, headers
    and problem+json body; other WebSocket servers get a close with code 1008 (they answer 403).
    """
    prefix = ""
    if scope["type"] == "websocket":
        if DENIAL_EXTENSION not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        prefix = "websocket."
    status, headers, body = error.response(realm)
    encoded = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": prefix + "http.response.start", "status": status, "headers": encoded})
    await send({"type": prefix + "http.response.body", "body": body})


async def answer(send: Send, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
    """Send a whole HTTP response; content-length is added when headers lack it."""
    encoded = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if not any(k == b"content-length" for k, _ in encoded):
        encoded.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


class ApiKeyMiddleware(RouteGuard[ASGIApp]):
    """Check every HTTP request and WebSocket handshake against the route's scopes.

    The caller lands in `scope["state"]["apikey"]` (Starlette: `request.state.apikey`,
    `websocket.state.apikey`). A WebSocket is matched as a GET of its path. `lifespan` passes
    through; any other scope type is refused (one warning, the app never sees it).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            try:
                path = route_path(scope) if scope.get("root_path") else scope["path"]
                required = self.rules.required(scope.get("method", "GET"), path)
                if required is not None:
                    header = authorization_header(scope["headers"])
                    caller = self.verifier.cached(header, required) or (
                        await self.verifier.verify_async(header, required)
                    )
                    # ASGI servers hand each request its own copy of the lifespan state, so it
                    # can take the caller in place.
                    state = scope.get("state")
                    if state is None:
                        scope["state"] = {"apikey": caller}
                    else:
                        state["apikey"] = caller
            except AuthError as error:
                await send_problem(scope, send, error, self.verifier.realm)
                return
        elif kind != "lifespan":
            # Fail closed: a scope type this middleware cannot check never reaches the app.
            logger.warning("apikey-tui refused an ASGI scope of unknown type %r", kind)
            return
        await self.app(scope, receive, send)
