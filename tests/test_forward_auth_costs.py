"""What serve-auth does per request, counted (never timed): timers, parses and encodings."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from apikey_tui.integrations import auth_server, forward_auth
from apikey_tui.integrations.forward_auth import ForwardAuthApp
from apikey_tui.integrations.rules_file import rules_from_mapping
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP


class _Loop:
    """An event loop that only counts the timers set on it."""

    def __init__(self) -> None:
        self.timers: list[_Timer] = []

    def call_later(self, delay: float, callback: Any) -> _Timer:
        timer = _Timer()
        self.timers.append(timer)
        return timer


class _Timer:
    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Parser:
    """Stands for uvicorn's protocol: a chunk ending in a blank line completes the request."""

    def __init__(self) -> None:
        self.whole = False

    def data_received(self, data: bytes) -> None:
        self.whole = data.endswith(b"\r\n\r\n")


class _Timed(auth_server._SlowClientTimers, _Parser):
    def __init__(self) -> None:
        super().__init__()
        self.loop: Any = _Loop()
        self.config: Any = None

    def _request_whole(self) -> bool:
        return self.whole


def test_a_request_in_one_chunk_sets_no_timer() -> None:
    """A request that arrives whole in one chunk (nearly every request) sets no header timer;
    it set one and cancelled it at once for each request."""
    protocol = _Timed()
    for _ in range(3):
        protocol.data_received(b"GET /auth HTTP/1.1\r\nHost: x\r\n\r\n")
    assert protocol.loop.timers == []


def test_a_request_in_pieces_is_timed_until_it_is_whole() -> None:
    """A request that arrives in pieces is timed from its first piece until it is whole."""
    protocol = _Timed()
    protocol.data_received(b"GET /auth HTTP/1.1\r\n")
    protocol.data_received(b"Host: x\r\n")
    assert len(protocol.loop.timers) == 1 and not protocol.loop.timers[0].cancelled
    protocol.data_received(b"\r\n\r\n")
    assert protocol.loop.timers[0].cancelled


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[TestClient, str]]:
    """serve-auth's app with one rule, and a key that passes it."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()
    rules = rules_from_mapping({"route": [{"path": "/projects", "scopes": ["project"]}]})
    app = ForwardAuthApp(Verifier.from_url(sqlite_url, hasher=CHEAP), rules)
    with TestClient(app) as client:
        yield client, key


def _ask(client: TestClient, key: str, uri: str) -> int:
    headers = {"Authorization": f"ApiKey {key}", "X-Forwarded-Method": "GET"}
    return client.get("/auth", headers={**headers, "X-Forwarded-Uri": uri}).status_code


def test_a_callers_answer_is_built_once(
    served: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 200's identity headers are built and encoded once per caller, not per request."""
    client, key = served
    built: list[object] = []
    identity = forward_auth._identity

    def counted(caller: Any) -> Any:
        built.append(caller)
        return identity(caller)

    monkeypatch.setattr(forward_auth, "_identity", counted)
    for _ in range(3):
        assert _ask(client, key, "/projects/1") == 200
    assert len(built) == 1


def test_a_forwarded_uri_is_decoded_once(
    served: tuple[TestClient, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original URI of a steady stream of requests is parsed and decoded once; one that
    is refused is judged again each time (a refusal is never kept)."""
    client, key = served
    decoded: list[str] = []
    unquote = urllib.parse.unquote_to_bytes

    def counted(text: str) -> bytes:
        decoded.append(text)
        return unquote(text)

    monkeypatch.setattr(forward_auth, "unquote_to_bytes", counted)
    uri = f"/projects/{uuid.uuid4().hex}"  # never asked before in this process
    for _ in range(3):
        assert _ask(client, key, uri) == 200
    assert len(decoded) == 1
    for _ in range(2):
        assert _ask(client, key, "/projects/%2e%2e/admin") == 400
