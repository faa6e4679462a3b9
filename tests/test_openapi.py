"""The ApiKey scheme in FastAPI's OpenAPI document, and requests built as Swagger UI builds them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Security, WebSocket
from fastapi.openapi.models import OpenAPI
from fastapi.testclient import TestClient

from apikey_tui.integrations.fastapi import PROBLEM_SCHEMA, SCHEME_NAME, ApiKeyAuth
from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP


def build_app(verifier: Verifier) -> FastAPI:
    """A FastAPI app with a public route, routes needing scopes, one needing any key, a socket."""
    app = FastAPI()
    auth = ApiKeyAuth(verifier)
    auth.install(app)

    @app.get("/health")
    def health() -> str:
        return "ok"

    @app.get("/projects")
    def projects(caller: Caller = auth.require("project")) -> str:  # noqa: B008
        return f"{caller.owner}/{caller.key_name}"

    @app.post("/models/{model}/predict")
    def predict(model: str, caller: Caller = auth.require("serving", "project")) -> str:  # noqa: B008
        return f"{caller.owner}/{caller.key_name}/{model}"

    @app.get("/whoami", dependencies=[Security(auth.dependency())])
    def whoami() -> str:
        return "any key"

    @app.websocket("/feed")
    async def feed(websocket: WebSocket, caller: Caller = auth.require("project")) -> None:  # noqa: B008
        await websocket.accept()
        await websocket.close()

    return app


def swagger_ui_headers(
    document: dict[str, Any], path: str, method: str, typed: str
) -> dict[str, str]:
    """The headers Swagger UI adds once `typed` is entered in Authorize (swagger-js rules).

    For each scheme of the operation's security requirements: an `apiKey` in a header sends the
    typed value as that header; an `http` scheme sends `Bearer <value>` for bearer and nothing
    for a scheme Swagger UI does not support.
    """
    schemes = document["components"]["securitySchemes"]
    headers: dict[str, str] = {}
    for requirement in document["paths"][path][method].get("security", []):
        for name in requirement:
            scheme = schemes[name]
            if scheme["type"] == "apiKey" and scheme["in"] == "header":
                headers[scheme["name"]] = typed
            elif scheme["type"] == "http" and scheme["scheme"].lower() == "bearer":
                headers["Authorization"] = f"Bearer {typed}"
    return headers


@pytest.fixture
def document() -> Iterator[dict[str, Any]]:
    """The OpenAPI document of build_app (no key database is asked to produce it)."""
    verifier = Verifier.from_url("sqlite://", hasher=CHEAP)
    with TestClient(build_app(verifier)) as client:
        response = client.get("/openapi.json")
        assert response.status_code == 200
        yield response.json()
    verifier.close()


def test_security_scheme_is_an_api_key_in_the_authorization_header(
    document: dict[str, Any],
) -> None:
    """components.securitySchemes holds one apiKey scheme in the Authorization header."""
    assert document["components"]["securitySchemes"] == {
        SCHEME_NAME: {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": document["components"]["securitySchemes"][SCHEME_NAME]["description"],
        }
    }
    assert "ApiKey <key>" in document["components"]["securitySchemes"][SCHEME_NAME]["description"]
    OpenAPI.model_validate(document)  # FastAPI's own model of an OpenAPI document accepts it


def test_each_route_lists_the_scopes_it_requires(document: dict[str, Any]) -> None:
    """Per-route security names the scheme with the route's scopes; a public route has none."""
    paths = document["paths"]
    assert paths["/projects"]["get"]["security"] == [{SCHEME_NAME: ["project"]}]
    assert paths["/models/{model}/predict"]["post"]["security"] == [
        {SCHEME_NAME: ["serving", "project"]}
    ]
    assert paths["/whoami"]["get"]["security"] == [{SCHEME_NAME: []}]
    assert "security" not in paths["/health"]["get"]
    assert "/feed" not in paths  # OpenAPI has no WebSockets; the route is still checked


def test_refusals_are_documented_as_problem_json(document: dict[str, Any]) -> None:
    """Routes needing a key document 400/401/429/503 (and 403 with scopes) as problem+json."""
    paths = document["paths"]
    ref = {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA}"}
    predict = paths["/models/{model}/predict"]["post"]["responses"]
    for status in ("400", "401", "403", "429", "503"):
        media = predict[status]["content"]["application/problem+json"]
        assert media["schema"] == ref
        assert media["example"]["status"] == int(status)  # not the 401 under every status
    assert "WWW-Authenticate" in predict["401"]["headers"]
    assert "Retry-After" in predict["503"]["headers"]
    assert {"200", "422"} <= predict.keys()  # FastAPI's own answers stay
    any_key = paths["/whoami"]["get"]["responses"]
    assert {"400", "401", "429", "503"} <= any_key.keys() and "403" not in any_key
    assert set(paths["/health"]["get"]["responses"]) == {"200"}
    problem = document["components"]["schemas"][PROBLEM_SCHEMA]
    assert problem["required"] == ["type", "title", "status", "detail"]
    assert problem["properties"]["missing_scopes"]["type"] == "array"


def _structured_list(text: str) -> list[tuple[object, dict[str, object]]]:
    """A structured-field List (RFC 9651) as (value, parameters) pairs, parsed by http-sfv."""
    from http_sfv.list import List

    parsed = List()
    parsed.parse(text.encode())
    return [(item.value, dict(item.params)) for item in parsed]


