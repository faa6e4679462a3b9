"""Forward auth for reverse proxies: one ASGI app answering "may this request pass?".

nginx `auth_request`, Caddy `forward_auth` and Traefik `ForwardAuth` ask `GET /auth` with the
original method and URI in `X-Forwarded-Method` and `X-Forwarded-Uri` (or `X-Original-URI`);
Envoy `ext_authz` (HTTP) asks `/envoy<original path>` with the original method (its
`path_prefix`). The answer is 200 with the caller in `X-Auth-Request-User`, `X-ApiKey-Name`,
`X-ApiKey-Id` and `X-ApiKey-Scopes` (never the key), or the verifier's own refusal: 401 or 403
with `WWW-Authenticate`, 400 for a request that cannot be judged, 503 when the key database
cannot be asked. Never 202 or 204 (Envoy denies them), never a 200 on any doubt.

Which scopes a request needs: `scope=` parameters on the auth URL (fixed per proxy location),
else the route rules of a TOML file (`rules_file.load_rules`, a path no rule covers refused by
default), else nothing passes: serve-auth cannot see the upstream, so it fails closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from apikey_tui.errors import AuthError, InvalidInputError, UnsafePathError
from apikey_tui.integrations.asgi_messages import (
    HTTPApp,
    Receive,
    Scope,
    Send,
    encoded_headers,
    respond,
    scope_authorization,
)
from apikey_tui.integrations.clients import asgi_client
from apikey_tui.integrations.clients import trusted_proxies as trusted_proxies_of
from apikey_tui.integrations.guard import Guard
from apikey_tui.integrations.routes import RouteScopes
from apikey_tui.integrations.rules_file import load_rules
from apikey_tui.names import parse_scopes
from apikey_tui.networks import TrustedProxies
from apikey_tui.verifier import Caller, Verifier
from apikey_tui.verifier.gate import OutageLog

logger = logging.getLogger(__name__)

AUTH_PATH = "/auth"
METRICS_PATH = "/metrics"  # Prometheus, with the `metrics` extra; keep the port private
ENVOY_PREFIX = "/envoy"
# The identity headers of an allowed request, in this order; the proxy copies them upstream and
# must strip client-sent ones (the snippets in deploy/ do).
IDENTITY_HEADERS = ("x-auth-request-user", "x-apikey-name", "x-apikey-id", "x-apikey-scopes")
# A "/", "." or "\" percent-encoded in the original URI: the app behind the proxy may decode it
# (and read another path than the rules did) or not. No rule reading is safe, so it is refused.
_ENCODED_SEPARATOR = re.compile(r"%(?:2[ef]|5c)", re.IGNORECASE)
# Origin form (RFC 9112): an absolute path of RFC 3986 path characters and whole %XX escapes,
# then an optional query of any visible ASCII but "#" (clients send "[" and "|" there unescaped).
# A "#" is no fragment on the wire: nginx forwards "/health#/../admin" to the service verbatim.
_ORIGIN_FORM = re.compile(
    r"((?:/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-Fa-f]{2})*)+)(?:\?[\x21\x22\x24-\x7e]*)?"
)
_METHOD = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,32}")
_FORWARDED = {
    b"x-forwarded-method": "method",
    b"x-original-method": "method",
    b"x-forwarded-uri": "uri",
    b"x-original-uri": "uri",
}
# Every request asks about an original URI and, once allowed, sends its caller's headers: the
# answers for recent URIs and callers are kept (bounded in entries and, for URIs, in length,
# like RouteScopes' cache), so a steady stream of requests pays for neither again.
_CACHED_URIS = 2048
_CACHED_URI_LENGTH = 256
_CACHED_ANSWERS = 4096
_CACHED_QUERIES = 256  # auth URLs' queries: one per proxy location
# Headers with which a client asks the service to route its request as another method: Rack's
# MethodOverride (Rails), Symfony and Laravel, Express's method-override, ASP.NET and OData
# read one of them. The proxy passes them on, so the service may act on a DELETE that was
# judged as a POST: a request must pass the rules of each method it names too.
_METHOD_OVERRIDES = (b"x-http-method-override", b"x-http-method", b"x-method-override")


# serve-auth without a rules file: every path is one no rule covers.
_NO_RULES = RouteScopes((), unmatched="deny")


class ForwardedRequestError(AuthError):
    """The proxy did not say clearly which request it asks about: 400, no challenge.

    A missing `X-Forwarded-Uri` when route rules decide, a method that is not a token, two
    values for one of these headers, or an auth URL with an unknown parameter. Always a
    refusal: a request the rules cannot place never passes.
    """

    status = 400
    title = "Bad Request"

    def challenge(self, realm: str) -> str | None:
        return None


def original_path(uri: str) -> str:
    """The decoded path of the URI a proxy forwarded (its query dropped).

    Raises UnsafePathError for a URI not in origin form (a "#" included), one holding an encoded
    separator, or one that decodes to something that is not UTF-8; dot segments and the other
    readings of the path are RouteScopes' work.
    """
    if len(uri) <= _CACHED_URI_LENGTH:
        return _cached_path(uri)  # a refusal is an exception, which the cache never keeps
    return _original_path(uri)


def _original_path(uri: str) -> str:
    """original_path without the cache."""
    form = _ORIGIN_FORM.fullmatch(uri)
    if form is None or _ENCODED_SEPARATOR.search(target := form.group(1)):
        raise UnsafePathError()
    try:
        return unquote_to_bytes(target).decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafePathError() from None


_cached_path = functools.lru_cache(maxsize=_CACHED_URIS)(_original_path)


class ForwardAuthApp(HTTPApp):
    """The ASGI app behind `apikey-tui serve-auth`; proxies ask it about each request.

    `rules` decide what a request needs when the auth URL names no `scope=`; without rules such
    a request is refused (403): no rule names its path. `proxies`: the proxies whose
    forwarding header names the client for network rules (serve-auth's --trusted-proxy; the
    proxy asking is one of them, or the client is taken to be the proxy itself). The verifier
    is closed at lifespan shutdown.
    """

    name = "serve-auth"
    logger = logger

    def __init__(
        self,
        verifier: Verifier,
        rules: RouteScopes | None = None,
        proxies: TrustedProxies | None = None,
    ) -> None:
        if rules is None:
            logger.warning(
                "serve-auth has no --rules: only auth URLs naming scope= can pass, every other "
                "request is refused (403)"
            )
            rules = _NO_RULES
        client = asgi_client(proxies if proxies is not None else trusted_proxies_of())
        self.guard = Guard(verifier, scope_authorization, rules, client)
        # A misconfigured proxy sends every request so: a line per interval, not per request.
        self.complaints = OutageLog(logger)
        # An empty table checks a path's normal form and asks for any valid key.
        self.normal_form = RouteScopes(())
        self.metrics = _metrics_page(verifier)  # None without the `metrics` extra
        # A 200's headers per caller, encoded once (a caller changed is another key here).
        self._answers: dict[Caller | None, list[tuple[bytes, bytes]]] = {}

    @property
    def verifier(self) -> Verifier:
        """The guard's verifier."""
        return self.guard.verifier

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        try:
            if path == AUTH_PATH:
                required, route = self._from_headers(scope)
            elif path == ENVOY_PREFIX or path.startswith(ENVOY_PREFIX + "/"):
                required, route = self._from_envoy(scope)
            elif path == METRICS_PATH and self.metrics is not None:
                content_type, page = self.metrics()
                await respond(scope, send, 200, [("content-type", content_type)], page)
                return
            else:
                await respond(scope, send, 404, [("content-type", "text/plain")], b"ask /auth\n")
                return
            caller: Caller | None = None
            if required is not None:
                caller = await self.guard.caller_async(scope, required, route)
        except AuthError as error:
            await respond(scope, send, *self.guard.refusal(error))
            return
        await self._allow(send, caller)

    async def _allow(self, send: Send, caller: Caller | None) -> None:
        """Answer 200 with the caller's identity headers, encoded once per caller."""
        headers = self._answers.get(caller)
        if headers is None:
            if len(self._answers) >= _CACHED_ANSWERS:
                self._answers.clear()  # a few hot callers come straight back
            headers = self._answers[caller] = encoded_headers(_identity(caller), b"")
        # A copy: the server owns the message's list once it is sent.
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
        await send({"type": "http.response.body", "body": b""})

    async def startup(self) -> None:
        # Connected and the schema checked before the first request, which then finds the
        # index loading (or loaded) instead of starting it. A database down now is no reason
        # not to serve: checks answer 503 and retry by themselves.
        with contextlib.suppress(AuthError):
            await asyncio.to_thread(self.guard.verifier.start)

    async def shutdown(self) -> None:
        self.guard.verifier.close()  # flush last-used times

    def _from_headers(self, scope: Scope) -> tuple[tuple[str, ...] | None, str | None]:
        """What the request described by X-Forwarded-* needs (nginx, Caddy, Traefik), and its
        path when the proxy said it."""
        forwarded: dict[str, str] = {}
        overrides: list[bytes] = []
        for name, value in scope["headers"]:
            if name[:2] not in (b"x-", b"X-"):
                continue
            lowered = name.lower()
            field = _FORWARDED.get(lowered)
            if field is None and lowered in _METHOD_OVERRIDES:
                overrides.append(value)
            if field is not None:
                text = value.decode("latin-1")
                # nginx configurations often set both spellings: one value is one request.
                if forwarded.setdefault(field, text) != text:
                    raise ForwardedRequestError(
                        f"two values for the original {field} (X-Forwarded-* and X-Original-*)"
                    )
        query: bytes = scope.get("query_string", b"")
        uri = forwarded.get("uri")
        if query and uri is not None and "?" in uri:
            # A proxy that appends the client's query to the auth URL (Caddy's `uri /auth`
            # without a "?") would let the client name the scopes: `/models?scope=project`.
            client = uri.split("?", 1)[1].split("#", 1)[0].encode("latin-1")
            if client and (query == client or query.endswith(b"&" + client)):
                raise ForwardedRequestError(
                    "the auth URL carries the client's query string: the proxy must drop it "
                    "(Caddy: uri /auth?)"
                )
        scopes = self._query_scopes(query)
        method = _method(forwarded.get("method"))
        if scopes is not None:  # fixed for this proxy location; a given path is still checked
            route = None
            if uri is not None:
                route = original_path(uri)
                self.normal_form.required(method or "GET", route)
            return scopes, route
        if uri is None or method is None:
            missing = "X-Forwarded-Uri" if uri is None else "X-Forwarded-Method"
            self.complaints.warning(
                "serve-auth refused a request without %s: fix the proxy", missing
            )
            raise ForwardedRequestError(
                f"the proxy sent no {missing}: route rules cannot place the request"
            )
        route = original_path(uri)
        return self._required(method, route, overrides), route

    def _required(self, method: str, route: str, overrides: list[bytes]) -> tuple[str, ...] | None:
        """What the rules ask of a request to `route`: by its method, and by every method a
        method-override header names (the service may route it so). Public only if all are."""
        rules = self.guard.rules
        required = rules.required(method, route)
        if not overrides:
            return required
        needs = set(required or ())
        public = required is None
        for value in overrides:
            named = _method(value.decode("latin-1").strip())
            assert named is not None
            other = rules.required(named, route)
            if other is not None:
                public = False
                needs.update(other)
        return None if public else tuple(sorted(needs))

    def _from_envoy(self, scope: Scope) -> tuple[tuple[str, ...] | None, str]:
        """Envoy's check request: its own method and path are the original's, after the prefix."""
        # The query string is the client's: it never names scopes here.
        raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        # raw_path is what the proxy sent, undecoded; an unexpected shape is refused.
        if not raw.startswith(ENVOY_PREFIX.encode()):
            raise UnsafePathError()
        rest = raw[len(ENVOY_PREFIX) :].decode("latin-1") or "/"
        method = _method(scope.get("method"))
        route = original_path(rest)
        overrides = [value for name, value in scope["headers"] if name.lower() in _METHOD_OVERRIDES]
        return self._required(method or "GET", route, overrides), route

    @staticmethod
    def _query_scopes(query: bytes) -> tuple[str, ...] | None:
        """The scopes named on the auth URL, or None when it names none."""
        if not query:
            return None
        # A proxy location asks with one fixed query: parsed once (a refusal, an exception,
        # is never kept), as original paths are.
        if len(query) <= _CACHED_URI_LENGTH:
            return _cached_scopes(query)
        return _scopes_of_query(query)


