"""The attack suite: requests that try to slip past the route rules or the WebSocket check."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from flask import Flask
from flask import request as flask_request
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, WebSocketRoute
from starlette.routing import Route as HttpRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from apikey_tui.errors import AuthError
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.routes import RouteScopes, Unmatched, route
from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP
from tests.throwaway_postgres import free_port

ROOT = Path(__file__).resolve().parent.parent
# uvicorn serves the target as if a proxy had stripped this prefix (`--root-path`).
ROOT_PATH = "/svc"
RULES = [
    route("/health", public=True),
    route("/projects", "project"),
    route("/models", "serving", "project"),
    route("/ws", "serving", "project"),
]


@dataclass
class Keys:
    """A verifier plus a 'project'-only key and a 'project'+'serving' key."""

    verifier: Verifier
    project: str
    both: str


def _make_keys(database_url: str) -> tuple[str, str]:
    store = KeyStore.open(database_url, hasher=CHEAP)
    try:
        project = store.create_key("alice", "proj", ["project"]).plaintext
        both = store.create_key("alice", "both", ["project", "serving"]).plaintext
    finally:
        store.close()
    return project, both


@pytest.fixture
def keys(sqlite_url: str) -> Iterator[Keys]:
    """Keys and a verifier on a fresh SQLite database."""
    project, both = _make_keys(sqlite_url)
    verifier = Verifier.from_url(sqlite_url, hasher=CHEAP)
    yield Keys(verifier, project, both)
    verifier.close()


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"ApiKey {key}"} if key else {}


async def _reached(request: Request) -> PlainTextResponse:
    caller: Caller = request.state.apikey
    return PlainTextResponse(f"reached by {caller.key_name}")


async def _ok(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def _echo(websocket: WebSocket) -> None:
    caller: Caller = websocket.state.apikey
    await websocket.accept()
    await websocket.send_text(f"reached by {caller.key_name}")
    await websocket.close()


def _routes() -> list[BaseRoute]:
    return [
        HttpRoute("/health", _ok),
        HttpRoute("/projects", _reached),
        HttpRoute("/models/{model}/predict", _reached, methods=["POST"]),
        WebSocketRoute("/ws/echo", _echo),
    ]


def attack_target(verifier: Verifier, *, close_on_shutdown: bool = False) -> Starlette:
    """The same routes at the root and again inside `Mount("/api", ...)`, each app guarded."""
    inner = Starlette(
        routes=_routes(),
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=RULES)],
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if close_on_shutdown:
            verifier.close()

    # The outer middleware leaves /api to the mounted app's own rules.
    outer_rules = [*RULES, route("/api", public=True)]
    return Starlette(
        routes=[*_routes(), Mount("/api", app=inner)],
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=outer_rules)],
        lifespan=lifespan,
    )


def served_app() -> Starlette:
    """uvicorn's factory: the attack target on the database named in the environment."""
    verifier = Verifier.from_url(os.environ["APIKEY_TUI_DATABASE_URL"], hasher=CHEAP)
    return attack_target(verifier, close_on_shutdown=True)


def flask_target(verifier: Verifier) -> Flask:
    """A Flask app whose predict handler needs 'serving' and 'project'."""
    app = Flask(__name__)

    @app.post("/models/<model>/predict")
    def predict(model: str) -> str:
        caller: Caller = flask_request.environ["apikey"]
        return f"reached by {caller.key_name}"

    @app.get("/files/<path:name>")
    def files(name: str) -> str:
        return f"file {name}"

    app.wsgi_app = ApiKeyWSGIMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, verifier, [*RULES, route("/files", public=True)]
    )
    return app


