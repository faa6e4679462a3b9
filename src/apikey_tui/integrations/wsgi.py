"""WSGI middleware (Flask, Django, any WSGI app) with per-route scope requirements."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from apikey_tui.errors import AuthError
from apikey_tui.integrations.routes import Route, RouteScopes
from apikey_tui.verifier import Verifier

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment


class ApiKeyWSGIMiddleware:
    """Check every request's key against the route's scopes; the caller lands in environ["apikey"].

    Django: wrap `get_wsgi_application()`.
    Flask: `app.wsgi_app = ApiKeyWSGIMiddleware(app.wsgi_app, verifier, routes)`.
    """

    def __init__(
        self,
        app: WSGIApplication,
        verifier: Verifier,
        routes: Iterable[Route] = (),
        default_scopes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.rules = RouteScopes(routes, default_scopes)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
        required = self.rules.required(environ["REQUEST_METHOD"], path)
        if required is not None:
            try:
                caller = self.verifier.verify(environ.get("HTTP_AUTHORIZATION"), required)
            except AuthError as error:
                body = json.dumps(error.problem()).encode()
                headers = [
                    *error.http_headers(self.verifier.realm),
                    ("content-length", str(len(body))),
                ]
                start_response(f"{error.status} {error.title}", headers)
                return [body]
            environ["apikey"] = caller
        return self.app(environ, start_response)
