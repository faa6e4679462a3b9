"""Real nginx and Caddy (Debian packages) in front of a real upstream, asking serve-auth.

Each proxy runs the shipped snippet (deploy/nginx.conf, deploy/Caddyfile) with its addresses
replaced by free ports, in its own temporary folder, as a subprocess on 127.0.0.1. serve-auth is
the real `apikey-tui serve-auth` command; the upstream is a tiny ASGI app under uvicorn that
echoes the headers it received and remembers which paths reached it.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apikey_tui import keyformat
from apikey_tui.limits import parse_limit
from apikey_tui.networks import network_rules
from apikey_tui.store import KeyStore
from tests.conftest import ACTOR, CHEAP
from tests.throwaway_postgres import free_port

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
# The addresses written in deploy/nginx.conf, replaced by free ports when it runs here.
NGINX_AUTH, NGINX_APP, NGINX_LISTEN = "127.0.0.1:9180", "127.0.0.1:8000", "127.0.0.1:8080"

ECHO_APP = """
import json
SEEN = []

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/_seen":
        body = json.dumps(SEEN).encode()
    else:
        SEEN.append(scope["raw_path"].decode("latin-1"))
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        body = json.dumps({"method": scope["method"], "path": scope["path"],
                           "headers": headers}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
"""

RULES = """
unmatched = "deny"

[[route]]
path = "/health"
public = true

[[route]]
path = "/projects"
scopes = ["project"]

[[route]]
path = "/models"
scopes = ["serving", "project"]

[[route]]
path = "/admin"
scopes = ["admin"]
"""


class Process:
    """A subprocess that listens on a TCP port; its output goes to a file for failure messages."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        port: int,
        folder: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name, self.port = name, port
        self.log_path = folder / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                list(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                cwd=folder,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{name} did not start:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_upstream(folder: Path) -> Process:
    """The echo app under uvicorn."""
    (folder / "echo_app.py").write_text(ECHO_APP)
    port = free_port()
    return Process(
        "upstream",
        [sys.executable, "-m", "uvicorn", "--app-dir", str(folder), "echo_app:app",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
         "--no-access-log"],
        port, folder,
    )  # fmt: skip


def start_serve_auth(
    folder: Path, database_url: str, rules: str | None = RULES, options: Sequence[str] = ()
) -> Process:
    """`apikey-tui serve-auth` on a free port (the real command, in its own process)."""
    port = free_port()
    command = [sys.executable, "-m", "apikey_tui", "serve-auth", "--port", str(port),
               "--database-url", database_url, *options]  # fmt: skip
    if rules is not None:
        (folder / "rules.toml").write_text(rules)
        command += ["--rules", str(folder / "rules.toml")]
    return Process("serve-auth", command, port, folder)


def render_nginx(folder: Path, auth_port: int, app_port: int, *, with_auth: bool = True) -> int:
    """Write deploy/nginx.conf with these ports into a runnable nginx.conf; return its port."""
    lines = (DEPLOY / "nginx.conf").read_text().splitlines()
    listen = free_port()
    for old, new in (
        (NGINX_AUTH, f"127.0.0.1:{auth_port}"),
        (NGINX_APP, f"127.0.0.1:{app_port}"),
        (NGINX_LISTEN, f"127.0.0.1:{listen}"),
    ):
        # Directives only: the comments may name the same addresses.
        where = [n for n, line in enumerate(lines) if old in line.split("#", 1)[0]]
        assert len(where) == 1, f"deploy/nginx.conf should name {old} in one directive"
        lines[where[0]] = lines[where[0]].replace(old, new)
    snippet = "\n".join(lines) + "\n"
    if not with_auth:  # the same server with the check taken out: the benchmark's baseline
        snippet = snippet.replace("auth_request /_apikey_auth;", "")
    (folder / "site.conf").write_text(snippet)
    temp = folder / "temp"
    temp.mkdir(exist_ok=True)
    # Everything nginx would write outside the folder is pointed into it, so it runs as any
    # user, next to any other nginx; `user` is only read by a master process (none here).
    (folder / "nginx.conf").write_text(
        f"""
daemon off;
master_process off;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    include {folder}/site.conf;
}}
"""
    )
    return listen


def start_nginx(folder: Path, auth_port: int, app_port: int, *, with_auth: bool = True) -> Process:
    """nginx on the shipped snippet, in the foreground, one process."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    listen = render_nginx(folder, auth_port, app_port, with_auth=with_auth)
    command = [binary, "-p", str(folder), "-c", str(folder / "nginx.conf"),
               "-e", str(folder / "error.log")]  # fmt: skip
    return Process("nginx", command, listen, folder)


def start_caddy(folder: Path, auth_port: int, app_port: int) -> Process:
    """Caddy on the shipped Caddyfile (imported), with no admin endpoint and no HTTPS."""
    binary = shutil.which("caddy") or "/usr/bin/caddy"
    listen = free_port()
    (folder / "Caddyfile").write_text(
        f"{{\n\tadmin off\n\tauto_https off\n}}\n\nimport {DEPLOY / 'Caddyfile'}\n"
    )
    env = {
        "APIKEY_SITE": f"http://127.0.0.1:{listen}",
        "APIKEY_AUTH": f"127.0.0.1:{auth_port}",
        "APIKEY_APP": f"127.0.0.1:{app_port}",
        "HOME": str(folder),
        "XDG_DATA_HOME": str(folder / "data"),
        "XDG_CONFIG_HOME": str(folder / "config"),
    }
    command = [binary, "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"]
    return Process("caddy", command, listen, folder, env)


PROXIES = {"nginx": start_nginx, "caddy": start_caddy}
# A long window: a test never straddles its turn (windows are aligned to the Unix epoch).
METERED_LIMIT = "3/30d"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def echoed(self) -> dict[str, Any]:
        """What the echo upstream received (only for answers that came from it)."""
        data: dict[str, Any] = json.loads(self.body)
        return data

    def upstream_headers(self) -> dict[str, list[str]]:
        seen: dict[str, list[str]] = {}
        for name, value in self.echoed()["headers"]:
            seen.setdefault(name.lower(), []).append(value)
        return seen


def call(
    port: int, path: str, key: str | None = None, headers: Mapping[str, str] | None = None
) -> Answer:
    """One GET with the path sent exactly as given (no client-side normalising)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        if key is not None:
            conn.putheader("Authorization", f"ApiKey {key}")
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        body = response.read()
        # A field sent twice is joined as RFC 9110 5.3 combines it, so a doubled header (a proxy
        # adding what serve-auth already sent) fails an exact comparison instead of hiding.
        fields: dict[str, str] = {}
        for name, value in response.getheaders():
            name = name.lower()
            fields[name] = f"{fields[name]}, {value}" if name in fields else value
        return Answer(response.status, fields, body)
    finally:
        conn.close()


def seen_by_upstream(upstream: Process) -> list[str]:
    """The raw paths that reached the upstream so far (asked directly, not through the proxy)."""
    answer = call(upstream.port, "/_seen")
    paths: list[str] = json.loads(answer.body)
    return paths


@dataclass
class Stack:
    proxy: Process
    upstream: Process
    both: str  # key with serving + project
    project: str  # key with project only
    public_id: str
    metered: str = ""  # key with project only, and a limit of METERED_LIMIT
    fenced: str = ""  # key with both scopes, usable only from 10.0.0.0/8 (not the proxy's)


@contextmanager
def running_stack(proxy: str, rules: str) -> Iterator[Stack]:
    """Upstream, serve-auth with these rules on a fresh SQLite key database, one proxy in front."""
    with tempfile.TemporaryDirectory(prefix=f"apikey-{proxy}-") as name:
        folder = Path(name)
        url = f"sqlite:///{folder / 'keys.db'}"
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        try:
            both = store.create_key("alice", "model-client", ["serving", "project"])
            project = store.create_key("alice", "reports", ["project"])
            metered = store.create_key(
                "alice", "metered", ["project"], limits=[parse_limit(METERED_LIMIT)]
            )
            fenced = store.create_key(
                "alice", "fenced", ["serving", "project"], networks=network_rules(["10.0.0.0/8"])
            )
        finally:
            store.close()
        started: list[Process] = []
        try:
            started.append(start_upstream(folder))
            started.append(start_serve_auth(folder, url, rules))
            started.append(PROXIES[proxy](folder, started[1].port, started[0].port))
            yield Stack(
                started[2],
                started[0],
                both.plaintext,
                project.plaintext,
                both.info.public_id,
                metered.plaintext,
                fenced.plaintext,
            )
        finally:
            for process in reversed(started):
                process.stop()


@pytest.fixture(scope="module", params=sorted(PROXIES))
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The stack with RULES (unmatched = "deny")."""
    with running_stack(request.param, RULES) as running:
        yield running


@pytest.fixture(scope="module", params=sorted(PROXIES))
def open_stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    """The stack with RULES but unmatched = "key": a path no rule covers needs any valid key."""
    with running_stack(request.param, RULES.replace('"deny"', '"key"')) as running:
        yield running


def test_allowed_request_reaches_upstream_with_identity(stack: Stack) -> None:
    """A key with every needed scope reaches the upstream, which sees the caller but not the key."""
    answer = call(stack.proxy.port, "/models/churn/predict?x=1", stack.both)
    assert answer.status == 200, answer.body
    seen = answer.upstream_headers()
    assert seen["x-auth-request-user"] == ["alice"]
    assert seen["x-apikey-name"] == ["model-client"]
    assert seen["x-apikey-id"] == [stack.public_id]
    assert seen["x-apikey-scopes"] == ["project serving"]
    assert "authorization" not in seen
    assert answer.echoed()["path"] == "/models/churn/predict"


def test_missing_and_bad_keys_get_401_with_challenge(stack: Stack) -> None:
    """No key and a wrong key reach the client as 401 with serve-auth's WWW-Authenticate."""
    before = len(seen_by_upstream(stack.upstream))
    answer = call(stack.proxy.port, "/projects")
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == 'ApiKey realm="api"'
    bad = stack.both[:-1] + ("a" if stack.both[-1] != "a" else "b")
    answer = call(stack.proxy.port, "/projects", bad)
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == 'ApiKey realm="api", error="invalid_token"'
    assert len(seen_by_upstream(stack.upstream)) == before


def test_every_refusal_is_a_problem_that_is_never_cached(stack: Stack) -> None:
    """401 (no key, bad key), 403 and 400 through the proxy carry Cache-Control: no-store and
    an application/problem+json body of their status (nginx answered its own HTML page)."""
    bad = stack.both[:-1] + ("a" if stack.both[-1] != "a" else "b")
    for path, key, status in (
        ("/projects", None, 401),
        ("/projects", bad, 401),
        ("/models/x", stack.project, 403),
        ("/health/../models", stack.project, 400),
    ):
        answer = call(stack.proxy.port, path, key)
        assert answer.status == status, (path, answer.body)
        assert answer.headers.get("cache-control") == "no-store", (path, answer.headers)
        assert answer.headers["content-type"].startswith("application/problem+json"), path
        problem = json.loads(answer.body)
        assert problem["status"] == status and problem["title"] and problem["detail"], path


def test_missing_scope_gets_403_naming_it(stack: Stack) -> None:
    """A key without `serving` gets 403 whose WWW-Authenticate names the missing scope."""
    before = len(seen_by_upstream(stack.upstream))
    answer = call(stack.proxy.port, "/models/churn/predict", stack.project)
    assert answer.status == 403
    assert answer.headers["www-authenticate"] == (
        'ApiKey realm="api", error="insufficient_scope", scope="serving"'
    )
    assert call(stack.proxy.port, "/projects", stack.project).status == 200
    # The client's query never names the scopes (the snippets drop it from the auth URL).
    assert call(stack.proxy.port, "/models/x?scope=project", stack.project).status == 403
    assert call(stack.proxy.port, "/elsewhere", stack.both).status == 403  # unmatched = "deny"
    assert len(seen_by_upstream(stack.upstream)) == before + 1


def test_each_kind_of_403_says_its_own_reason(stack: Stack) -> None:
    """A 403 for a path no rule covers, or for the key's network, does not blame a scope."""
    details = {
        name: json.loads(call(stack.proxy.port, path, key).body)["detail"]
        for name, path, key in (
            ("scope", "/models/x", stack.project),
            ("unmatched", "/elsewhere", stack.both),
            ("network", "/projects", stack.fenced),
        )
    }
    assert "scope" in details["scope"], details
    assert "rule" in details["unmatched"] and "scope" not in details["unmatched"], details
    assert "network" in details["network"] and "scope" not in details["network"], details


def test_client_sent_identity_headers_never_reach_upstream(stack: Stack) -> None:
    """Identity headers a client sends are dropped or replaced, on keyed and public routes."""
    forged = {
        "X-Auth-Request-User": "mallory",
        "X-ApiKey-Name": "root-key",
        "X-ApiKey-Id": "forged",
        "X-ApiKey-Scopes": "admin",
    }
    keyed = call(stack.proxy.port, "/projects", stack.project, forged)
    assert keyed.status == 200
    seen = keyed.upstream_headers()
    assert seen["x-auth-request-user"] == ["alice"]
    assert seen["x-apikey-scopes"] == ["project"]
    public = call(stack.proxy.port, "/health", None, forged)
    assert public.status == 200
    seen = public.upstream_headers()
    for name in forged:
        assert not any(seen.get(name.lower(), [])), (name, seen)


@pytest.mark.parametrize(
    "path",
    [
        "/health/./../models/x",
        "/health/../models/x",
        "/./models/x",
        "/health/..%2Fmodels/x",
        "/health%2F..%2Fmodels",
        "/models%2fx",
        "/health/%2e%2e/models",
    ],
)
def test_path_tricks_are_refused(stack: Stack, path: str) -> None:
    """Dot segments and encoded separators never pass, even toward a public route's prefix."""
    before = seen_by_upstream(stack.upstream)
    answer = call(stack.proxy.port, path, stack.project)
    assert answer.status == 400, (answer.status, answer.body)
    assert "retry-after" not in answer.headers and "www-authenticate" not in answer.headers
    assert seen_by_upstream(stack.upstream) == before


def test_repeated_slashes_need_both_readings(stack: Stack) -> None:
    """`//models/x` must pass the rules of `//models/x` (no rule: denied) and of `/models/x`."""
    before = seen_by_upstream(stack.upstream)
    assert call(stack.proxy.port, "//models/x", stack.both).status == 403
    assert call(stack.proxy.port, "/projects//x", stack.project).status == 200
    assert len(seen_by_upstream(stack.upstream)) == len(before) + 1


@pytest.mark.parametrize(
    "path",
    [
        "/admin;x",
        "/admin;jsessionid=1",
        "/admin%3bx",
        "/admin%3Bx/users",
        "/ADMIN",
        "/Admin/users",
    ],
)
def test_other_readings_of_a_path_need_their_scopes(open_stack: Stack, path: str) -> None:
    """A path Tomcat (`;` parameters) or Express (any letter case) reads as /admin needs admin."""
    before = seen_by_upstream(open_stack.upstream)
    answer = call(open_stack.proxy.port, path, open_stack.project)
    assert answer.status == 403, (answer.status, answer.body)
    assert answer.headers["www-authenticate"] == (
        'ApiKey realm="api", error="insufficient_scope", scope="admin"'
    )
    assert seen_by_upstream(open_stack.upstream) == before
    assert call(open_stack.proxy.port, "/elsewhere;x", open_stack.project).status == 200


@pytest.mark.parametrize("path", ["/health/..;/admin", "/health/..%3B/admin", "/health#/../admin"])
def test_paths_that_leave_a_public_prefix_under_some_reading_are_400(
    stack: Stack, path: str
) -> None:
    """`..;` (a dot segment once Tomcat strips `;`) and a `#` in the target never pass as public."""
    before = seen_by_upstream(stack.upstream)
    answer = call(stack.proxy.port, path)
    assert answer.status == 400, (answer.status, answer.body)
    assert seen_by_upstream(stack.upstream) == before


def test_malformed_authorization_is_400_with_its_challenge(stack: Stack) -> None:
    """serve-auth's 400 reaches the client as 400 with error="invalid_request", no Retry-After."""
    before = seen_by_upstream(stack.upstream)
    answer = call(stack.proxy.port, "/projects", f"{stack.project} {stack.project}")
    assert answer.status == 400, (answer.status, answer.body)
    assert answer.headers.get("www-authenticate") == ('ApiKey realm="api", error="invalid_request"')
    assert "retry-after" not in answer.headers
    assert seen_by_upstream(stack.upstream) == before


@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_database_down_and_serve_auth_down_fail_closed(proxy: str, tmp_path: Path) -> None:
    """A missing key database (503) and a dead serve-auth reach the client as 5xx, never 200."""
    started: list[Process] = []
    try:
        started.append(start_upstream(tmp_path))
        missing = f"sqlite:///{tmp_path / 'no-such.db'}"
        started.append(start_serve_auth(tmp_path, missing))
        started.append(PROXIES[proxy](tmp_path, started[1].port, started[0].port))
        key = keyformat.generate()[1]  # well-formed, so only the database could judge it
        answer = call(started[2].port, "/projects", key)
        assert answer.status == 503, (answer.status, answer.body)
        assert answer.headers.get("retry-after") == "5"
        started[1].stop()  # serve-auth gone: nothing answers the proxy's question
        answer = call(started[2].port, "/projects", key)
        expected = 503 if proxy == "nginx" else 502
        assert answer.status == expected, (answer.status, answer.body)
        if proxy == "nginx":  # no answer to pass on: nginx's own
            assert answer.headers.get("retry-after") == "5"
        assert seen_by_upstream(started[0]) == []
    finally:
        for process in reversed(started):
            process.stop()


@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_a_failed_store_of_counts_reaches_the_client_as_503_with_serve_auths_retry_after(
    proxy: str, tmp_path: Path
) -> None:
    """A limited key whose store of counts is down gets serve-auth's 503 and its Retry-After
    (1 s: the store is tried again after a second), not the proxy's own 5 s."""
    started: list[Process] = []
    try:
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        key = store.create_key("alice", "m", ["project"], limits=[parse_limit("5/m")]).plaintext
        store.close()
        dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        started.append(start_upstream(tmp_path))
        started.append(start_serve_auth(tmp_path, url, options=["--limits-url", dead]))
        started.append(PROXIES[proxy](tmp_path, started[1].port, started[0].port))
        answer = call(started[2].port, "/projects", key)
        assert answer.status == 503, (answer.status, answer.body)
        assert answer.headers.get("retry-after") == "1"
        assert seen_by_upstream(started[0]) == []
    finally:
        for process in reversed(started):
            process.stop()


def test_a_spent_limit_reaches_the_client_as_429_with_its_fields(stack: Stack) -> None:
    """A key limited to 3 per window gets 3 requests to the upstream, then 429s that carry
    Retry-After, RateLimit-Policy and RateLimit (parsed as structured fields) and a problem."""
    from http_sfv.list import List

    before = seen_by_upstream(stack.upstream)
    answers = [call(stack.proxy.port, f"/projects/metered-{n}", stack.metered) for n in range(6)]
    reached = [p for p in seen_by_upstream(stack.upstream)[len(before) :] if "metered" in p]
    assert [a.status for a in answers] == [200, 200, 200, 429, 429, 429]
    assert len(reached) == 3
    for answer in answers[3:]:
        assert int(answer.headers["retry-after"]) >= 1
        assert answer.headers["cache-control"] == "no-store"
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert json.loads(answer.body)["status"] == 429
        policy, now = List(), List()
        policy.parse(answer.headers["ratelimit-policy"].encode())
        now.parse(answer.headers["ratelimit"].encode())
        assert [(i.value, dict(i.params)) for i in policy] == [
            ("key:3/30d", {"q": 3, "w": 30 * 86400})
        ]
        assert [(i.value, i.params["r"]) for i in now] == [("key:3/30d", 0)]
        assert now[0].params["t"] == int(answer.headers["retry-after"])
