"""Tests of the ASGI, FastAPI and WSGI adapters inside the real frameworks."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask, request
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route as HttpRoute

from apikey_tui.errors import AuthError
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.fastapi import ApiKeyAuth
from apikey_tui.integrations.routes import RouteScopes, route
from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP

RULES = [
    route("/health", public=True),
    route("/projects", "project"),
    route("/models", "serving", "project"),
]


@pytest.fixture
def keys(sqlite_url: str) -> Iterator[tuple[Verifier, str, str]]:
    """A verifier plus a 'project'-only key and a 'project'+'serving' key."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    project = store.create_key("alice", "proj", ["project"]).plaintext
    both = store.create_key("alice", "both", ["project", "serving"]).plaintext
    store.close()
    verifier = Verifier.from_url(sqlite_url, hasher=CHEAP)
    yield verifier, project, both
    verifier.close()


def wrong_key(key: str) -> str:
    """The key with its last character replaced by a different one: never the key itself."""
    return key[:-1] + ("b" if key[-1] == "a" else "a")


def _check_protocol(client: TestClient, project: str, both: str) -> None:
    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"ApiKey {key}"}

    assert client.get("/health").status_code == 200
    missing = client.get("/projects")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'ApiKey realm="api"'
    assert missing.headers["content-type"] == "application/problem+json"
    assert client.get("/projects", headers=auth(project)).text == "alice/proj"
    forbidden = client.get("/models/m/predict", headers=auth(project))
    assert forbidden.status_code == 403 and forbidden.json()["missing_scopes"] == ["serving"]
    assert client.get("/models/m/predict", headers=auth(both)).text == "alice/both"
    bad = client.get("/projects", headers=auth(wrong_key(both)))
    assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]
    assert both[10:40] not in bad.text


def test_wrong_key_always_differs_from_the_key() -> None:
    """The "bad key" helper changes the key for every last character (once 'q' kept it equal)."""
    for last in "abcdefghijklmnopqrstuvwxyz234567":
        key = "ak" + "x" * 16 + "." + "y" * 58 + last
        assert wrong_key(key) != key and len(wrong_key(key)) == len(key)


def test_route_scopes_pick_the_most_specific_route() -> None:
    """Longer paths win, method-specific routes win, unmatched paths need a key of any scope."""
    rules = RouteScopes(
        [
            route("/models", "serving"),
            route("/models/admin", "admin"),
            route("/models", "x", methods=["DELETE"]),
        ]
    )
    assert rules.required("GET", "/models/m") == ("serving",)
    assert rules.required("GET", "/models/admin/y") == ("admin",)
    assert rules.required("DELETE", "/models/m") == ("x",)
    assert rules.required("GET", "/modelsX") == ()
    assert RouteScopes([route("/health", public=True)]).required("GET", "/health") is None


def test_asgi_middleware_in_starlette(keys: tuple[Verifier, str, str]) -> None:
    """Starlette behind the middleware answers 200/401/403 per route and sees the caller."""
    verifier, project, both = keys

    async def who(request: Request) -> PlainTextResponse:
        caller: Caller = request.state.apikey
        return PlainTextResponse(f"{caller.owner}/{caller.key_name}")

    async def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[
            HttpRoute("/health", ok),
            HttpRoute("/projects", who),
            HttpRoute("/models/m/predict", who),
        ],
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=RULES)],
    )
    with TestClient(app) as client:
        _check_protocol(client, project, both)
        two = client.get("/projects", headers=[("Authorization", f"ApiKey {project}")] * 2)
        assert two.status_code == 400


def test_cors_outside_the_middleware_answers_preflights_and_labels_refusals(
    keys: tuple[Verifier, str, str],
) -> None:
    """CORS outside ours answers a keyless preflight and adds its headers to our 401 (docs)."""
    from starlette.middleware.cors import CORSMiddleware

    verifier, project, _both = keys
    reached: list[str] = []

    async def projects(request: Request) -> PlainTextResponse:
        reached.append(request.method)
        return PlainTextResponse("ok")

    app = Starlette(
        routes=[HttpRoute("/projects", projects, methods=["GET", "OPTIONS"])],
        middleware=[
            Middleware(CORSMiddleware, allow_origins=["https://app.example"], allow_headers=["*"]),
            Middleware(ApiKeyMiddleware, verifier=verifier, routes=RULES, unmatched="deny"),
        ],
    )
    origin = {"Origin": "https://app.example"}
    with TestClient(app) as client:
        preflight = client.options(
            "/projects",
            headers={**origin, "Access-Control-Request-Method": "GET",
                     "Access-Control-Request-Headers": "authorization"},
        )  # fmt: skip
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        refused = client.get("/projects", headers=origin)
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == "https://app.example"
        assert client.options("/projects", headers=origin).status_code == 401  # not a preflight
        assert reached == []
        assert (
            client.get("/projects", headers={**origin, "Authorization": f"ApiKey {project}"}).text
            == "ok"
        )