def _scopes_of_query(query: bytes) -> tuple[str, ...]:
    """The scopes a non-empty auth URL query names (only `scope=` parameters)."""
    values: list[str] = []
    for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
        if name != "scope":
            # A typo like ?scopes= must not silently mean "any key".
            raise ForwardedRequestError(f"the auth URL has an unknown parameter {name[:40]!r}")
        values.append(value)
    try:
        return parse_scopes(values)
    except InvalidInputError as exc:
        raise ForwardedRequestError(f"the auth URL names a bad scope: {exc}") from None


_cached_scopes = functools.lru_cache(maxsize=_CACHED_QUERIES)(_scopes_of_query)


def _method(value: str | None) -> str | None:
    if value is None:
        return None
    if not _METHOD.fullmatch(value):
        raise ForwardedRequestError("the original method is not an HTTP method token")
    return value.upper()


def _identity(caller: Caller | None) -> list[tuple[str, str]]:
    """The 200 answer's headers: the caller, or empty values for a public route.

    Empty values are sent on purpose: Traefik and Envoy then overwrite a client-sent header of
    the same name with nothing, and nginx sends no header at all for an empty variable.
    """
    values: Iterable[str] = (
        ("", "", "", "")
        if caller is None
        else (caller.owner, caller.key_name, caller.public_id, " ".join(sorted(caller.scopes)))
    )
    return [
        *zip(IDENTITY_HEADERS, values, strict=True),
        ("cache-control", "no-store"),
        ("content-length", "0"),
    ]


def _metrics_page(verifier: Verifier) -> Callable[[], tuple[str, bytes]] | None:
    """The verifier's metrics in Prometheus text format, or None without prometheus-client."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

        from apikey_tui.integrations.prometheus import register
    except ImportError:
        return None
    registry = CollectorRegistry()
    register(verifier, registry)
    return lambda: (CONTENT_TYPE_LATEST, generate_latest(registry))


def create_app(
    database_url: str,
    rules_file: str | Path | None = None,
    *,
    trusted_proxies: Iterable[str] | None = None,
    client_header: str | None = None,
    **verifier_options: Any,
) -> ForwardAuthApp:
    """The app on a key database; the rules file and the trusted proxies are read now, so a
    bad one fails at start."""
    rules = load_rules(rules_file) if rules_file is not None else None
    proxies = trusted_proxies_of(trusted_proxies, client_header)
    return ForwardAuthApp(Verifier.from_url(database_url, **verifier_options), rules, proxies)
