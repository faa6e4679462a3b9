"""FastAPI's Security scopes are enforced as documented, with or without ApiKeyAuth.install."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Security, WebSocket
from fastapi.testclient import TestClient
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from apikey_tui import keyformat
from apikey_tui.errors import AuthError, MissingKeyError
from apikey_tui.integrations.fastapi import SCHEME_NAME, ApiKeyAuth
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP


@dataclass
class Keys:
    """A verifier and three keys: 'project' only, 'serving' only, and both."""

    verifier: Verifier
    project: str
    serving: str
    both: str


@pytest.fixture
def keys(database_url: str) -> Iterator[Keys]:
    """Keys on the real store, SQLite and PostgreSQL."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    project = store.create_key("alice", "proj", ["project"]).plaintext
    serving = store.create_key("alice", "serv", ["serving"]).plaintext
    both = store.create_key("alice", "both", ["project", "serving"]).plaintext
    store.close()
    # Not a test of the deadline: a loaded machine must not turn a slow first check into 503.
    verifier = Verifier.from_url(database_url, hasher=CHEAP, check_timeout=30)
    yield Keys(verifier, project, serving, both)
    verifier.close()


def build_app(verifier: Verifier, *, install: bool) -> FastAPI:
    """Every way of declaring the dependency that docs/integrations/fastapi.md shows, on one app."""
    app = FastAPI()
    auth = ApiKeyAuth(verifier)
    if install:
        auth.install(app)

    @app.get("/security")
    def security(caller: Caller = Security(auth.dependency(), scopes=["serving"])) -> str:  # noqa: B008
        return caller.key_name

    @app.get("/union")
    def union(caller: Caller = Security(auth.dependency("project"), scopes=["serving"])) -> str:  # noqa: B008
        return caller.key_name

    def needs_serving(caller: Caller = Security(auth.dependency(), scopes=["serving"])) -> Caller:  # noqa: B008
        return caller

    @app.get("/nested")
    def nested(caller: Caller = Security(needs_serving, scopes=["project"])) -> str:  # noqa: B008
        return caller.key_name

    @app.get("/any-key")
    def any_key(caller: Caller = Depends(auth.dependency())) -> str:  # noqa: B008
        return caller.key_name

    @app.get("/depends-project")
    def depends_project(caller: Caller = Depends(auth.dependency("project"))) -> str:  # noqa: B008
        return caller.key_name

    router = APIRouter(dependencies=[Security(auth.dependency(), scopes=["serving"])])

    @router.get("/router")
    def in_router() -> str:
        return "in router"

    app.include_router(router)
    included = APIRouter()

    @included.get("/included")
    def in_included() -> str:
        return "included"

    app.include_router(included, dependencies=[Security(auth.dependency(), scopes=["serving"])])

    @app.websocket("/ws")
    async def feed(
        websocket: WebSocket,
        caller: Caller = Security(auth.dependency("project"), scopes=["serving"]),  # noqa: B008
    ) -> None:
        await websocket.accept()
        await websocket.send_text(caller.key_name)
        await websocket.close()

    return app


def wrong_key(key: str) -> str:
    """The key with its last character replaced by a different one: never the key itself."""
    return key[:-1] + ("b" if key[-1] == "a" else "a")


def header(key: str) -> dict[str, str]:
    """The Authorization header for `key`."""
    return {"Authorization": f"ApiKey {key}"}


# path -> the scopes each route needs, exactly as its OpenAPI security requirement lists them
NEEDS = {
    "/security": ["serving"],
    "/union": ["serving", "project"],
    "/nested": ["project", "serving"],
    "/any-key": [],
    "/depends-project": ["project"],
    "/router": ["serving"],
    "/included": ["serving"],
}


@pytest.fixture(params=[True, False], ids=["installed", "not-installed"])
def installed(request: pytest.FixtureRequest) -> bool:
    """Whether the app under test called auth.install(app): every check must hold either way."""
    return bool(request.param)


@pytest.fixture
def client(keys: Keys, installed: bool) -> Iterator[TestClient]:
    """A TestClient on build_app, with or without auth.install(app)."""
    with TestClient(build_app(keys.verifier, install=installed)) as test_client:
        yield test_client


def test_security_scopes_are_enforced(client: TestClient, keys: Keys) -> None:
    """`Security(auth.dependency(), scopes=[...])` refuses a key lacking those scopes with 403."""
    refused = client.get("/security", headers=header(keys.project))
    assert refused.status_code == 403
    assert 'scope="serving"' in refused.headers["www-authenticate"]
    assert client.get("/security", headers=header(keys.serving)).json() == "serv"


def test_router_level_security_scopes_are_enforced(client: TestClient, keys: Keys) -> None:
    """Scopes given by a router's (or include_router's) `dependencies=[Security(...)]` hold."""
    for path in ("/router", "/included"):
        assert client.get(path, headers=header(keys.project)).status_code == 403
        assert client.get(path, headers=header(keys.serving)).status_code == 200
        assert client.get(path).status_code == 401


