"""WSGI middleware (Flask, Django, any WSGI app) with per-route scope requirements."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from apikey_tui.errors import AuthError
from apikey_tui.integrations.clients import environ_client
from apikey_tui.integrations.guard import GuardedApp

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment  # noqa: F401


def environ_authorization(request: WSGIEnvironment) -> str | None:
    """The Authorization header of a WSGI environ."""
    header: str | None = request.get("HTTP_AUTHORIZATION")
    return header


class ApiKeyWSGIMiddleware(GuardedApp["WSGIApplication", "WSGIEnvironment"]):
    """Check every request's key against the route's scopes; the caller lands in environ["apikey"].

    Rules match PATH_INFO, the path below the mount point (SCRIPT_NAME).
    Django: wrap `get_wsgi_application()`.
    Flask: `app.wsgi_app = ApiKeyWSGIMiddleware(app.wsgi_app, verifier, routes)`.
    """

    authorization = staticmethod(environ_authorization)
    client_reader = staticmethod(environ_client)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
            caller = self.guard.check(method, path, environ)
        except AuthError as error:
            status, headers, body = self.guard.refusal(error)
            start_response(f"{status} {error.title}", headers)
            return [body]
        if caller is not None:
            environ["apikey"] = caller
        return self.app(environ, start_response)
