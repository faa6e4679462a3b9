"""Network rules on real servers: a uvicorn service and serve-auth behind nginx and Caddy, with
clients bound to different loopback source addresses (127.0.0.2, 127.0.0.3, ::1) standing for
networks, and spoofed forwarding headers that must never move a request to another network."""

from __future__ import annotations

import http.client
import json
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apikey_tui.errors import NETWORK_NOT_ALLOWED
from apikey_tui.networks import SHADOW, network_rules
from apikey_tui.store import KeyStore
from tests.conftest import ACTOR, CHEAP, eventually
from tests.test_proxies import PROXIES, Process, start_serve_auth, start_upstream
from tests.throwaway_postgres import free_port

ALLOWED, OTHER = "127.0.0.2", "127.0.0.3"  # two "networks"; the proxies listen on 127.0.0.1

# uvicorn on one dual-stack socket (its own `--host ::` is IPv6 only): IPv4 peers arrive as
# ::ffff:127.0.0.2, IPv6 ones as ::1.
SERVICE = """
import os, socket, sys
import uvicorn
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.verifier import Verifier

async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})

app = ApiKeyMiddleware(hello, Verifier.from_url(os.environ["KEYS_URL"]))
sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("::", int(sys.argv[1])))
config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
uvicorn.Server(config).run(sockets=[sock])
"""


def get(
    port: int,
    key: str,
    source: str,
    headers: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
) -> tuple[int, dict[str, str], bytes]:
    """One GET /orders from a client bound to `source`."""
    conn = http.client.HTTPConnection(host, port, timeout=15, source_address=(source, 0))
    try:
        conn.putrequest("GET", "/orders", skip_accept_encoding=True)
        conn.putheader("Authorization", f"ApiKey {key}")
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


@dataclass
class Keys:
    url: str
    placed: str  # enforce: 127.0.0.2 and ::1 only
    shadowed: str  # the same rules in shadow mode


def make_keys(folder: Path) -> Keys:
    url = f"sqlite:///{folder / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    try:
        rules = network_rules([ALLOWED, "::1"])
        placed = store.create_key("alice", "placed", ["project"], networks=rules)
        shadowed = store.create_key(
            "alice", "shadowed", ["project"], networks=rules.with_mode(SHADOW)
        )
    finally:
        store.close()
    return Keys(url, placed.plaintext, shadowed.plaintext)


def would_refuse(url: str, name: str) -> set[str]:
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR, create=False)
    try:
        return {r.network for r in store.network_use("alice", name).refusals if r.shadow}
    finally:
        store.close()


@pytest.fixture(scope="module")
def service() -> Iterator[tuple[Process, Keys]]:
    """The service under uvicorn on :: (IPv6 and IPv4 on one socket), no trusted proxy.

    The verifier flushes usage when it closes: lifespan off, so the test waits for the
    periodic flush instead."""
    with tempfile.TemporaryDirectory(prefix="apikey-networks-") as name:
        folder = Path(name)
        keys = make_keys(folder)
        (folder / "service.py").write_text(SERVICE)
        port = free_port()
        process = Process(
            "service",
            [sys.executable, str(folder / "service.py"), str(port)],
            port, folder, {"KEYS_URL": keys.url},
        )  # fmt: skip
        try:
            yield process, keys
        finally:
            process.stop()


def test_a_service_admits_only_the_allowed_source_addresses(
    service: tuple[Process, Keys],
) -> None:
    """127.0.0.2 and ::1 pass, 127.0.0.1 and 127.0.0.3 get the network 403; a forwarding header
    from a peer nobody trusts changes nothing; shadow admits all and records the others."""
    process, keys = service
    port = process.port
    answers = {
        source: get(port, keys.placed, source, host="::1" if ":" in source else "127.0.0.1")[0]
        for source in (ALLOWED, "::1", "127.0.0.1", OTHER)
    }
    assert answers == {ALLOWED: 200, "::1": 200, "127.0.0.1": 403, OTHER: 403}
    _, headers, body = get(port, keys.placed, OTHER)
    assert json.loads(body)["type"] == NETWORK_NOT_ALLOWED
    assert 'error="insufficient_scope"' in headers["www-authenticate"]
    spoofs = [
        {"X-Forwarded-For": ALLOWED},
        {"Forwarded": f"for={ALLOWED}"},
        {"X-Forwarded-For": f"{ALLOWED}, {ALLOWED}"},
        {"X-Real-IP": ALLOWED},
    ]
    for spoof in spoofs:
        assert get(port, keys.placed, OTHER, spoof)[0] == 403, spoof
    shadowed = [get(port, keys.shadowed, s)[0] for s in (ALLOWED, OTHER, "127.0.0.1")]
    assert shadowed == [200, 200, 200]
    # The service flushes usage every few seconds: the would-be refusals arrive.
    assert eventually(lambda: would_refuse(keys.url, "shadowed") == {"127.0.0.0/24"}, 30)


# The service as uvicorn runs it by default on IPv4: uvicorn's own proxy headers are on and trust
# 127.0.0.1, so it puts an X-Forwarded-For address from that peer into scope["client"] (port 0).
DEFAULT_UVICORN = """
import os, sys
import uvicorn
from apikey_tui.integrations.asgi import ApiKeyMiddleware
from apikey_tui.verifier import Verifier

async def hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})

app = ApiKeyMiddleware(hello, Verifier.from_url(os.environ["KEYS_URL"]), **%s)
uvicorn.run(
    app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off", **%s
)
"""


