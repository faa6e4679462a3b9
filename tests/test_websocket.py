"""WebSocket handshakes and other ASGI scope types through the middleware and FastAPI."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import WebSocketRoute
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from apikey_tui.integrations import websocket_watch
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.integrations.asgi_messages import Message, Receive, Scope, Send
from apikey_tui.integrations.fastapi import ApiKeyAuth
from apikey_tui.integrations.routes import route
from apikey_tui.limits import parse_limit
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP

RULES = [route("/health", public=True), route("/ws", "serving", "project")]


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


def websocket_scope(path: str, key: str | None = None, *, denial: bool = False) -> Scope:
    """An ASGI websocket scope; `denial` offers the websocket.http.response extension."""
    headers = [(b"host", b"testserver")]
    if key is not None:
        headers.append((b"authorization", f"ApiKey {key}".encode()))
    scope: Scope = {
        "type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "ws",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
        "subprotocols": [], "state": {},
    }  # fmt: skip
    if denial:
        scope["extensions"] = {"websocket.http.response": {}}
    return scope


async def exchange(app: Any, scope: Scope) -> list[Message]:
    """Run one ASGI connection whose client sends the opening message and then leaves."""
    opening = {"type": "websocket.connect"} if scope["type"] == "websocket" else {}
    inbox: list[Message] = [opening]
    sent: list[Message] = []

    async def receive() -> Message:
        return inbox.pop(0) if inbox else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


class Recorder:
    """An ASGI app that only records the scopes it is handed."""

    def __init__(self) -> None:
        self.seen: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope)


def guarded(verifier: Verifier) -> ApiKeyMiddleware:
    """The middleware around a Recorder, with the WebSocket rules."""
    return ApiKeyMiddleware(Recorder(), verifier, RULES)


async def test_websocket_without_denial_extension_is_closed_with_1008(
    keys: tuple[Verifier, str, str],
) -> None:
    """A server without the denial extension gets a close 1008 and the app never runs."""
    verifier, project, _both = keys
    middleware = guarded(verifier)
    for key in (None, project, "not-a-key"):
        sent = await exchange(middleware, websocket_scope("/ws/echo", key))
        assert sent == [{"type": "websocket.close", "code": 1008}], key
    assert isinstance(middleware.app, Recorder) and middleware.app.seen == []


async def test_websocket_denial_is_the_http_problem_answer(
    keys: tuple[Verifier, str, str],
) -> None:
    """With the extension the refusal is the same status, headers and body as over HTTP."""
    verifier, project, _both = keys
    sent = await exchange(guarded(verifier), websocket_scope("/ws/echo", project, denial=True))
    assert [m["type"] for m in sent] == [
        "websocket.http.response.start",
        "websocket.http.response.body",
    ]
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 403
    assert headers[b"www-authenticate"].startswith(
        b'ApiKey realm="api", error="insufficient_scope"'
    )
    assert headers[b"content-type"] == b"application/problem+json"
    assert json.loads(sent[1]["body"])["missing_scopes"] == ["serving"]


async def test_websocket_caller_lands_in_the_scope_state(keys: tuple[Verifier, str, str]) -> None:
    """An accepted WebSocket carries the caller in scope["state"]["apikey"], like HTTP."""
    verifier, _project, both = keys
    middleware = guarded(verifier)
    await exchange(middleware, websocket_scope("/ws/echo", both))
    assert isinstance(middleware.app, Recorder)
    (seen,) = middleware.app.seen
    assert seen["state"]["apikey"].key_name == "both"
    public = websocket_scope("/health")
    del public["state"]  # a server without lifespan state
    await exchange(middleware, public)
    assert "apikey" not in middleware.app.seen[-1].get("state", {})


def test_websocket_caller_reaches_a_starlette_endpoint(keys: tuple[Verifier, str, str]) -> None:
    """Starlette's `websocket.state.apikey` is the caller the middleware checked."""
    verifier, _project, both = keys

    async def echo(websocket: WebSocket) -> None:
        caller: Caller = websocket.state.apikey
        await websocket.accept()
        await websocket.send_text(f"{caller.owner}/{caller.key_name}")
        await websocket.close()

    app = Starlette(
        routes=[WebSocketRoute("/ws/echo", echo)],
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=RULES)],
    )
    with TestClient(app) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            assert websocket.receive_text() == "alice/both"


