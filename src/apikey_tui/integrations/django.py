"""Django: a native middleware configured in settings, sync and async.

    MIDDLEWARE = [..., "apikey_tui.integrations.django.ApiKeyMiddleware", ...]
    APIKEY_TUI = {
        "VERIFIER": "postgresql+psycopg://svc@db/keys",   # or a Verifier instance
        "OPTIONS": {"revocation_bound": 1.0},             # Verifier options, with a URL only
        "ROUTES": [route("/health", public=True), route("/models", "serving", "project")],
        "DEFAULT_SCOPES": [],                             # for paths no route covers
        "UNMATCHED": "key",                               # or "deny"
        "TRUSTED_PROXIES": ["10.0.0.0/8"],                # whose X-Forwarded-For names the client
        "CLIENT_HEADER": "x-forwarded-for",               # or "forwarded" (RFC 7239)
    }

or, instead of ROUTES, DEFAULT_SCOPES and UNMATCHED, serve-auth's rules file (read at start-up):
`"RULES_FILE": "/etc/apikey-tui/rules.toml"`.

The caller lands in `request.apikey`. Rules match `request.path_info`, the path below the
mount point (SCRIPT_NAME, or the ASGI root_path), like the WSGI and ASGI middleware. A refusal
is the same problem+json answer as every other adapter's.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse

from apikey_tui import forksafety
from apikey_tui.errors import AuthError, InvalidInputError
from apikey_tui.integrations.clients import (
    ClientReader,
    environ_client,
    meta_peer,
    trusted_proxies,
)
from apikey_tui.integrations.guard import Guard
from apikey_tui.integrations.routes import RouteScopes
from apikey_tui.integrations.rules_file import load_rules
from apikey_tui.verifier import Verifier

SETTING = "APIKEY_TUI"
_RULE_SETTINGS = ("ROUTES", "DEFAULT_SCOPES", "UNMATCHED")

_by_url: dict[str, Verifier] = {}
_by_url_lock = threading.Lock()


def _new_lock() -> None:
    global _by_url_lock
    _by_url_lock = threading.Lock()  # a thread that held it did not survive the fork


forksafety.reset_in_child(_new_lock)


def config() -> dict[str, Any]:
    """The APIKEY_TUI setting (ImproperlyConfigured when it is missing or names no verifier)."""
    value = getattr(settings, SETTING, None)
    if not isinstance(value, dict) or "VERIFIER" not in value:
        raise ImproperlyConfigured(
            f"settings.{SETTING} must be a dict with 'VERIFIER': a database URL or a Verifier"
        )
    return value


def get_verifier() -> Verifier:
    """The process's verifier: the configured instance, or one built (once) from the URL.

    A verifier built here is closed at interpreter exit (flushing last-used times). Found once
    and kept (DRF asks at every request, and reading settings costs more than the check); a
    change of the setting (override_settings in tests) is heard through `setting_changed`.
    """
    known = _current.get(SETTING)
    if known is not None:
        return known
    found = _find_verifier()
    _current[SETTING] = found
    return found


def _forget_verifier(*, setting: str, **_: Any) -> None:
    """setting_changed's receiver: the setting changed, so the verifier and the client reader
    are found again."""
    if setting == SETTING:
        _current.clear()
        _readers.clear()


# The verifier get_verifier found, under SETTING: one entry, cleared when the setting changes.
_current: dict[str, Verifier] = {}
# The client reader of get_meta_client, likewise.
_readers: dict[str, ClientReader] = {}
setting_changed.connect(_forget_verifier)


def _find_verifier() -> Verifier:
    configured = config()
    verifier = configured["VERIFIER"]
    if isinstance(verifier, Verifier):
        return verifier
    if not isinstance(verifier, str):
        raise ImproperlyConfigured(f"settings.{SETTING}['VERIFIER'] must be a URL or a Verifier")
    with _by_url_lock:
        built = _by_url.get(verifier)
        if built is None:
            built = _by_url[verifier] = Verifier.from_url(verifier, **configured.get("OPTIONS", {}))
            atexit.register(built.close)
        return built


def request_authorization(request: HttpRequest) -> str | None:
    """The Authorization header of a Django (or DRF) request."""
    header: str | None = request.META.get("HTTP_AUTHORIZATION")
    return header


def meta_client() -> ClientReader:
    """How to read a Django (or DRF) request's client for network rules from its META:
    REMOTE_ADDR, or what a proxy in TRUSTED_PROXIES says (default:
    $APIKEY_TUI_TRUSTED_PROXIES, else none)."""
    configured = config()
    try:
        proxies = trusted_proxies(
            configured.get("TRUSTED_PROXIES"), configured.get("CLIENT_HEADER")
        )
    except InvalidInputError as exc:
        raise ImproperlyConfigured(f"settings.{SETTING}: {exc}") from None
    return environ_client(proxies, meta_peer)


def request_client() -> ClientReader:
    """meta_client, for the request itself."""
    read = meta_client()
    return lambda request: read(request.META)


def get_meta_client() -> ClientReader:
    """meta_client of the settings in force, built once (DRF reads it at every request); a
    change of the setting is heard as get_verifier hears it."""
    known = _readers.get(SETTING)
    if known is None:
        known = _readers[SETTING] = meta_client()
    return known


def route_rules() -> RouteScopes:
    """The route rules of the settings: ROUTES (with DEFAULT_SCOPES, UNMATCHED) or RULES_FILE."""
    configured = config()
    path = configured.get("RULES_FILE")
    if path is None:
        return RouteScopes(
            configured.get("ROUTES", ()),
            configured.get("DEFAULT_SCOPES", ()),
            unmatched=configured.get("UNMATCHED", "key"),
        )
    both = [name for name in _RULE_SETTINGS if name in configured]
    if both:
        raise ImproperlyConfigured(
            f"settings.{SETTING}: RULES_FILE holds the rules; drop {', '.join(both)}"
        )
    try:
        return load_rules(path)
    except ValueError as exc:
        raise ImproperlyConfigured(f"settings.{SETTING}['RULES_FILE']: {exc}") from None


def problem_response(error: AuthError, realm: str) -> HttpResponse:
    """The error's RFC 9457 answer as a Django response."""
    status, headers, body = error.response(realm)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        response[name] = value
    return response


class ApiKeyMiddleware:
    """Check every request's key against the route's scopes (settings.APIKEY_TUI).

    Works under WSGI and ASGI: with an async chain, a cached key is answered without a thread
    and a cold check never blocks the event loop.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.guard = Guard(get_verifier(), request_authorization, route_rules(), request_client())
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        try:
            caller = self.guard.check(request.method or "GET", request.path_info, request)
        except AuthError as error:
            return problem_response(error, self.guard.verifier.realm)
        if caller is not None:
            request.apikey = caller
            setattr(request, self.guard.checked, caller)  # DRF's authentication reads it
        return self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        try:
            method, path = request.method or "GET", request.path_info
            caller = await self.guard.check_async(method, path, request)
        except AuthError as error:
            return problem_response(error, self.guard.verifier.realm)
        if caller is not None:
            request.apikey = caller
            setattr(request, self.guard.checked, caller)  # DRF's authentication reads it
        response: Awaitable[HttpResponse] = self.get_response(request)
        return await response