class Served:
    """`served_app` under a real uvicorn on 127.0.0.1, in its own process."""

    def __init__(self, database_url: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "tests.test_attack_paths:served_app",
             "--host", "127.0.0.1", "--port", str(self.port), "--root-path", ROOT_PATH,
             "--log-level", "warning"],
            cwd=ROOT, env={**os.environ, "APIKEY_TUI_DATABASE_URL": database_url},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.http("GET", "/health")  # any answer means it is up
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"uvicorn did not start:\n{self.stop()}")

    def http(self, method: str, target: str, key: str | None = None) -> tuple[int, str]:
        """Send `target` exactly as written (http.client neither merges nor decodes it)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(method, target, headers=_auth(key))
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def websocket(self, target: str, key: str | None = None) -> str:
        """Open a WebSocket and return the first message the app sends."""
        uri = f"ws://127.0.0.1:{self.port}{target}"
        with connect(uri, additional_headers=_auth(key), open_timeout=10) as websocket:
            message = websocket.recv(timeout=10)
        assert isinstance(message, str)
        return message

    def stop(self) -> str:
        """Stop the server and return the end of its output."""
        self.process.terminate()
        self.process.wait(timeout=10)
        assert self.process.stdout is not None
        output = self.process.stdout.read().decode(errors="replace")[-4000:]
        self.process.stdout.close()
        return output


@pytest.fixture
def served(database_url: str) -> Iterator[tuple[Served, str, str]]:
    """The target under uvicorn with a 'project'-only and a 'project'+'serving' key."""
    project, both = _make_keys(database_url)
    server = Served(database_url)
    yield server, project, both
    server.stop()


# --- WebSockets -----------------------------------------------------------------------------


def test_websocket_without_key_is_refused_before_accept_in_starlette(keys: Keys) -> None:
    """A WebSocket handshake without a key, or with too few scopes, is denied before accept."""
    with TestClient(attack_target(keys.verifier)) as client:
        with pytest.raises(WebSocketDenialResponse) as missing:
            with client.websocket_connect("/ws/echo"):
                pass
        assert missing.value.status_code == 401
        assert missing.value.headers["www-authenticate"] == 'ApiKey realm="api"'
        assert missing.value.headers["content-type"] == "application/problem+json"
        with pytest.raises(WebSocketDenialResponse) as forbidden:
            with client.websocket_connect("/ws/echo", headers=_auth(keys.project)):
                pass
        assert forbidden.value.status_code == 403
        assert forbidden.value.json()["missing_scopes"] == ["serving"]
        with client.websocket_connect("/ws/echo", headers=_auth(keys.both)) as websocket:
            assert websocket.receive_text() == "reached by both"


def test_websocket_without_key_is_refused_before_accept_by_uvicorn(
    served: tuple[Served, str, str],
) -> None:
    """Under a real uvicorn a keyless WebSocket gets a 401 instead of the 101 handshake."""
    server, project, both = served
    with pytest.raises(InvalidStatus) as missing:
        server.websocket("/ws/echo")
    assert missing.value.response.status_code == 401
    assert missing.value.response.headers["WWW-Authenticate"] == 'ApiKey realm="api"'
    assert json.loads(missing.value.response.body or b"")["status"] == 401
    with pytest.raises(InvalidStatus) as forbidden:
        server.websocket("/api/ws/echo", project)
    assert forbidden.value.response.status_code == 403
    assert server.websocket("/ws/echo", both) == "reached by both"
    assert server.websocket("/api/ws/echo", both) == "reached by both"


# --- Paths as a real server hands them over --------------------------------------------------


def test_path_tricks_are_refused_by_uvicorn(served: tuple[Served, str, str]) -> None:
    """Under uvicorn --root-path, //, /./, %2F, %252F and a mounted app never pass a short key."""
    server, project, both = served
    # Prefix stripped by a proxy (uvicorn --root-path): the rules still see /models.
    assert server.http("POST", "/models/m/predict", project)[0] == 403
    assert server.http("POST", "/models/m/predict", both) == (200, "reached by both")
    # A mounted Starlette app matches its rules below the mount point.
    assert server.http("POST", "/api/models/m/predict", project)[0] == 403
    assert server.http("GET", "/api/projects")[0] == 401
    assert server.http("POST", "/api/models/m/predict", both) == (200, "reached by both")
    # Repeated slashes need the scopes of both readings.
    assert server.http("POST", "//models/m/predict", project)[0] == 403
    assert server.http("POST", "/api//models/m/predict", project)[0] == 403
    # uvicorn decodes %2F into "/" before routing: the rules see the same path the router does.
    assert server.http("POST", "/models%2Fm%2Fpredict", project)[0] == 403
    # What survives decoding, and dot segments, are refused with 400 whatever the key.
    for target in ("/./models/m/predict", "/models/m/../m/predict", "/models%252Fm/predict",
                   "/models/m/predict%00", "/api/./models/m/predict"):  # fmt: skip
        status, body = server.http("POST", target, both)
        assert status == 400, target
        assert "not in normal form" in json.loads(body)["detail"], target
    assert server.http("GET", "/health")[0] == 200


# --- Paths in-process: Flask, mounts, rules --------------------------------------------------


