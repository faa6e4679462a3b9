"""A request's client address in each framework's form: the peer, or what a trusted proxy says."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from operator import methodcaller
from typing import Any

from apikey_tui.config import CLIENT_HEADER_ENV, TRUSTED_PROXIES_ENV
from apikey_tui.networks import XFF, TrustedProxies

ClientReader = Callable[[Any], str | None]


def trusted_proxies(
    given: TrustedProxies | Iterable[str] | None = None, header: str | None = None
) -> TrustedProxies:
    """The trusted proxies an integration was given, else those of the environment
    (APIKEY_TUI_TRUSTED_PROXIES, APIKEY_TUI_CLIENT_HEADER); none by default. A bad entry is an
    InvalidInputError now, at start-up, never a guess per request."""
    if isinstance(given, TrustedProxies):
        return given
    if given is None:
        given = os.environ.get(TRUSTED_PROXIES_ENV, "").replace(",", " ").split()
    return TrustedProxies(given, header or os.environ.get(CLIENT_HEADER_ENV) or XFF)


def _asgi_peer(scope: Mapping[str, Any]) -> str | None:
    client = scope.get("client")
    # Port 0 is no TCP peer: a server's own proxy-header handling put a forwarding header's
    # address there (uvicorn's default believes X-Forwarded-For from 127.0.0.1, for anyone on
    # the host or behind a local proxy that passes the client's header on). We cannot judge it:
    # unknown, which no network rule admits. Trusted proxies are named here, never there.
    return client[0] if client and len(client) > 1 and client[1] else None


def asgi_client(proxies: TrustedProxies) -> ClientReader:
    """How to read an ASGI scope's client: its `client` peer, or the trusted proxy's header."""
    if not proxies:
        return _asgi_peer  # no header is ever read
    name = proxies.header.encode()

    def read(scope: Mapping[str, Any]) -> str | None:
        # Every line of the header, in order: two lines are one list (RFC 9110 5.3).
        values = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]
        return proxies.client(_asgi_peer(scope), values)

    return read


def environ_client(proxies: TrustedProxies) -> ClientReader:
    """How to read a WSGI environ's (or Django's request.META's) client: REMOTE_ADDR, or the
    trusted proxy's header (the server joined its lines with commas)."""
    if not proxies:
        # A C call, not a Python one: the warm path of a WSGI request stays a handful of calls.
        return methodcaller("get", "REMOTE_ADDR")
    key = "HTTP_" + proxies.header.upper().replace("-", "_")

    def read(environ: Mapping[str, Any]) -> str | None:
        value = environ.get(key)
        return proxies.client(environ.get("REMOTE_ADDR") or None, [] if value is None else [value])

    return read