def test_dependency_scopes_and_security_scopes_are_both_enforced(
    client: TestClient, keys: Keys
) -> None:
    """`Security(auth.dependency("project"), scopes=["serving"])` needs both scopes."""
    lacks_serving = client.get("/union", headers=header(keys.project))
    assert lacks_serving.status_code == 403
    assert 'scope="serving"' in lacks_serving.headers["www-authenticate"]
    lacks_project = client.get("/union", headers=header(keys.serving))
    assert lacks_project.status_code == 403
    assert 'scope="project"' in lacks_project.headers["www-authenticate"]
    assert client.get("/union", headers=header(keys.both)).json() == "both"


def test_scopes_accumulate_through_nested_dependencies(client: TestClient, keys: Keys) -> None:
    """A dependency's Security scopes add to those of the dependency it uses, as FastAPI does."""
    assert client.get("/nested", headers=header(keys.project)).status_code == 403
    assert client.get("/nested", headers=header(keys.serving)).status_code == 403
    assert client.get("/nested", headers=header(keys.both)).json() == "both"


def test_depends_without_security_scopes(client: TestClient, keys: Keys) -> None:
    """With `Depends`, the dependency's own scopes are needed; with none, any valid key."""
    assert client.get("/any-key").status_code == 401
    assert client.get("/any-key", headers=header(keys.serving)).json() == "serv"
    assert client.get("/depends-project", headers=header(keys.serving)).status_code == 403
    assert client.get("/depends-project", headers=header(keys.project)).json() == "proj"


def test_document_lists_exactly_the_scopes_that_are_enforced(
    client: TestClient, keys: Keys
) -> None:
    """Each route's OpenAPI security lists the scopes it enforces: a key holding one scope
    passes where the document lists at most that scope and is refused with 403 elsewhere."""
    paths = client.get("/openapi.json").json()["paths"]
    held = {"project": keys.project, "serving": keys.serving}
    for path, needs in NEEDS.items():
        assert paths[path]["get"]["security"] == [{SCHEME_NAME: needs}], path
        for scope, key in held.items():
            expected = 200 if set(needs) <= {scope} else 403
            assert client.get(path, headers=header(key)).status_code == expected, (path, scope)


def test_websocket_route_enforces_the_union(
    client: TestClient, keys: Keys, installed: bool
) -> None:
    """A WebSocket route with dependency and Security scopes refuses a key lacking either one:
    403 through the denial extension with install(), else a close with 1008."""
    for key in (keys.project, keys.serving):
        if installed:
            with pytest.raises(WebSocketDenialResponse) as denied:
                with client.websocket_connect("/ws", headers=header(key)):
                    pass
            assert denied.value.status_code == 403
        else:
            with pytest.raises(WebSocketDisconnect) as closed:
                with client.websocket_connect("/ws", headers=header(key)):
                    pass
            assert closed.value.code == 1008
    with client.websocket_connect("/ws", headers=header(keys.both)) as websocket:
        assert websocket.receive_text() == "both"


def test_app_level_scopes_add_to_the_routes_own(keys: Keys, installed: bool) -> None:
    """`FastAPI(dependencies=[Security(...)])` and a route's own requirement are both enforced,
    and the document lists the scopes of both."""
    app = FastAPI()
    auth = ApiKeyAuth(keys.verifier)
    app.router.dependencies.append(Security(auth.dependency(), scopes=["serving"]))
    if installed:
        auth.install(app)

    @app.get("/projects")
    def projects(caller: Caller = auth.require("project")) -> str:  # noqa: B008
        return caller.key_name

    with TestClient(app) as test_client:
        document = test_client.get("/openapi.json").json()
        security = document["paths"]["/projects"]["get"]["security"]
        assert security == [{SCHEME_NAME: ["serving", "project"]}]
        assert test_client.get("/projects", headers=header(keys.project)).status_code == 403
        assert test_client.get("/projects", headers=header(keys.serving)).status_code == 403
        assert test_client.get("/projects", headers=header(keys.both)).json() == "both"


def test_an_apps_own_handler_for_auth_errors_answers(keys: Keys) -> None:
    """An app that handles AuthError itself (no install) gets its handler's answer."""
    app = build_app(keys.verifier, install=False)

    async def teapot(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AuthError)
        return PlainTextResponse(type(exc).__name__, 418)

    app.add_exception_handler(AuthError, teapot)
    with TestClient(app) as test_client:
        answer = test_client.get("/security", headers=header(keys.project))
    assert (answer.status_code, answer.text) == (418, "InsufficientScopeError")


def answers(app: FastAPI, keys: Keys) -> dict[str, Any]:
    """The refusal of each kind (400, 401 missing, 401 invalid, 403) from `app`."""
    with TestClient(app) as test_client:
        return {
            "400": test_client.get(
                "/security", headers=[("Authorization", "ApiKey a"), ("Authorization", "ApiKey b")]
            ),
            "401": test_client.get("/security"),
            "401 invalid": test_client.get("/security", headers=header(wrong_key(keys.project))),
            "403": test_client.get("/security", headers=header(keys.project)),
        }


