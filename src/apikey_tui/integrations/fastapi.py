"""FastAPI: a dependency that yields the Caller, answering failures as problem+json.

The dependency is also a FastAPI security scheme, so the OpenAPI document names the ApiKey
scheme, each route's `security` lists the scopes it needs, and Swagger UI's Authorize button
sends the header (see ApiKeyAuth).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from fastapi import FastAPI, HTTPException, WebSocketException
from fastapi.openapi.models import APIKey
from fastapi.params import Security
from fastapi.requests import HTTPConnection
from fastapi.responses import Response
from fastapi.security import SecurityScopes
from fastapi.security.base import SecurityBase
from starlette.types import ExceptionHandler
from starlette.websockets import WebSocket, WebSocketState

from apikey_tui.errors import (
    ApiKeyError,
    AuthError,
    InsufficientScopeError,
    InvalidKeyError,
    MalformedHeaderError,
    RateLimitedError,
    VerifierUnavailableError,
)
from apikey_tui.integrations.asgi_messages import (
    DENIAL_EXTENSION,
    POLICY_VIOLATION,
    Scope,
    scope_authorization,
)
from apikey_tui.integrations.clients import ClientReader, asgi_client
from apikey_tui.integrations.clients import trusted_proxies as trusted_proxies_of
from apikey_tui.integrations.guard import Guard
from apikey_tui.integrations.websocket_watch import KeyWatch
from apikey_tui.networks import TrustedProxies
from apikey_tui.verifier import Caller, Verifier

SCHEME_NAME = "ApiKey"  # the key of components.securitySchemes
PROBLEM_SCHEMA = "ApiKeyProblem"  # the key of components.schemas for the problem+json bodies
_PROBLEM = "application/problem+json"

# Swagger UI's Authorize dialog can send an `http` scheme only for "basic" and "bearer" (any
# other scheme name is shown as unsupported), so the scheme is an apiKey in the Authorization
# header: what is typed into the dialog is sent as the whole header value.
SCHEME_DESCRIPTION = (
    "Send `Authorization: ApiKey <key>`. In Swagger UI's Authorize dialog type the whole value: "
    "the word `ApiKey`, a space, then the key. A route's security requirement lists the scopes "
    "the key must hold (all of them)."
)

_PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 9457 problem; it never echoes the presented key.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "missing_scopes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "403 only: the scopes the key lacks",
        },
        "limit": {"type": "string", "description": "429 only: the spent limit, N/DURATION"},
        "limit_of": {
            "type": "string",
            "enum": ["key", "owner"],
            "description": "429 only: the key's own limit, or its owner's shared pool",
        },
        "retry_after": {
            "type": "integer",
            "description": "429 only: whole seconds until the limit's window turns",
        },
    },
}


class ApiKeyScheme(SecurityBase):
    """The ApiKey scheme as a dependency: checks the request's key for the scopes FastAPI
    gathered and returns the Caller.

    FastAPI builds a route's OpenAPI `security` and the SecurityScopes handed to this call from
    the same `Security(..., scopes=...)` declarations along the dependency chain, so the document
    and the check cannot disagree. Being a SecurityBase is what puts the scheme in the document.
    """

    def __init__(
        self, verifier: Verifier, model: APIKey, name: str, client: ClientReader | None = None
    ):
        self.model, self.scheme_name = model, name
        # The raw ASGI headers, as the middleware reads them: no Headers object, no list, and
        # the same rule for two Authorization headers.
        self.guard = Guard(verifier, scope_authorization, client=client)
        self._checked = self.guard.checked

    async def __call__(self, connection: HTTPConnection, security_scopes: SecurityScopes) -> Caller:
        scope = connection.scope
        try:
            # Checked already in this request (the middleware, a router's dependency): the
            # caller's scopes judged for these too, but its limits spent and its use counted once.
            caller: Caller | None = scope.get(self._checked)
            if caller is None:
                caller = await self.guard.caller_async(scope, security_scopes.scopes, scope["path"])
                scope[self._checked] = caller
            elif not caller._terms.scopes.issuperset(security_scopes.scopes):  # no property call
                # The refusal the full check gives (403, recorded); the limits are spent already.
                self.guard.verifier.authorize(caller, security_scopes.scopes, _spent=True)
        except AuthError as error:
            if answered_by_app(connection.scope, error):
                raise
            realm = self.guard.verifier.realm
            raise framework_refusal(connection.scope, error, realm) from error
        if isinstance(connection, WebSocket):
            # Each later message too, while the key passes: Starlette's WebSocket reads and
            # writes through these two attributes (its own receive and send call them).
            watch = KeyWatch(
                self.guard, scope, caller, security_scopes.scopes, scope["path"],
                connection._receive, connection._send,
            )  # fmt: skip
            connection._receive, connection._send = watch.receive, watch.send
        return caller


def answered_by_app(scope: Scope, error: AuthError) -> bool:
    """Whether the app has a handler for `error` (install() registers one for AuthError).

    Starlette's ExceptionMiddleware puts the handlers in force for this request in the scope,
    and its routing looks them up there by the exception's classes, as this does.
    """
    handlers = scope.get("starlette.exception_handlers", ({}, {}))[0]
    return any(cls in handlers for cls in type(error).__mro__ if issubclass(cls, ApiKeyError))


def framework_refusal(scope: Scope, error: AuthError, realm: str) -> Exception:
    """The refusal FastAPI answers by itself, for an app without install(): never a 500.

    HTTP: the error's status and headers (its challenge, Retry-After) with FastAPI's own JSON
    body, `{"detail": message}`, as for FastAPI's APIKeyHeader. A WebSocket handshake: a close
    with 1008, which every server can send (the server answers the handshake with 403).
    """
    if scope["type"] == "websocket":
        return WebSocketException(POLICY_VIOLATION)
    headers = {name: value for name, value in error.http_headers(realm) if name != "content-type"}
    return HTTPException(error.status, str(error), headers)


class ApiKeyAuth:
    """Use: `auth = ApiKeyAuth(verifier)`; `auth.install(app)`; then in a route (HTTP or
    WebSocket), `caller: Caller = auth.require("project")`, or FastAPI's own form,
    `Security(auth.dependency(), scopes=["project"])`, in a route, a router or a dependency.
    Enforced is the union of the dependency's scopes and every Security scope along the chain,
    exactly what the route's OpenAPI `security` lists. Without install() a refusal keeps its
    status and headers but has FastAPI's `{"detail": ...}` body (a WebSocket: a 1008 close).

    OpenAPI: `components.securitySchemes.ApiKey` is `{"type": "apiKey", "in": "header",
    "name": "Authorization"}`; each route that requires a key has `security: [{"ApiKey":
    [scopes]}]` (OpenAPI 3.1 allows role names there for non-OAuth schemes); install() adds the
    400/401/403/429/503 problem+json responses to those routes.
    """

    def __init__(
        self,
        verifier: Verifier,
        *,
        scheme_name: str = SCHEME_NAME,
        description: str | None = None,
        trusted_proxies: TrustedProxies | list[str] | tuple[str, ...] | None = None,
        client_header: str | None = None,
    ) -> None:
        self.verifier = verifier
        self.scheme_name = scheme_name
        model = APIKey.model_validate(
            {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": SCHEME_DESCRIPTION if description is None else description,
            }
        )
        # Where a request comes from, for network rules: the peer, or what a trusted proxy says
        # (`trusted_proxies`, else $APIKEY_TUI_TRUSTED_PROXIES).
        client = asgi_client(trusted_proxies_of(trusted_proxies, client_header))
        self.scheme = ApiKeyScheme(verifier, model, scheme_name, client)

    def install(self, app: FastAPI) -> None:
        """Register the handler that turns a failed check into its RFC 9457 response, and add
        those answers to the OpenAPI document of every route that requires a key."""

        async def handle(connection: HTTPConnection, exc: Exception) -> Response | None:
            assert isinstance(exc, AuthError)
            status, headers, body = self.scheme.guard.refusal(exc)
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

        build = app.openapi

        def openapi() -> dict[str, Any]:
            document = build()  # FastAPI caches it: this adds to the same dict, idempotently
            add_problem_responses(document, self.scheme_name)
            return document

        app.openapi = openapi  # type: ignore[method-assign]

    def require(self, *scopes: str) -> Caller:
        """A dependency that checks the key and that it holds all of `scopes`, and of any
        Security scopes around it.

        Typed as the Caller it yields (FastAPI's `Security` is typed Any), so a parameter
        annotated otherwise (`caller: str = auth.require()`) fails mypy.
        """
        return cast(Caller, Security(self.scheme, scopes=list(scopes)))

    def dependency(self, *scopes: str) -> Callable[..., Awaitable[Caller]]:
        """The bare dependency, for `Security(..., scopes=[...])`, `Depends(...)` or
        `dependencies=[...]`: the key must hold `scopes` and every Security scope above it.

        It wraps require(*scopes), so its own scopes are in the OpenAPI document too.
        """

        requirement = self.require(*scopes)

        async def api_key(caller: Caller = requirement) -> Caller:
            return caller

        return api_key


_LIMITED = RateLimitedError("key", "600/m", 600, 60, 37)  # its headers are documented too
# What each refusal looks like, for the documented examples (one per status: a schema's own
# example would show a 401 under every status).
_EXAMPLES: dict[str, AuthError] = {
    "400": MalformedHeaderError(),
    "401": InvalidKeyError(),
    "403": InsufficientScopeError(["serving"]),
    "429": _LIMITED,
    "503": VerifierUnavailableError(),
}
_SCOPES_NOTE = "API key scopes required (all of them): "


def add_problem_responses(document: dict[str, Any], scheme_name: str = SCHEME_NAME) -> None:
    """Add the refusals to every operation that requires the scheme (400, 401, 429, 503; and
    403 where scopes are required), each an `application/problem+json` ApiKeyProblem with an
    example of its own status, and say the route's scopes in its description: Swagger UI shows
    an apiKey requirement's scopes nowhere.

    429 is on every such route: any key may be given limits (or its owner a pool) at any time,
    by the admins, without the service changing."""
    ref = {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA}"}

    def content(status: str) -> dict[str, Any]:
        return {_PROBLEM: {"schema": ref, "example": _EXAMPLES[status].problem()}}

    challenge = {
        "WWW-Authenticate": {
            "description": 'ApiKey realm="…", with error="invalid_token" for a bad key',
            "schema": {"type": "string"},
        }
    }
    limited = _limited_headers(_LIMITED)
    used = False
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            requirements = [r for r in operation.get("security", ()) if scheme_name in r]
            if not requirements:
                continue
            used = True
            scopes = sorted({s for r in requirements for s in r[scheme_name]})
            described = operation.get("description", "")
            if _SCOPES_NOTE not in described:  # the document is cached: added once
                note = _SCOPES_NOTE + (", ".join(f"`{s}`" for s in scopes) or "none (any key)")
                operation["description"] = f"{described}\n\n{note}" if described else note
            responses = operation.setdefault("responses", {})
            responses.setdefault(
                "400",
                {"description": "Malformed Authorization header", "content": content("400")},
            )
            responses.setdefault(
                "401",
                {
                    "description": "No API key, or one that is not valid",
                    "headers": challenge,
                    "content": content("401"),
                },
            )
            if scopes:
                responses.setdefault(
                    "403",
                    {
                        "description": "The API key lacks a required scope (missing_scopes)",
                        "content": content("403"),
                    },
                )
            responses.setdefault(
                "429",
                {
                    "description": "A limit of the key (or its owner's pool) is spent for now",
                    "headers": limited,
                    "content": content("429"),
                },
            )
            responses.setdefault(
                "503",
                {
                    "description": "API keys cannot be checked right now",
                    "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    "content": content("503"),
                },
            )
    if used:
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.setdefault(PROBLEM_SCHEMA, _PROBLEM_SCHEMA)


# The 429's headers (each with the example's value) and what they say.
_LIMITED_HEADERS = (
    ("Retry-After", "integer", "Whole seconds until the spent limit's window turns"),
    (
        "RateLimit-Policy",
        "string",
        "The spent limit as a policy of draft-ietf-httpapi-ratelimit-headers (a structured "
        "field): named `key:N/DURATION` or `owner:N/DURATION`, q = N, w = the window in seconds",
    ),
    (
        "RateLimit",
        "string",
        "That policy's state (draft-ietf-httpapi-ratelimit-headers): r = 0 left, t = seconds "
        "until the window turns",
    ),
)


def _limited_headers(example: RateLimitedError) -> dict[str, Any]:
    """The 429's header objects, each example taken from what `example` really sends."""
    sent = dict(example.http_headers("api"))
    return {
        name: {
            "description": description,
            "schema": {"type": kind},
            "example": int(sent[name.lower()]) if kind == "integer" else sent[name.lower()],
        }
        for name, kind, description in _LIMITED_HEADERS
    }
