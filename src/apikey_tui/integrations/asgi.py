"""ASGI middleware (Starlette, FastAPI, any ASGI app) checking HTTP requests and WebSockets."""

from __future__ import annotations

import logging

from apikey_tui.errors import AuthError
from apikey_tui.integrations.asgi_messages import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    respond,
    scope_authorization,
)
from apikey_tui.integrations.guard import GuardedApp
from apikey_tui.integrations.websocket_watch import KeyWatch

logger = logging.getLogger(__name__)


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


class ApiKeyMiddleware(GuardedApp[ASGIApp, Scope]):
    """Check every HTTP request and WebSocket handshake against the route's scopes.

    The caller lands in `scope["state"]["apikey"]` (Starlette: `request.state.apikey`,
    `websocket.state.apikey`). A WebSocket is matched as a GET of its path, and each of its
    later messages passes only while the key does (`websocket_watch.KeyWatch`). `lifespan`
    passes through; any other scope type is refused (one warning, the app never sees it).
    """

    authorization = staticmethod(scope_authorization)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            try:
                path = route_path(scope) if scope.get("root_path") else scope["path"]
                caller = await self.guard.check_async(scope.get("method", "GET"), path, scope)
            except AuthError as error:
                await respond(scope, send, *self.guard.refusal(error))
                return
            if caller is not None:
                # ASGI servers hand each request its own copy of the lifespan state, so it can
                # take the caller in place.
                state = scope.get("state")
                if state is None:
                    scope["state"] = {"apikey": caller}
                else:
                    state["apikey"] = caller
                scope[self.guard.checked] = caller  # FastAPI's dependencies read it
                if kind == "websocket":  # every later message too, while the key passes
                    required = self.guard.rules.required("GET", path) or ()
                    watch = KeyWatch(self.guard, scope, caller, required, path, receive, send)
                    receive, send = watch.receive, watch.send
        elif kind != "lifespan":
            # Fail closed: a scope type this middleware cannot check never reaches the app.
            logger.warning("apikey-tui refused an ASGI scope of unknown type %r", kind)
            return
        await self.app(scope, receive, send)