def test_route_answer_cache_stays_bounded() -> None:
    """Long paths and refusals are not cached, and distinct paths stop at the cache's bound."""
    rules = RouteScopes([route("/models", "serving")])
    assert rules.required("GET", "/models/" + "x" * 300) == ("serving",)
    with pytest.raises(AuthError):
        rules.required("GET", "/models/..")
    assert rules._cached.cache_info().currsize == 0
    for n in range(5000):
        assert rules.required("GET", f"/models/{n}") == ("serving",)
    assert rules._cached.cache_info().currsize == 2048


def test_fastapi_dependency(keys: tuple[Verifier, str, str]) -> None:
    """FastAPI routes depending on ApiKeyAuth.require answer like the middleware does."""
    verifier, project, both = keys
    app = FastAPI()
    auth = ApiKeyAuth(verifier)
    auth.install(app)

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/projects", response_class=PlainTextResponse)
    def projects(caller: Caller = auth.require("project")) -> str:  # noqa: B008
        return f"{caller.owner}/{caller.key_name}"

    @app.get("/models/m/predict", response_class=PlainTextResponse)
    def predict(caller: Caller = auth.require("serving", "project")) -> str:  # noqa: B008
        return f"{caller.owner}/{caller.key_name}"

    with TestClient(app) as client:
        _check_protocol(client, project, both)


def test_wsgi_middleware_in_flask(keys: tuple[Verifier, str, str]) -> None:
    """Flask behind the WSGI middleware answers 200/401/403 per route and sees the caller."""
    verifier, project, both = keys
    app = Flask(__name__)

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/projects")
    @app.get("/models/m/predict")
    def who() -> str:
        caller: Caller = request.environ["apikey"]
        return f"{caller.owner}/{caller.key_name}"

    app.wsgi_app = ApiKeyWSGIMiddleware(app.wsgi_app, verifier, RULES)  # type: ignore[method-assign]
    client = app.test_client()
    assert client.get("/health").status_code == 200
    missing = client.get("/projects")
    assert (
        missing.status_code == 401 and missing.headers["WWW-Authenticate"] == 'ApiKey realm="api"'
    )
    assert missing.headers["Content-Type"] == "application/problem+json"
    assert (
        client.get("/projects", headers={"Authorization": f"ApiKey {project}"}).text == "alice/proj"
    )
    forbidden = client.get("/models/m/predict", headers={"Authorization": f"ApiKey {project}"})
    assert forbidden.status_code == 403 and forbidden.json == {
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": "the API key lacks the scope serving for this endpoint",
        "missing_scopes": ["serving"],
    }
    assert (
        client.get("/models/m/predict", headers={"Authorization": f"ApiKey {both}"}).text
        == "alice/both"
    )


def test_wsgi_middleware_in_django(keys: tuple[Verifier, str, str]) -> None:
    """Django's WSGI application behind the middleware answers 401/403/200 and sees the caller."""
    import django
    from django.conf import settings
    from django.http import HttpRequest, HttpResponse
    from django.urls import path
    from werkzeug.test import Client

    def who(request: HttpRequest) -> HttpResponse:
        caller: Caller = request.META["apikey"]
        return HttpResponse(f"{caller.owner}/{caller.key_name}")

    if not settings.configured:
        settings.configure(
            ROOT_URLCONF=__name__, ALLOWED_HOSTS=["localhost"], SECRET_KEY="test-only", DEBUG=False
        )
        django.setup()
    global urlpatterns
    urlpatterns = [path("projects", who), path("models/m/predict", who)]
    from django.core.wsgi import get_wsgi_application

    verifier, project, both = keys
    client = Client(ApiKeyWSGIMiddleware(get_wsgi_application(), verifier, RULES))
    missing = client.get("/projects")
    assert (
        missing.status_code == 401 and missing.headers["WWW-Authenticate"] == 'ApiKey realm="api"'
    )
    auth = {"Authorization": f"ApiKey {project}"}
    assert client.get("/projects", headers=auth).text == "alice/proj"
    forbidden = client.get("/models/m/predict", headers=auth)
    assert forbidden.status_code == 403
    assert json.loads(forbidden.text)["missing_scopes"] == ["serving"]
    assert client.get("/models/m/predict", headers={"Authorization": f"ApiKey {both}"}).text == (
        "alice/both"
    )


urlpatterns: list[object] = []