@pytest.mark.parametrize(
    ("ours", "uvicorns", "source", "spoofs"),
    [
        # uvicorn's defaults, no trusted proxy of ours: a client on 127.0.0.1 names an address.
        (
            {}, {}, "127.0.0.1",
            [ALLOWED, f"{OTHER}, {ALLOWED}", f"{ALLOWED}:443", f"{OTHER}, {ALLOWED}:8_0",
             "[::1]:080"],
        ),
        # uvicorn believing every peer (its first hop), a proxy of ours at 127.0.0.1: a client
        # anywhere names the proxy, with a port, then an address.
        (
            {"trusted_proxies": ["127.0.0.1"]}, {"forwarded_allow_ips": "*"}, OTHER,
            [f"127.0.0.1, {ALLOWED}", f"127.0.0.1:80, {ALLOWED}"],
        ),
    ],
)  # fmt: skip
def test_an_address_uvicorn_took_from_a_header_is_no_peer(
    tmp_path: Path, ours: dict[str, Any], uvicorns: dict[str, Any], source: str, spoofs: list[str]
) -> None:
    """When uvicorn's own proxy handling puts a client-chosen X-Forwarded-For address into
    scope["client"], with port 0 or (uvicorn 0.54) the header's port, the client gets the
    network 403, not that address's 200: uvicorn's reading is never believed."""
    keys = make_keys(tmp_path)
    (tmp_path / "service.py").write_text(DEFAULT_UVICORN % (ours, uvicorns))
    port = free_port()
    process = Process(
        "service", [sys.executable, str(tmp_path / "service.py"), str(port)], port, tmp_path,
        {"KEYS_URL": keys.url},
    )  # fmt: skip
    try:
        assert get(port, keys.placed, ALLOWED)[0] == 200
        tried = [{"X-Forwarded-For": spoof} for spoof in spoofs]
        bypasses = [h for h in tried if get(port, keys.placed, source, h)[0] != 403]
        assert bypasses == []
    finally:
        process.stop()


@dataclass
class Behind:
    proxy: Process
    keys: Keys


@pytest.fixture(scope="module", params=sorted(PROXIES))
def behind(request: pytest.FixtureRequest) -> Iterator[Behind]:
    """serve-auth (trusting 127.0.0.1, the proxy's address) behind nginx or Caddy."""
    with tempfile.TemporaryDirectory(prefix=f"apikey-net-{request.param}-") as name:
        folder = Path(name)
        keys = make_keys(folder)
        started: list[Process] = []
        try:
            started.append(start_upstream(folder))
            options = ["--trusted-proxy", "127.0.0.1"]
            started.append(start_serve_auth(folder, keys.url, RULES, options))
            started.append(PROXIES[request.param](folder, started[1].port, started[0].port))
            yield Behind(started[2], keys)
        finally:
            for process in reversed(started):
                process.stop()


RULES = """
unmatched = "deny"

[[route]]
path = "/orders"
scopes = ["project"]
"""

# Every spoof a client at 127.0.0.3 may try; none may pass as 127.0.0.2.
SPOOFS = [
    {"X-Forwarded-For": ALLOWED},
    {"X-Forwarded-For": f"{ALLOWED}, {ALLOWED}"},
    {"X-Forwarded-For": f"garbage, {ALLOWED}"},
    {"X-Forwarded-For": "::1"},
    {"Forwarded": f"for={ALLOWED}"},
    {"Forwarded": 'for="[::1]"'},
    {"X-Forwarded-For": f"{ALLOWED}", "Forwarded": f"for={ALLOWED}"},
    {"X-Real-IP": ALLOWED},
]


def test_serve_auth_behind_a_proxy_judges_the_client_not_the_proxy(behind: Behind) -> None:
    """Through the shipped snippet, 127.0.0.2 passes and 127.0.0.3 gets the network 403 with its
    challenge; every spoofed header from 127.0.0.3 is still refused (0 bypasses)."""
    port, keys = behind.proxy.port, behind.keys
    assert get(port, keys.placed, ALLOWED)[0] == 200
    status, headers, _ = get(port, keys.placed, OTHER)
    assert status == 403
    assert 'error="insufficient_scope"' in headers.get("www-authenticate", "")
    bypasses = [spoof for spoof in SPOOFS if get(port, keys.placed, OTHER, spoof)[0] != 403]
    assert bypasses == []
    # The allowed client keeps passing whatever it adds to the left.
    assert get(port, keys.placed, ALLOWED, {"X-Forwarded-For": "203.0.113.9"})[0] == 200


def test_serve_auth_in_shadow_admits_and_records_the_would_be_refusals(behind: Behind) -> None:
    """Shadow mode passes every request through the proxy and records the client's network,
    never the proxy's own or a spoofed one."""
    port, keys = behind.proxy.port, behind.keys
    statuses = [
        get(port, keys.shadowed, s, {"X-Forwarded-For": "198.51.100.7"})[0]
        for s in (ALLOWED, OTHER)
    ]
    assert statuses == [200, 200]
    assert eventually(lambda: would_refuse(keys.url, "shadowed") == {"127.0.0.0/24"}, 30)
