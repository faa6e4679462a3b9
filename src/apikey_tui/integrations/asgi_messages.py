"""ASGI in and out for every ASGI piece here: the Authorization header, one writer, one lifespan."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from apikey_tui.errors import MalformedHeaderError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[str, str]]

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


def scope_authorization(request: Scope) -> str | None:
    """authorization_header of a scope: how a route guard reads an ASGI request's key."""
    return authorization_header(request["headers"])


def encoded_headers(headers: Headers, body: bytes) -> list[tuple[bytes, bytes]]:
    """Headers as ASGI sends them (latin-1 bytes), content-length added when they lack it."""
    encoded = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    if not any(k == b"content-length" for k, _ in encoded):
        encoded.append((b"content-length", str(len(body)).encode()))
    return encoded


async def respond(scope: Scope, send: Send, status: int, headers: Headers, body: bytes) -> None:
    """Send a whole answer to an HTTP request or a WebSocket handshake (before accept).

    content-length is added when the headers lack it. A WebSocket on a server offering the
    denial extension gets the same status, headers and body as HTTP; other WebSocket servers
    get a close with code 1008 (they answer the handshake with 403).
    """
    prefix = ""
    if scope["type"] == "websocket":
        if DENIAL_EXTENSION not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        prefix = "websocket."
    encoded = encoded_headers(headers, body)
    await send({"type": prefix + "http.response.start", "status": status, "headers": encoded})
    await send({"type": prefix + "http.response.body", "body": body})


class HTTPApp:
    """An ASGI app that answers HTTP only: serve-auth's and serve-leaks' one frame.

    `http` answers each request; the lifespan calls `shutdown` when the server stops; any other
    scope type is refused with a warning (a WebSocket with a 1008 close).
    """

    name = "an HTTP-only app"  # for the warning: the command that serves it
    logger = logging.getLogger(__name__)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:
            self.logger.warning("%s refused an ASGI scope of type %r", self.name, kind)
            if kind == "websocket":
                await send({"type": "websocket.close", "code": POLICY_VIOLATION})

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one HTTP request."""
        raise NotImplementedError

    async def startup(self) -> None:
        """Prepare what the app needs before the first request (the server is starting)."""

    async def shutdown(self) -> None:
        """Release what the app holds (the server is stopping)."""

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return
