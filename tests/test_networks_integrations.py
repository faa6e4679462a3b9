"""Each integration hands the verifier the client address: the peer, or what a trusted proxy
says (FastAPI, WSGI, Django and DRF; ASGI and serve-auth run on real servers elsewhere)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from apikey_tui.errors import NETWORK_NOT_ALLOWED
from apikey_tui.integrations.fastapi import ApiKeyAuth
from apikey_tui.integrations.routes import route
from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
from apikey_tui.networks import network_rules
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP
from tests.test_django import configure_django, plain_views, urlpatterns

ALLOWED, OTHER, PROXY = "10.1.2.3", "203.0.113.9", "192.0.2.1"


@pytest.fixture
def placed(database_url: str) -> Iterator[tuple[Verifier, str]]:
    """A verifier and a key allowed only from 10.0.0.0/8."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    key = store.create_key("alice", "proj", ["project"], networks=network_rules(["10.0.0.0/8"]))
    store.close()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    yield verifier, key.plaintext
    verifier.close()


def test_fastapi_judges_the_peer_and_a_trusted_proxys_header(placed: tuple[Verifier, str]) -> None:
    """The dependency refuses a peer outside the rules with the network problem; behind a
    trusted proxy the X-Forwarded-For client decides, and from an untrusted peer it is ignored."""
    verifier, key = placed
    for proxies, peer, forwarded, status in (
        (None, ALLOWED, OTHER, 200),
        (None, OTHER, ALLOWED, 403),
        ([PROXY], PROXY, ALLOWED, 200),
        ([PROXY], PROXY, f"{ALLOWED}, {OTHER}", 403),
        ([PROXY], OTHER, ALLOWED, 403),
    ):
        auth = ApiKeyAuth(verifier, trusted_proxies=proxies)
        app = FastAPI()
        auth.install(app)

        @app.get("/p")
        def view(caller: Caller = auth.require("project")) -> str:  # noqa: B008
            return caller.key_name

        with TestClient(app, client=(peer, 5000)) as client:
            answer = client.get(
                "/p", headers={"Authorization": f"ApiKey {key}", "X-Forwarded-For": forwarded}
            )
        assert answer.status_code == status, (proxies, peer, forwarded)
        if status == 403:
            assert answer.json()["type"] == NETWORK_NOT_ALLOWED


def test_wsgi_reads_remote_addr_and_the_trusted_proxys_header(placed: tuple[Verifier, str]) -> None:
    """REMOTE_ADDR is the client, unless it is a trusted proxy: then X-Forwarded-For from the
    right; a malformed header from the proxy is an unknown client, refused."""
    verifier, key = placed
    statuses: list[str] = []

    def start(status: str, headers: list[tuple[str, str]]) -> None:
        statuses.append(status)

    def ask(app: ApiKeyWSGIMiddleware, remote: str, forwarded: str | None) -> str:
        environ: dict[str, Any] = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": "/p",
            "HTTP_AUTHORIZATION": f"ApiKey {key}",
            "REMOTE_ADDR": remote,
        }
        if forwarded is not None:
            environ["HTTP_X_FORWARDED_FOR"] = forwarded
        statuses.clear()
        body = b"".join(app(environ, start))  # type: ignore[arg-type]
        return statuses[0] if statuses else body.decode()

    plain = ApiKeyWSGIMiddleware(lambda e, s: [b"ok"], verifier, [route("/p", "project")])
    behind = ApiKeyWSGIMiddleware(
        lambda e, s: [b"ok"], verifier, [route("/p", "project")], trusted_proxies=[PROXY]
    )
    assert ask(plain, ALLOWED, OTHER) == "ok"
    assert ask(plain, OTHER, ALLOWED).startswith("403")
    assert ask(behind, PROXY, ALLOWED) == "ok"
    assert ask(behind, PROXY, "garbage").startswith("403")
    assert ask(behind, PROXY, None).startswith("403")
    assert ask(behind, OTHER, ALLOWED).startswith("403")


