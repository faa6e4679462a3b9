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

    Rules match PATH_INFO, the path below the mount point (SCRIPT_NAME).
    Django: wrap `get_wsgi_application()`.
    Flask: `app.wsgi_app = ApiKeyWSGIMiddleware(app.wsgi_app, verifier, routes)`.
    """

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        try:
            required = self.rules.required(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""))
            if required is not None:
                environ["apikey"] = self.verifier.verify(
                    environ.get("HTTP_AUTHORIZATION"), required
                )
        except AuthError as error:
            status, headers, body = error.response(self.verifier.realm)
            start_response(f"{status} {error.title}", headers)
            return [body]
        return self.app(environ, start_response)
