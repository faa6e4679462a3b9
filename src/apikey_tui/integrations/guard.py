"""The route guard every integration calls: the scopes a request needs, then who is asking."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Generic, TypeVar

from apikey_tui.errors import AuthError
from apikey_tui.integrations.clients import ClientReader, asgi_client
from apikey_tui.integrations.clients import trusted_proxies as _proxies
from apikey_tui.integrations.routes import Route, RouteScopes, Unmatched
from apikey_tui.networks import TrustedProxies
from apikey_tui.verifier import Caller, Verifier

AppT = TypeVar("AppT")
RequestT = TypeVar("RequestT")

# What a refusal is on the wire in every framework: status, headers (content-length included)
# and the problem+json body.
Refusal = tuple[int, list[tuple[str, str]], bytes]
# The rules of a guard given none: any valid key, on any path in normal form. It holds no state
# but its bounded answer cache, so every such guard shares one.
_ANY_KEY = RouteScopes(())


def _unknown(_request: object) -> str | None:
    return None


def checked_mark(verifier: Verifier) -> str:
    """Where a request keeps its caller once this verifier checked its key (an ASGI scope's key,
    a Django request's attribute), so a later check of the same request (a FastAPI key
    dependency or DRF's authentication after the middleware) judges only its own scopes: one
    request spends its limits and is counted once. One per verifier (every guard over it writes
    the same): a str, so marking costs a request one store and no allocation."""
    return f"apikey_tui.checked.{id(verifier):x}"


class Guard(Generic[RequestT]):
    """Route rules, the verifier's cache, the verifier, and the refusal: the four steps of every
    integration, once.

    `authorization` reads a request's Authorization header in the framework's own form (an ASGI
    scope, a WSGI environ, a Django request); it is read only when the route needs a key, so a
    public route never judges the header. `client` reads where the request comes from, in the
    same form (`integrations.clients`: the peer, or what a trusted proxy says), for the key's
    network rules; without it the client is unknown. Every method raises an AuthError to
    refuse; `refusal(error)` is its answer. Without rules, every request needs any valid key.
    """

    def __init__(
        self,
        verifier: Verifier,
        authorization: Callable[[RequestT], str | None],
        rules: RouteScopes | None = None,
        client: ClientReader | None = None,
    ) -> None:
        self.verifier = verifier
        self.authorization = authorization
        self.rules = rules if rules is not None else _ANY_KEY
        self.client: ClientReader = client if client is not None else _unknown
        self.checked = checked_mark(verifier)

    def check(self, method: str, path: str, request: RequestT) -> Caller | None:
        """The caller of a request to `path`, or None for a public route (blocking)."""
        required = self.rules.required(method, path)
        return None if required is None else self.caller(request, required, path)

    async def check_async(self, method: str, path: str, request: RequestT) -> Caller | None:
        """check for an event loop: a cached key is answered in place, a cold one in a thread."""
        required = self.rules.required(method, path)
        if required is None:
            return None
        return await self.caller_async(request, required, path)

    def caller(
        self, request: RequestT, required: Collection[str] = (), route: str | None = None
    ) -> Caller:
        """The caller if the request's key holds `required` (scopes decided elsewhere) and may
        be used from where the request comes from."""
        return self.verifier.verify(
            self.authorization(request), required, self.client(request), route
        )

    async def caller_async(
        self, request: RequestT, required: Collection[str] = (), route: str | None = None
    ) -> Caller:
        """caller for an event loop (FastAPI's scopes, serve-auth's `scope=`)."""
        header, client = self.authorization(request), self.client(request)
        return self.verifier.cached(header, required, client, route) or (
            await self.verifier.verify_async(header, required, client, route)
        )

    async def recheck_async(
        self, request: RequestT, caller: Caller, required: Collection[str], route: str
    ) -> Caller:
        """The caller once more, for a later message on a connection the request opened (a
        WebSocket) whose key memory no longer vouches for (`Verifier.unchanged`, which the
        watch asks first): the key checked again and judged by its rules now (an AuthError
        once it no longer passes). No limit spent and no use counted: a message is not a
        request."""
        verifier = self.verifier
        fresh = await verifier.identify_async(self.authorization(request))
        return verifier.readmit(fresh, required, self.client(request), route)

    def refusal(self, error: AuthError) -> Refusal:
        """The answer to a refused request: the same in every framework."""
        return error.response(self.verifier.realm)


class GuardedApp(Generic[AppT, RequestT]):
    """What every middleware holds: the wrapped app and its guard over the route rules.

    Rule paths are relative to where the middleware is installed: below a mount point
    (Starlette `Mount`, ASGI `root_path`, WSGI `SCRIPT_NAME`) they omit the mount's prefix.
    `trusted_proxies` (addresses or networks) are the peers whose forwarding header
    (`client_header`: x-forwarded-for, or forwarded) names the client for network rules;
    default: $APIKEY_TUI_TRUSTED_PROXIES, else none (the peer is the client).
    """

    # How this middleware's framework gives a request's client (ASGI by default).
    client_reader: Callable[[TrustedProxies], ClientReader] = staticmethod(asgi_client)

    def __init__(
        self,
        app: AppT,
        verifier: Verifier,
        routes: Iterable[Route] = (),
        default_scopes: Iterable[str] = (),
        *,
        unmatched: Unmatched = "key",
        trusted_proxies: TrustedProxies | Iterable[str] | None = None,
        client_header: str | None = None,
    ) -> None:
        self.app = app
        rules = RouteScopes(routes, default_scopes, unmatched=unmatched)
        client = self.client_reader(_proxies(trusted_proxies, client_header))
        self.guard: Guard[RequestT] = Guard(verifier, self.authorization, rules, client)

    @staticmethod
    def authorization(request: RequestT) -> str | None:
        """The request's Authorization header (each middleware knows its framework's form)."""
        raise NotImplementedError

    @property
    def verifier(self) -> Verifier:
        """The guard's verifier."""
        return self.guard.verifier
