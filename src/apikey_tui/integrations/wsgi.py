"""WSGI middleware (Flask, Django, any WSGI app) with per-route scope requirements."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from apikey_tui.errors import AuthError
from apikey_tui.integrations.routes import RouteGuard

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment  # noqa: F401


class ApiKeyWSGIMiddleware(RouteGuard["WSGIApplication"]):
    """Check every request's key against the route's scopes; the caller lands in environ["apikey"].

    Django: wrap `get_wsgi_application()`.
    Flask: `app.wsgi_app = ApiKeyWSGIMiddleware(app.wsgi_app, verifier, routes)`.
    """

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        required = self.rules.required(environ["REQUEST_METHOD"], path)
        if required is not None:
            try:
                caller = self.verifier.verify(environ.get("HTTP_AUTHORIZATION"), required)
            except AuthError as error:
                status, headers, body = error.response(self.verifier.realm)
                start_response(f"{status} {error.title}", headers)
                return [body]
            environ["apikey"] = caller
        return self.app(environ, start_response)