def test_django_reads_trusted_proxies_from_its_settings(placed: tuple[Verifier, str]) -> None:
    """The middleware takes TRUSTED_PROXIES from settings.APIKEY_TUI; a bad one is refused at
    start-up as ImproperlyConfigured."""
    configure_django()
    from django.core.exceptions import ImproperlyConfigured
    from django.test import Client, override_settings

    verifier, key = placed
    urlpatterns[:] = plain_views()
    base = {"VERIFIER": verifier, "ROUTES": [route("/projects", "project")]}
    headers = {"Authorization": f"ApiKey {key}"}
    common: dict[str, Any] = {
        "ROOT_URLCONF": "tests.test_django",
        "ALLOWED_HOSTS": ["testserver"],
        "MIDDLEWARE": ["apikey_tui.integrations.django.ApiKeyMiddleware"],
    }
    with override_settings(**common, APIKEY_TUI={**base, "TRUSTED_PROXIES": [PROXY]}):
        client = Client()
        passed = client.get("/projects", headers=headers, REMOTE_ADDR=PROXY,
                            HTTP_X_FORWARDED_FOR=ALLOWED)  # fmt: skip
        assert passed.status_code == 200
        refused = client.get("/projects", headers=headers, REMOTE_ADDR=OTHER,
                             HTTP_X_FORWARDED_FOR=ALLOWED)  # fmt: skip
        assert refused.status_code == 403
        assert json.loads(refused.content)["type"] == NETWORK_NOT_ALLOWED
    with (
        override_settings(**common, APIKEY_TUI={**base, "TRUSTED_PROXIES": ["10.0.0.1/8"]}),
        pytest.raises(ImproperlyConfigured),
    ):
        Client().get("/projects", headers=headers)


async def test_django_under_asgi_never_believes_the_servers_proxy_rewrite(
    placed: tuple[Verifier, str],
) -> None:
    """Under ASGI, a client address of port 0 (uvicorn's own X-Forwarded-For handling put it
    there: the client chose it), or one X-Forwarded-For names with its port (uvicorn 0.54 takes
    that too), is unknown and refused, as in the ASGI middleware; a real peer at the same
    address passes."""
    configure_django()
    import io

    from django.core.handlers.asgi import ASGIRequest
    from django.http import HttpRequest, HttpResponse
    from django.test import override_settings

    from apikey_tui.integrations.django import ApiKeyMiddleware

    verifier, key = placed

    async def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse(b"ok")

    def request(peer: tuple[str, int], forwarded: bytes | None = None) -> ASGIRequest:
        headers = [(b"host", b"testserver"), (b"authorization", f"ApiKey {key}".encode())]
        if forwarded is not None:
            headers.append((b"x-forwarded-for", forwarded))
        scope = {
            "type": "http",
            "method": "GET",
            "path": "/projects",
            "query_string": b"",
            "headers": headers,
            "client": peer,  # what Django copies into REMOTE_ADDR and REMOTE_PORT
        }
        return ASGIRequest(scope, io.BytesIO())

    with override_settings(
        ALLOWED_HOSTS=["testserver"],
        APIKEY_TUI={"VERIFIER": verifier, "ROUTES": [route("/projects", "project")]},
    ):
        middleware = ApiKeyMiddleware(view)
        assert (await middleware(request((ALLOWED, 40000)))).status_code == 200
        assert (await middleware(request((ALLOWED, 40000), ALLOWED.encode()))).status_code == 200
        rewritten = await middleware(request((ALLOWED, 0)))
        assert rewritten.status_code == 403
        assert json.loads(rewritten.content)["type"] == NETWORK_NOT_ALLOWED
        ported = await middleware(request((ALLOWED, 443), f"{OTHER}, {ALLOWED}:443".encode()))
        assert ported.status_code == 403