def test_double_slash_under_flask_needs_the_scopes_of_the_merged_path(keys: Keys) -> None:
    """`POST //models/x/predict` with a project-only key no longer reaches Flask's handler."""
    client = flask_target(keys.verifier).test_client()
    for path in ("//models/x/predict", "///models/x/predict"):
        sneaky = client.post(
            "/", environ_overrides={"PATH_INFO": path}, headers=_auth(keys.project)
        )
        assert sneaky.status_code == 403, path
        assert sneaky.json is not None and sneaky.json["missing_scopes"] == ["serving"]
    allowed = client.post(
        "/", environ_overrides={"PATH_INFO": "//models/x/predict"}, headers=_auth(keys.both)
    )
    assert allowed.text == "reached by both"


def test_flask_refuses_paths_not_in_normal_form(keys: Keys) -> None:
    """Dot segments, encoded separators, backslashes and NUL in PATH_INFO get 400, even public."""
    client = flask_target(keys.verifier).test_client()
    for path in ("/files/a/../b", "/files/./b", "/files/a%2Fb", "/files/a%2e%2e/b",
                 "/files/a\\b", "/files/a\x00b", "/models/x/predict/.."):  # fmt: skip
        answer = client.get("/", environ_overrides={"PATH_INFO": path})
        assert answer.status_code == 400, path
        assert answer.headers["Content-Type"] == "application/problem+json"
        assert "WWW-Authenticate" not in answer.headers
    assert client.get("/files/a/b").text == "file a/b"


def test_flask_under_dispatcher_middleware_matches_rules_below_the_mount(keys: Keys) -> None:
    """A Flask app mounted at /api by DispatcherMiddleware applies its /models rule."""
    front = Flask("front")
    client = Client(DispatcherMiddleware(front, {"/api": flask_target(keys.verifier)}))
    assert client.post("/api/models/x/predict", headers=_auth(keys.project)).status_code == 403
    assert client.post("/api/models/x/predict").status_code == 401
    assert client.post("/api/models/x/predict", headers=_auth(keys.both)).text == "reached by both"


def test_flask_under_script_name_matches_rules_below_the_mount(keys: Keys) -> None:
    """A WSGI server mounting Flask at SCRIPT_NAME=/svc leaves /models to the /models rule."""
    client = flask_target(keys.verifier).test_client()
    base = "http://localhost/svc"
    sneaky = client.post("/models/x/predict", base_url=base, headers=_auth(keys.project))
    assert sneaky.status_code == 403
    assert sneaky.request.environ["SCRIPT_NAME"] == "/svc"
    allowed = client.post("/models/x/predict", base_url=base, headers=_auth(keys.both))
    assert allowed.text == "reached by both"


def test_mounted_starlette_app_matches_rules_below_the_mount(keys: Keys) -> None:
    """Inside `Mount("/api", app)` the app's rule /models covers /api/models/...."""
    with TestClient(attack_target(keys.verifier)) as client:
        forbidden = client.post("/api/models/m/predict", headers=_auth(keys.project))
        assert forbidden.status_code == 403
        assert forbidden.json()["missing_scopes"] == ["serving"]
        assert client.get("/api/projects").status_code == 401
        allowed = client.post("/api/models/m/predict", headers=_auth(keys.both))
        assert allowed.text == "reached by both"


@pytest.mark.parametrize(
    "path",
    ["/models/{model}/predict", "/models/*", "models", "", "/models//x", "/models/./x",
     "/models/../x", "/models/%2e", "/models?x=1", "/models#x", "/mod els", "/models\t",
     "/café", "/models/x\\y", "//"],
)  # fmt: skip
def test_bad_rules_fail_at_start_up(path: str) -> None:
    """A rule path that could never match as written raises ValueError when it is built."""
    with pytest.raises(ValueError, match="route path"):
        route(path, "serving")


def test_ambiguous_or_contradictory_rules_fail_at_start_up() -> None:
    """Methods given as a string, empty methods, public-with-scopes and duplicates are refused."""
    with pytest.raises(ValueError, match="methods must be a list"):
        route("/admin", "admin", methods="DELETE")
    with pytest.raises(ValueError, match="methods"):
        route("/admin", "admin", methods=[])
    with pytest.raises(ValueError, match="public"):
        route("/health", "project", public=True)
    with pytest.raises(ValueError, match="two routes"):
        RouteScopes([route("/a", "project"), route("/a/", "serving")])
    with pytest.raises(ValueError, match="two routes for POST"):
        RouteScopes([route("/a", "x", methods=["POST"]), route("/a", "y", methods=["post", "PUT"])])