def test_the_429_is_documented_with_its_headers_and_problem(document: dict[str, Any]) -> None:
    """Each route needing a key documents 429 with Retry-After, RateLimit-Policy and RateLimit
    (their examples valid structured fields that agree) and a problem naming the limit."""
    problem = document["components"]["schemas"][PROBLEM_SCHEMA]["properties"]
    for path, method in (("/models/{model}/predict", "post"), ("/whoami", "get")):
        limited = document["paths"][path][method]["responses"]["429"]
        headers = limited["headers"]
        assert set(headers) == {"Retry-After", "RateLimit-Policy", "RateLimit"}
        retry = headers["Retry-After"]["example"]
        assert headers["Retry-After"]["schema"] == {"type": "integer"} and retry >= 1
        policy = _structured_list(headers["RateLimit-Policy"]["example"])
        state = _structured_list(headers["RateLimit"]["example"])
        assert policy == [("key:600/m", {"q": 600, "w": 60})]
        assert state == [("key:600/m", {"r": 0, "t": retry})]
        example = limited["content"]["application/problem+json"]["example"]
        assert example["status"] == 429 and example["retry_after"] == retry
        assert (example["limit_of"], example["limit"]) == ("key", "600/m")
        assert set(example) <= set(problem)  # the schema names every field the body has
    assert problem["limit_of"]["enum"] == ["key", "owner"]


def test_a_real_429_sends_what_the_document_says(database_url: str) -> None:
    """A key limited to 2 per window gets two 200s, then a 429 carrying every header the
    document lists for it and a body with the schema's required fields and no other."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "metered", ["project"], limits=[parse_limit("2/30d")])
    store.close()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        with TestClient(build_app(verifier)) as client:
            document = client.get("/openapi.json").json()
            documented = document["paths"]["/projects"]["get"]["responses"]["429"]
            headers = {"Authorization": f"ApiKey {key.plaintext}"}
            statuses = [client.get("/projects", headers=headers).status_code for _ in range(2)]
            answer = client.get("/projects", headers=headers)
    finally:
        verifier.close()
    assert statuses == [200, 200] and answer.status_code == 429
    assert answer.headers["content-type"] == "application/problem+json"
    for name in documented["headers"]:
        assert name.lower() in answer.headers, name
    assert _structured_list(answer.headers["ratelimit-policy"]) == [
        ("key:2/30d", {"q": 2, "w": 30 * 86400})
    ]
    schema = document["components"]["schemas"][PROBLEM_SCHEMA]
    body = answer.json()
    assert set(schema["required"]) <= set(body) <= set(schema["properties"])
    assert (body["status"], body["limit"], body["limit_of"]) == (429, "2/30d", "key")


def test_each_route_says_its_scopes_where_swagger_ui_shows_them(document: dict[str, Any]) -> None:
    """Swagger UI shows no scopes of an apiKey requirement: the description says them, once."""
    paths = document["paths"]
    predict = paths["/models/{model}/predict"]["post"]["description"]
    assert predict.count("API key scopes required") == 1
    assert "`project`, `serving`" in predict
    assert "none (any key)" in paths["/whoami"]["get"]["description"]
    assert "description" not in paths["/health"]["get"]


@pytest.mark.slow
def test_a_parameter_annotated_otherwise_than_caller_fails_mypy(tmp_path: Path) -> None:
    """auth.require() is typed as the Caller it yields: `caller: str = auth.require()` is a
    mypy error (it was typed Any, so any annotation passed)."""
    import mypy.api

    source = tmp_path / "service.py"
    source.write_text(
        "from apikey_tui.integrations.fastapi import ApiKeyAuth\n"
        "from apikey_tui.verifier import Caller\n"
        "def route(auth: ApiKeyAuth) -> None:\n"
        "    good: Caller = auth.require('project')\n"
        "    bad: str = auth.require('project')\n"
    )
    out, _err, status = mypy.api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1 and "service.py:5: error: Incompatible types" in out, out
    assert "service.py:4" not in out, out


def test_document_is_stable_across_requests(document: dict[str, Any]) -> None:
    """Serving the document again adds nothing twice (the cached dict is extended once)."""
    verifier = Verifier.from_url("sqlite://", hasher=CHEAP)
    with TestClient(build_app(verifier)) as client:
        first = client.get("/openapi.json").json()
        assert client.get("/openapi.json").json() == first == document
        assert client.get("/docs").status_code == 200  # Swagger UI itself
    verifier.close()


def test_a_request_built_like_swagger_ui_passes(database_url: str) -> None:
    """With `ApiKey <key>` typed into Authorize, Swagger UI's request gets 200; 401/403 fit."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    project = store.create_key("alice", "proj", ["project"]).plaintext
    both = store.create_key("alice", "both", ["project", "serving"]).plaintext
    store.close()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        with TestClient(build_app(verifier)) as client:
            document = client.get("/openapi.json").json()
            path, method = "/models/{model}/predict", "post"

            def call(typed: str) -> Any:
                headers = swagger_ui_headers(document, path, method, typed)
                return client.post("/models/churn/predict", headers=headers)

            ok = call(f"ApiKey {both}")
            assert ok.status_code == 200 and ok.json() == "alice/both/churn"
            assert call(f"ApiKey {project}").json()["missing_scopes"] == ["serving"]
            bare = call(both)  # the key typed without the scheme word: told what to send
            assert bare.status_code == 401
            assert "ApiKey <key>" in bare.json()["detail"]
            assert bare.headers["content-type"] == "application/problem+json"
    finally:
        verifier.close()