async def test_unknown_scope_type_is_refused_with_one_warning(
    keys: tuple[Verifier, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A scope type the middleware cannot check never reaches the app and logs one warning."""
    verifier, _project, _both = keys
    middleware = guarded(verifier)
    with caplog.at_level(logging.WARNING, logger="apikey_tui.integrations.asgi"):
        sent = await exchange(middleware, {"type": "webtransport", "path": "/ws/echo"})
    assert sent == []
    assert isinstance(middleware.app, Recorder) and middleware.app.seen == []
    assert [r.getMessage() for r in caplog.records] == [
        "apikey-tui refused an ASGI scope of unknown type 'webtransport'"
    ]


async def test_lifespan_passes_through(keys: tuple[Verifier, str, str]) -> None:
    """The lifespan scope reaches the app untouched, so startup and shutdown still run."""
    verifier, _project, _both = keys
    middleware = guarded(verifier)
    await exchange(middleware, {"type": "lifespan", "asgi": {"version": "3.0"}})
    assert isinstance(middleware.app, Recorder)
    assert [s["type"] for s in middleware.app.seen] == ["lifespan"]


def fastapi_app(verifier: Verifier) -> FastAPI:
    """A FastAPI app whose WebSocket route depends on ApiKeyAuth."""
    app = FastAPI()
    auth = ApiKeyAuth(verifier)
    auth.install(app)

    @app.websocket("/ws/echo")
    async def echo(
        websocket: WebSocket,
        caller: Caller = auth.require("serving", "project"),  # noqa: B008
    ) -> None:
        await websocket.accept()
        await websocket.send_text(f"{caller.owner}/{caller.key_name}")
        await websocket.close()

    return app


def test_fastapi_dependency_on_a_websocket_route(keys: tuple[Verifier, str, str]) -> None:
    """The FastAPI dependency works on WebSocket routes and denies before accept."""
    verifier, project, both = keys
    with TestClient(fastapi_app(verifier)) as client:
        with pytest.raises(WebSocketDenialResponse) as missing:
            with client.websocket_connect("/ws/echo"):
                pass
        assert missing.value.status_code == 401
        assert missing.value.headers["www-authenticate"] == 'ApiKey realm="api"'
        with pytest.raises(WebSocketDenialResponse) as forbidden:
            with client.websocket_connect(
                "/ws/echo", headers={"Authorization": f"ApiKey {project}"}
            ):
                pass
        assert forbidden.value.status_code == 403
        assert forbidden.value.json()["missing_scopes"] == ["serving"]
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            assert websocket.receive_text() == "alice/both"


async def test_fastapi_websocket_without_denial_extension_is_closed_with_1008(
    keys: tuple[Verifier, str, str],
) -> None:
    """FastAPI's handler closes with 1008 where the server cannot send a denial response."""
    verifier, _project, _both = keys
    sent = await exchange(fastapi_app(verifier), websocket_scope("/ws/echo"))
    assert [(m["type"], m.get("code")) for m in sent] == [("websocket.close", 1008)]


def echo_app(verifier: Verifier) -> Starlette:
    """A Starlette app behind the middleware whose /ws/echo answers each text with the caller's
    key name and scopes, and on "push" sends until the connection ends."""

    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                while text == "push":  # the app talks first: its sends are checked too
                    await websocket.send_text("pushed")
                    await anyio.sleep(0.01)
                caller: Caller = websocket.state.apikey
                await websocket.send_text(f"{text} {caller.key_name} {sorted(caller.scopes)}")
        except WebSocketDisconnect as gone:
            ends.append(gone.code)

    ends: list[int] = []
    app = Starlette(
        routes=[WebSocketRoute("/ws/echo", echo)],
        middleware=[Middleware(ApiKeyMiddleware, verifier=verifier, routes=RULES)],
    )
    app.state.ends = ends
    return app


@pytest.mark.parametrize("change", ["delete", "disable", "scope removed"])
def test_an_open_websocket_is_closed_at_its_next_message_once_its_key_no_longer_passes(
    sqlite_url: str, keys: tuple[Verifier, str, str], change: str
) -> None:
    """A key deleted, disabled or stripped of a scope the route needs while its WebSocket is
    open: the client's next message closes the connection with 1008 and the app sees a
    disconnect (the handshake was the only check)."""
    verifier, _project, both = keys
    app = echo_app(verifier)
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    with TestClient(app) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            websocket.send_text("one")
            assert websocket.receive_text() == "one both ['project', 'serving']"
            if change == "delete":
                store.delete_key("alice", "both")
            elif change == "disable":
                store.disable_key("alice", "both")
            else:
                store.set_key_scopes("alice", "both", ["project"])
            websocket.send_text("two")
            with pytest.raises(WebSocketDisconnect) as closed:
                websocket.receive_text()
            assert closed.value.code == 1008
    store.close()
    assert app.state.ends == [1008]


def test_a_websocket_whose_key_still_passes_goes_on_with_the_new_caller(
    sqlite_url: str, keys: tuple[Verifier, str, str]
) -> None:
    """A key given one more scope while its WebSocket is open still passes: the connection goes
    on and the endpoint's `websocket.state.apikey` is the caller as it is now."""
    verifier, _project, both = keys
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    with TestClient(echo_app(verifier)) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            websocket.send_text("one")
            assert websocket.receive_text() == "one both ['project', 'serving']"
            store.add_scope("admin")
            store.set_key_scopes("alice", "both", ["project", "serving", "admin"])
            websocket.send_text("two")
            assert websocket.receive_text() == "two both ['admin', 'project', 'serving']"
    store.close()


def test_an_app_pushing_on_a_websocket_stops_once_its_key_is_deleted(
    sqlite_url: str, keys: tuple[Verifier, str, str]
) -> None:
    """An app that sends without being asked: its next send after the key's delete closes the
    connection with 1008, and the app's send raises WebSocketDisconnect."""
    verifier, _project, both = keys
    app = echo_app(verifier)
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    with TestClient(app) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            websocket.send_text("push")
            assert websocket.receive_text() == "pushed"
            store.delete_key("alice", "both")
            with pytest.raises(WebSocketDisconnect) as closed:
                for _ in range(1000):  # pushes sent before the delete was seen, then the close
                    websocket.receive_text()
            assert closed.value.code == 1008
    store.close()
    assert app.state.ends == [1006]  # Starlette's code for a send on a closed connection


def test_messages_on_a_websocket_spend_no_limit(sqlite_url: str) -> None:
    """A message is not a request: a key limited to 2 a minute opens one WebSocket (one
    request) and exchanges 20 messages on it; its second handshake is its second request."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key(
        "alice", "metered", ["project", "serving"], limits=[parse_limit("2/m")]
    ).plaintext
    store.close()
    verifier = Verifier.from_url(sqlite_url, hasher=CHEAP)
    try:
        with TestClient(echo_app(verifier)) as client:
            headers = {"Authorization": f"ApiKey {key}"}
            with client.websocket_connect("/ws/echo", headers=headers) as websocket:
                for n in range(20):
                    websocket.send_text(str(n))
                    assert websocket.receive_text().startswith(f"{n} metered")
            with client.websocket_connect("/ws/echo", headers=headers) as websocket:
                websocket.send_text("again")
                assert websocket.receive_text().startswith("again metered")
            with pytest.raises(WebSocketDenialResponse) as third:
                with client.websocket_connect("/ws/echo", headers=headers):
                    pass
            assert third.value.status_code == 429
    finally:
        verifier.close()


def test_a_fastapi_websocket_route_is_closed_once_its_key_is_deleted(
    sqlite_url: str, keys: tuple[Verifier, str, str]
) -> None:
    """FastAPI's dependency on a WebSocket route watches the later messages too: after the
    key's delete, the client's next message closes the connection with 1008."""
    verifier, _project, both = keys
    app = FastAPI()
    auth = ApiKeyAuth(verifier)
    auth.install(app)
    ends: list[int] = []

    @app.websocket("/ws/echo")
    async def echo(
        websocket: WebSocket,
        caller: Caller = auth.require("serving", "project"),  # noqa: B008
    ) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                await websocket.send_text(f"{text} {caller.key_name}")
        except WebSocketDisconnect as gone:
            ends.append(gone.code)

    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    with TestClient(app) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            websocket.send_text("one")
            assert websocket.receive_text() == "one both"
            store.delete_key("alice", "both")
            websocket.send_text("two")
            with pytest.raises(WebSocketDisconnect) as closed:
                websocket.receive_text()
            assert closed.value.code == 1008
    store.close()
    assert ends == [1008]


class Clock:
    """A monotonic clock the test moves by hand (the watch's spacing of key reads)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_where_every_check_reads_the_database_a_connection_reads_its_key_ten_times_a_second(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With revocation_bound=0 every check reads the key, and no limit bounds messages: 30
    messages within 0.1 s of the last read read nothing more; the next one after it reads
    once; a deleted key is refused at the first message past the spacing."""
    store = KeyStore.open(postgres_url, hasher=CHEAP)
    key = store.create_key("alice", "flood", ["project", "serving"]).plaintext
    verifier = Verifier.from_url(postgres_url, hasher=CHEAP, revocation_bound=0)
    assert verifier.reads_every_check
    clock = Clock()
    monkeypatch.setattr(websocket_watch, "time", clock)
    try:
        with TestClient(echo_app(verifier)) as client:
            headers = {"Authorization": f"ApiKey {key}"}
            with client.websocket_connect("/ws/echo", headers=headers) as websocket:
                reads = verifier.stats.cold
                for n in range(30):
                    websocket.send_text(str(n))
                    assert websocket.receive_text().startswith(f"{n} flood")
                assert verifier.stats.cold == reads  # messages and answers: no read
                clock.now += 0.2
                websocket.send_text("later")
                assert websocket.receive_text().startswith("later flood")
                assert verifier.stats.cold == reads + 1  # the message read; its answer did not
                store.delete_key("alice", "flood")
                clock.now += 0.2
                websocket.send_text("gone")
                with pytest.raises(WebSocketDisconnect) as closed:
                    websocket.receive_text()
                assert closed.value.code == 1008
    finally:
        verifier.close()
        store.close()


def test_messages_are_not_counted_as_checks(keys: tuple[Verifier, str, str]) -> None:
    """The verifier's metrics count the handshake, not each message either way (20 echoed
    messages counted 40 warm checks)."""
    verifier, _project, both = keys
    with TestClient(echo_app(verifier)) as client:
        headers = {"Authorization": f"ApiKey {both}"}
        with client.websocket_connect("/ws/echo", headers=headers) as websocket:
            websocket.send_text("first")
            websocket.receive_text()
            hits = verifier.stats.hits
            for n in range(20):
                websocket.send_text(str(n))
                websocket.receive_text()
            assert verifier.stats.hits == hits