def test_double_slash_paths_need_the_rules_of_both_readings() -> None:
    """Scopes are the union of the raw and the merged reading; public only if both are public."""
    rules = RouteScopes(
        [route("/", public=True), route("/admin", "admin"), route("/admin/x", "project")]
    )
    assert rules.required("GET", "//admin") == ("admin",)
    assert rules.required("GET", "/admin//x") == ("admin", "project")
    assert rules.required("GET", "//public//page") is None
    assert RouteScopes([], ["project"]).required("GET", "//anything") == ("project",)


def test_parameter_and_case_readings_need_the_rules_of_every_reading() -> None:
    """`;` parameters stripped and letter case folded are readings too, like merged slashes."""
    rules = RouteScopes([route("/", public=True), route("/admin", "admin"), route("/Rep", "rep")])
    for path in ("/admin;x", "/admin;jsessionid=1/x", "/admin%3Bx", "/ADMIN", "/Admin/x",
                 "/;x/admin", "/aDmIn;x;y/z"):  # fmt: skip
        assert rules.required("GET", path) == ("admin",), path
    assert rules.required("GET", "/rep/1") == ("rep",)  # rule paths are folded too
    assert rules.required("GET", "/docs;v=1/Page") is None  # public under every reading
    assert rules.required("GET", "/Admin//x;y") == ("admin",)
    # Letters whose simple case mapping is ASCII: .NET and Go read "/adm\u0131n" as "/admin".
    for path in ("/adm\u0131n", "/ADM\u0130N/x"):
        assert rules.required("GET", path) == ("admin",), path
    ruled = RouteScopes([route("/", public=True), route("/secret", "s"), route("/key", "k")])
    assert ruled.required("GET", "/\u017fecret") == ("s",)
    assert ruled.required("GET", "/\u212aey") == ("k",)
    assert RouteScopes([route("/admin", "admin")], ["project"]).required("GET", "/Admin") == (
        "admin",
        "project",
    )
    with pytest.raises(ValueError, match="letter case"):
        RouteScopes([route("/admin", "a"), route("/Admin", "b")])


def test_cut_readings_need_the_rules_of_the_paths_they_reach() -> None:
    """A format suffix, a script before PATH_INFO, trailing dots, spaces and `~`, and a decoded
    `?` or `#` are readings of the shorter path: /admin's scopes, also where `/` is public."""
    rules = RouteScopes([route("/", public=True), route("/admin", "admin")])
    for path in ("/admin.json", "/admin.tar.gz", "/ADMIN.Xml", "/admin/users.json/",
                 "/index.php/admin", "/app/Index.PHP/admin/x", "/admin~", "/admin.", "/admin ",
                 "/admin. ~", "/admin./users", "/admin?x=1", "/admin#top",
                 "/a.cgi/admin.json"):  # fmt: skip
        assert rules.required("GET", path) == ("admin",), path
    assert rules.required("GET", "/static/app.js") is None  # public under every reading


def test_a_cut_reading_no_rule_covers_adds_nothing() -> None:
    """A rule written for a path with a suffix keeps its meaning: `/openapi.json` stays public
    though no rule names `/openapi`, and unmatched="deny" still refuses what no rule names."""
    modes: tuple[Unmatched, ...] = ("key", "deny")
    for unmatched in modes:
        rules = RouteScopes([route("/openapi.json", public=True)], unmatched=unmatched)
        assert rules.required("GET", "/openapi.json") is None
    denying = RouteScopes([route("/admin", "admin")], unmatched="deny")
    with pytest.raises(AuthError) as refused:
        denying.required("GET", "/elsewhere.json")
    assert refused.value.status == 403


def test_a_path_with_too_many_readings_is_400() -> None:
    """Every reading costs a lookup: a path with more than 64 of them is refused, not judged."""
    rules = RouteScopes([route("/", public=True), route("/admin", "admin")])
    with pytest.raises(AuthError) as refused:
        rules.required("GET", "/" + "a.php/" * 100 + "admin")
    assert refused.value.status == 400
    assert rules.required("GET", "/" + "a.php/" * 10 + "admin") == ("admin",)


@pytest.mark.parametrize(
    "path",
    ["/public/..;/admin", "/public/.;x/admin", "/public/..%3b/admin", "/public/..;x;y",
     "/public;/..;/admin"],
)  # fmt: skip
def test_dot_segments_left_by_stripping_parameters_are_400(path: str) -> None:
    """`/..;/` is `/../` to Tomcat: a reading with a dot segment makes the whole path a 400."""
    rules = RouteScopes([route("/", public=True), route("/admin", "admin")])
    with pytest.raises(AuthError) as refused:
        rules.required("GET", path)
    assert refused.value.status == 400


