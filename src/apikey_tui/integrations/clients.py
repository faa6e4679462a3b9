"""A request's client address in each framework's form: the peer, or what a trusted proxy says."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from operator import methodcaller
from typing import Any

from apikey_tui.config import CLIENT_HEADER_ENV, TRUSTED_PROXIES_ENV
from apikey_tui.networks import XFF, TrustedProxies

ClientReader = Callable[[Any], str | None]

log = logging.getLogger("apikey_tui.integrations")


class _Once:
    """A warning logged the first time only, per process: a misconfigured server would otherwise
    write it at every request."""

    def __init__(self, line: str) -> None:
        self.line, self.done = line, False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            log.warning(self.line)


# Every key with network rules is refused from such a client, so its team needs to know why.
_REWRITTEN = _Once(
    "a request's client is no TCP peer (port 0), or came from a forwarding header the server"
    " applied itself (uvicorn's proxy headers, on by default): it counts as unknown, and keys"
    " with network rules are refused. Run uvicorn with --no-proxy-headers and name the proxy"
    " in trusted_proxies (APIKEY_TUI_TRUSTED_PROXIES)"
)


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


def _taken_from_header(host: str, value: str) -> bool:
    """Whether an X-Forwarded-For value names `host` with a port ('host:443', '[host]:443'):
    then a server's own proxy handling may have made it the peer, port and all (uvicorn 0.54
    does), and the peer is no TCP peer we can judge. A real peer's own address and port in the
    header it sends is no case worth admitting."""
    return f"{host}:" in value or f"{host}]:" in value


def _asgi_peer(scope: Mapping[str, Any]) -> str | None:
    client = scope.get("client")
    # Port 0 is no TCP peer: a server's own proxy-header handling put a forwarding header's
    # address there (uvicorn's default believes X-Forwarded-For from 127.0.0.1, for anyone on
    # the host or behind a local proxy that passes the client's header on). We cannot judge it:
    # unknown, which no network rule admits. Trusted proxies are named here, never there.
    if not client or len(client) < 2:
        return None
    if not client[1]:
        _REWRITTEN()
        return None
    host: str = client[0]
    for name, value in scope.get("headers", ()):
        if name == b"x-forwarded-for" and _taken_from_header(host, value.decode("latin-1")):
            _REWRITTEN()
            return None  # the header's address with the header's port (see _taken_from_header)
    return host


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


# REMOTE_PORT of an address no TCP peer has: an int in Django's ASGI META, text in a WSGI environ.
_NO_PEER_PORT = (0, "0")
# A WSGI environ's peer: a C call, not a Python one, so the warm path of a WSGI request stays a
# handful of calls (no WSGI server we know reports a port of 0; see meta_peer).
_remote_addr: ClientReader = methodcaller("get", "REMOTE_ADDR")


def meta_peer(meta: Mapping[str, Any]) -> str | None:
    """Django's request.META peer. Port 0 is no TCP peer, as in `_asgi_peer`: under ASGI,
    Django copies scope["client"] into REMOTE_ADDR and REMOTE_PORT, so uvicorn's default proxy
    handling (believing X-Forwarded-For from 127.0.0.1) puts a client-chosen address there.
    Unknown; so is an address the header names with a port (`_taken_from_header`)."""
    host: str | None = meta.get("REMOTE_ADDR") or None
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    if meta.get("REMOTE_PORT") in _NO_PEER_PORT or (
        host is not None and forwarded is not None and _taken_from_header(host, forwarded)
    ):
        _REWRITTEN()
        return None  # a port taken from the header too, as in `_asgi_peer`
    return host


def environ_client(proxies: TrustedProxies, peer: ClientReader = _remote_addr) -> ClientReader:
    """How to read a WSGI environ's (or, with `meta_peer`, Django's request.META's) client: its
    peer, or the trusted proxy's header (the server joined its lines with commas)."""
    if not proxies:
        return peer  # no header is ever read
    key = "HTTP_" + proxies.header.upper().replace("-", "_")

    def read(environ: Mapping[str, Any]) -> str | None:
        value = environ.get(key)
        return proxies.client(peer(environ) or None, [] if value is None else [value])

    return read