def test_refusals_without_install_are_not_500(keys: Keys) -> None:
    """Without auth.install(app), each refusal keeps its status and headers, with FastAPI's body."""
    installed = answers(build_app(keys.verifier, install=True), keys)
    plain = answers(build_app(keys.verifier, install=False), keys)
    for kind, expected in installed.items():
        answer = plain[kind]
        assert answer.status_code == expected.status_code == int(kind[:3]), kind
        for name in ("www-authenticate", "cache-control"):
            assert answer.headers.get(name) == expected.headers.get(name), kind
        assert answer.headers["content-type"] == "application/json", kind
        assert answer.json() == {"detail": expected.json()["detail"]}, kind


def test_database_down_without_install_is_503(tmp_path: Path) -> None:
    """Without auth.install(app), a key database that cannot be asked is 503 with Retry-After."""
    down = Verifier.from_url(f"sqlite:///{tmp_path / 'missing.db'}", hasher=CHEAP)
    _, key = keyformat.generate()
    try:
        with TestClient(build_app(down, install=False)) as test_client:
            answer = test_client.get("/security", headers=header(key))
            assert answer.status_code == 503
            assert answer.headers["retry-after"] == "5"
            assert "www-authenticate" not in answer.headers
    finally:
        down.close()


def test_websocket_refusal_without_install_is_a_1008_close(keys: Keys) -> None:
    """Without auth.install(app), a refused WebSocket handshake is closed with 1008, never 500."""
    with TestClient(build_app(keys.verifier, install=False)) as test_client:
        with pytest.raises(WebSocketDisconnect) as refused:
            with test_client.websocket_connect("/ws"):
                pass
        assert refused.value.code == 1008


def test_answer_with_install_is_the_error_trees_answer(keys: Keys) -> None:
    """With auth.install(app), the refusal is exactly AuthError.response: status, headers, body."""
    status, headers, body = MissingKeyError().response(keys.verifier.realm)
    with TestClient(build_app(keys.verifier, install=True)) as test_client:
        answer = test_client.get("/security")
    assert answer.status_code == status
    assert answer.content == body
    assert sorted(answer.headers.items()) == sorted(headers)


def test_a_request_through_several_key_dependencies_spends_its_limit_and_is_counted_once(
    database_url: str,
) -> None:
    """A router's key dependency and a route's (the documented pattern) check one request
    twice, each for its own scopes; the request spends one token of the key's limit and is
    recorded once, and the union of the scopes is still enforced."""
    from apikey_tui.errors import InsufficientScopeError
    from apikey_tui.limits import parse_limit

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key(
        "bob", "metered", ["project", "serving"], limits=[parse_limit("4/30d")]
    ).plaintext
    narrow = store.create_key("bob", "narrow", ["serving"]).plaintext
    verifier = Verifier.from_url(database_url, hasher=CHEAP, check_timeout=30)
    try:
        app = FastAPI()
        auth = ApiKeyAuth(verifier)
        auth.install(app)
        router = APIRouter(dependencies=[Security(auth.dependency(), scopes=["serving"])])

        @router.get("/both")
        def both(caller: Caller = auth.require("project")) -> str:  # noqa: B008
            return caller.key_name

        app.include_router(router)
        with TestClient(app) as client:
            answers = [
                client.get("/both", headers={"Authorization": f"ApiKey {key}"}).status_code
                for _ in range(6)
            ]
            refused = client.get("/both", headers={"Authorization": f"ApiKey {narrow}"})
        assert answers == [200] * 4 + [429] * 2
        assert refused.status_code == InsufficientScopeError.status
        verifier.flush()
        assert store.key_usage("bob", "metered").requests == 4
    finally:
        verifier.close()
        store.close()


def test_a_request_checked_by_the_middleware_and_a_dependency_spends_its_limit_once(
    database_url: str,
) -> None:
    """The ASGI middleware's check and a route's key dependency on one request (the same
    verifier) spend one token of the key's limit, and the dependency's scopes still apply."""
    from apikey_tui.integrations.asgi import ApiKeyMiddleware
    from apikey_tui.limits import parse_limit

    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key(
        "cy", "metered", ["project", "serving"], limits=[parse_limit("4/30d")]
    ).plaintext
    narrow = store.create_key("cy", "narrow", ["serving"]).plaintext
    verifier = Verifier.from_url(database_url, hasher=CHEAP, check_timeout=30)
    try:
        app = FastAPI()
        auth = ApiKeyAuth(verifier)
        auth.install(app)

        @app.get("/both")
        def both(caller: Caller = auth.require("project")) -> str:  # noqa: B008
            return caller.key_name

        app.add_middleware(ApiKeyMiddleware, verifier=verifier, default_scopes=["serving"])
        with TestClient(app) as client:
            answers = [
                client.get("/both", headers={"Authorization": f"ApiKey {key}"}).status_code
                for _ in range(6)
            ]
            refused = client.get("/both", headers={"Authorization": f"ApiKey {narrow}"})
        assert answers == [200] * 4 + [429] * 2
        assert refused.status_code == 403
    finally:
        verifier.close()
        store.close()