def test_mounted_starlette_app_judges_parameter_and_case_readings(keys: Keys) -> None:
    """In-process too, `/models;x/...`, `%3b` and `/MODELS/...` need the scopes of /models."""
    with TestClient(attack_target(keys.verifier)) as client:
        for path in ("/models;x/m/predict", "/models%3bx/m/predict", "/MODELS/m/predict",
                     "/api/Models/m/predict", "/api/models;v=2/m/predict"):  # fmt: skip
            refused = client.post(path, headers=_auth(keys.project))
            assert refused.status_code == 403, path
            assert refused.json()["missing_scopes"] == ["serving"], path


@pytest.mark.parametrize(
    "path",
    ["/./models", "/models/.", "/models/..", "/models/../projects", "/models/%2e%2e/x",
     "/models%2Fx", "/models%2fx", "/models%5Cx", "/models/%2E/x", "/models\\x", "/models\x00",
     "/models\x1b[31m", "/models\x7f", "models", "*", "\\models"],
)  # fmt: skip
def test_paths_not_in_normal_form_are_refused_with_400(path: str) -> None:
    """Every reading trick the server may leave in a path is a 400 without a challenge."""
    rules = RouteScopes([route("/health", public=True)])
    with pytest.raises(AuthError) as refused:
        rules.required("GET", path)
    status, headers, _body = refused.value.response("api")
    assert status == 400
    assert "www-authenticate" not in dict(headers)


def test_unusual_but_normal_paths_still_match_their_rule() -> None:
    """Dots inside names, other percent escapes, non-ASCII and very long paths match as usual."""
    rules = RouteScopes([route("/models", "serving"), route("/.well-known", public=True)])
    assert rules.required("GET", "/.well-known/openid-configuration") is None
    for path in ("/models/a..b", "/models/.hidden", "/models/%41", "/models/caf\xe9",
                 "/models/\xe2\x82\xac", "/models/", "/models/x/" + "y/" * 20_000):  # fmt: skip
        assert rules.required("GET", path) == ("serving",), path[:40]
    assert rules.required("GET", "") == ()  # the mount point itself: the "/" reading


def test_a_get_rule_covers_head() -> None:
    """HEAD runs the GET handler in Starlette and Flask, so it needs the GET rule's scopes."""
    rules = RouteScopes([route("/", public=True), route("/reports", "admin", methods=["GET"])])
    assert rules.required("HEAD", "/reports/1") == ("admin",)
    assert rules.required("POST", "/reports/1") is None


def test_fail_closed_mode_refuses_paths_no_rule_covers(keys: Keys) -> None:
    """With unmatched="deny" a path without a rule is 403 even for a valid key; rules still work."""
    app = Starlette(
        routes=[HttpRoute("/projects", _reached), HttpRoute("/unlisted", _reached)],
        middleware=[
            Middleware(ApiKeyMiddleware, verifier=keys.verifier, routes=RULES, unmatched="deny")
        ],
    )
    with TestClient(app) as client:
        refused = client.get("/unlisted", headers=_auth(keys.both))
        assert refused.status_code == 403
        assert refused.json()["detail"] == "no access rule covers this path"
        assert "www-authenticate" not in refused.headers
        assert client.get("/projects", headers=_auth(keys.project)).text == "reached by proj"
    with pytest.raises(ValueError, match="default_scopes"):
        RouteScopes(RULES, ["project"], unmatched="deny")
    wsgi = flask_target(keys.verifier)
    wsgi.wsgi_app = ApiKeyWSGIMiddleware(  # type: ignore[method-assign]
        wsgi.wsgi_app, keys.verifier, RULES, unmatched="deny"
    )
    assert wsgi.test_client().get("/files/x", headers=_auth(keys.both)).status_code == 403


@pytest.mark.parametrize(
    "path",
    ["/" + "a" * 100 + "%", "/" + "a" * 100 + "A", "/x/" + "." * 200_000 + "x/y",
     "/" + " " * 200_000 + "x", "/" + "~" * 200_000 + "x", "/" + "a." * 100_000 + "/y"],
)  # fmt: skip
def test_paths_built_to_make_the_path_patterns_backtrack_are_answered(path: str) -> None:
    """Paths that made the plain-path, format-suffix and trailing-blank patterns backtrack
    (exponentially, then quadratically: a worker stuck for hours) are answered at once."""
    rules = RouteScopes([route("/", public=True), route("/admin", "admin")])
    try:
        rules.required("GET", path)
    except AuthError as refused:
        assert refused.status == 400
