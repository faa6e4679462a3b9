"""The forward-auth app (serve-auth) called in-process: every answer a proxy can get from it."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from apikey_tui.cli import main
from apikey_tui.errors import UnsafePathError
from apikey_tui.integrations import auth_server, forward_auth
from apikey_tui.integrations.forward_auth import IDENTITY_HEADERS, ForwardAuthApp, original_path
from apikey_tui.integrations.rules_file import load_rules, rules_from_mapping
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, readable
from tests.test_proxies import Process
from tests.throwaway_postgres import free_port

RULES = {
    "unmatched": "deny",
    "route": [
        {"path": "/health", "public": True},
        {"path": "/projects", "scopes": ["project"]},
        {"path": "/models", "scopes": ["serving", "project"]},
        {"path": "/admin", "scopes": ["serving"], "methods": ["DELETE"]},
        {"path": "/admin", "public": True, "methods": ["GET"]},
    ],
}


class Keys:
    def __init__(self, url: str) -> None:
        store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
        try:
            created = store.create_key("alice", "model-client", ["serving", "project"])
            self.both, self.public_id = created.plaintext, created.info.public_id
            self.project = store.create_key("alice", "reports", ["project"]).plaintext
        finally:
            store.close()


@pytest.fixture
def keys(sqlite_url: str) -> Keys:
    """Two keys of alice on a fresh SQLite database: serving+project and project only."""
    return Keys(sqlite_url)


def client(url: str, rules: dict[str, Any] | None = RULES) -> TestClient:
    verifier = Verifier.from_url(url, hasher=CHEAP)
    return TestClient(
        ForwardAuthApp(verifier, None if rules is None else rules_from_mapping(rules))
    )


@pytest.fixture
def ruled(sqlite_url: str, keys: Keys) -> Iterator[TestClient]:
    """The app with the rules above (lifespan runs, so the verifier is closed after)."""
    with client(sqlite_url) as running:
        yield running


def ask(
    c: TestClient,
    uri: str | None,
    key: str | None = None,
    method: str | None = "GET",
    auth: str = "/auth",
    **extra: str,
) -> Any:
    headers = {k.replace("_", "-"): v for k, v in extra.items()}
    if uri is not None:
        headers["X-Forwarded-Uri"] = uri
    if method is not None:
        headers["X-Forwarded-Method"] = method
    if key is not None:
        headers["Authorization"] = f"ApiKey {key}"
    return c.get(auth, headers=headers)


def test_allowed_answer_is_200_with_identity_and_no_key(ruled: TestClient, keys: Keys) -> None:
    """200 (never 202/204) carries owner, key name, public id and scopes, and never the key."""
    for _ in range(2):  # the first check, then the warm path (Verifier.cached)
        answer = ask(ruled, "/models/churn/predict?x=1", keys.both, "POST")
        assert answer.status_code == 200
        assert answer.headers["x-auth-request-user"] == "alice"
        assert answer.headers["x-apikey-name"] == "model-client"
        assert answer.headers["x-apikey-id"] == keys.public_id
        assert answer.headers["x-apikey-scopes"] == "project serving"
        assert answer.headers["cache-control"] == "no-store"
        assert keys.both not in str(answer.headers) and answer.content == b""


def test_no_key_is_401_with_bare_challenge(ruled: TestClient) -> None:
    """No Authorization header is 401 with `WWW-Authenticate: ApiKey realm="api"`."""
    answer = ask(ruled, "/projects")
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'ApiKey realm="api"'


def test_bad_key_is_401_invalid_token(ruled: TestClient, keys: Keys) -> None:
    """A wrong secret is 401 with error="invalid_token", like every other integration."""
    bad = keys.both[:-1] + ("a" if keys.both[-1] != "a" else "b")
    answer = ask(ruled, "/projects", bad)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == 'ApiKey realm="api", error="invalid_token"'


def test_missing_scope_is_403_naming_it(ruled: TestClient, keys: Keys) -> None:
    """A key without `serving` is 403 whose challenge and body name the missing scope."""
    answer = ask(ruled, "/models/x", keys.project, "POST")
    assert answer.status_code == 403
    assert 'error="insufficient_scope", scope="serving"' in answer.headers["www-authenticate"]
    assert answer.json()["missing_scopes"] == ["serving"]


def test_malformed_header_is_400(ruled: TestClient, keys: Keys) -> None:
    """Two keys in one ApiKey header is 400 invalid_request."""
    answer = ruled.get(
        "/auth",
        headers={
            "X-Forwarded-Uri": "/projects",
            "X-Forwarded-Method": "GET",
            "Authorization": f"ApiKey {keys.both} {keys.both}",
        },
    )
    assert answer.status_code == 400
    assert 'error="invalid_request"' in answer.headers["www-authenticate"]


def test_public_route_passes_without_key_with_empty_identity(ruled: TestClient) -> None:
    """A public rule answers 200 with all four identity headers empty (so proxies overwrite)."""
    answer = ask(ruled, "/health")
    assert answer.status_code == 200
    assert [answer.headers[name] for name in IDENTITY_HEADERS] == ["", "", "", ""]


def test_methods_in_rules_come_from_forwarded_method(ruled: TestClient, keys: Keys) -> None:
    """GET /admin is public, DELETE /admin needs `serving`: the forwarded method decides."""
    assert ask(ruled, "/admin", None, "GET").status_code == 200
    assert ask(ruled, "/admin", None, "DELETE").status_code == 401
    assert ask(ruled, "/admin", keys.project, "delete").status_code == 403
    assert ask(ruled, "/admin", None, "GE T").status_code == 400


def test_unmatched_path_is_denied_with_deny_rules(ruled: TestClient, keys: Keys) -> None:
    """unmatched = "deny": a path no rule covers is 403 even with a good key."""
    answer = ask(ruled, "/elsewhere", keys.both)
    assert answer.status_code == 403
    assert answer.json()["detail"] == "no access rule covers this path"


def test_missing_original_request_is_refused_with_rules(ruled: TestClient, keys: Keys) -> None:
    """With rules, no X-Forwarded-Uri (or no method) is a 400 refusal, never an allow."""
    assert ask(ruled, None, keys.both).status_code == 400
    assert ask(ruled, "/health", None, None).status_code == 400
    assert ask(ruled, None, None, "GET", X_Original_URI="/health").status_code == 200


def test_two_original_uris_are_refused(ruled: TestClient) -> None:
    """X-Forwarded-Uri and X-Original-URI with different values are ambiguous: 400."""
    answer = ask(ruled, "/health", None, "GET", X_Original_URI="/projects")
    assert answer.status_code == 400
    answer = ask(ruled, "/health", None, "GET", X_Original_Method="DELETE")
    assert answer.status_code == 400


def test_both_spellings_with_one_value_are_one_request(ruled: TestClient, keys: Keys) -> None:
    """X-Forwarded-Uri and X-Original-URI (and the methods) naming the same request are judged."""
    assert ask(ruled, "/health", None, "GET", X_Original_URI="/health").status_code == 200
    answer = ask(
        ruled, "/models/x", keys.project, "POST", X_Original_URI="/models/x",
        X_Original_Method="POST",
    )  # fmt: skip
    assert answer.status_code == 403


@pytest.mark.parametrize(
    "uri",
    [
        "/health/../models/x",
        "/./models",
        "/health/.",
        "/health/..%2Fmodels",
        "/health%2f..%2fmodels",
        "/health/%2e%2e/models",
        "/health%5cmodels",
        "/health/%252e%252e/models",
        "/health\\..\\models",
        "/health/%00",
        "health",
        "http://example.com/health",
        "/h%C3",  # not UTF-8 once decoded
        "/h\u00e9",  # not ASCII on the wire
        "/health#/../models",  # not origin form: nginx forwards it verbatim
        "/health?x=1#/../models",
        "/health/{x}",
        "/health/a b",
        "/health/..;/models",  # a dot segment once Tomcat strips the parameter
        "/health/..%3b/models",
        "/health/.%3Bx/models",
    ],
)
def test_path_tricks_are_400(ruled: TestClient, uri: str) -> None:
    """Dot segments, encoded separators, backslashes, controls and non-origin forms are 400."""
    answer = ruled.get(
        "/auth",
        headers=[
            (b"x-forwarded-uri", uri.encode("latin-1")),
            (b"x-forwarded-method", b"GET"),
        ],
    )
    assert answer.status_code == 400, answer.text
    assert "www-authenticate" not in answer.headers


OPEN_RULES = {
    "unmatched": "key",
    "route": [
        {"path": "/health", "public": True},
        {"path": "/projects", "scopes": ["project"]},
        {"path": "/admin", "scopes": ["serving"]},
    ],
}


@pytest.mark.parametrize(
    "uri",
    ["/admin;x", "/admin;jsessionid=1", "/admin%3bx", "/admin%3Bx/users", "/ADMIN",
     "/Admin/users", "/aDmIn;x/users", "/;x/admin", "/adm%C4%B1n", "/projects/..;x/x",
     "/admin.json", "/admin.xml", "/Admin.JSON", "/admin/users.json", "/index.php/admin",
     "/app/index.php/admin/users", "/admin~", "/admin%7e", "/admin%7E", "/admin.", "/admin%20",
     "/admin.%20", "/admin%3f", "/admin%3fx=1", "/admin%23", "/admin%23frag"],
)  # fmt: skip
def test_every_reading_of_a_path_needs_its_scopes(sqlite_url: str, keys: Keys, uri: str) -> None:
    """A path that a Java (`;` parameters), case-blind, Rails (`.:format`), PHP (PATH_INFO) or
    Windows (trailing dots and spaces) server reads as /admin needs its scopes, even where
    unmatched paths need only a key."""
    with client(sqlite_url, OPEN_RULES) as c:
        answer = ask(c, uri, keys.project)
        if ".." in uri:
            assert answer.status_code == 400
        else:
            assert answer.status_code == 403, answer.text
            assert answer.json()["missing_scopes"] == ["serving"]
        assert ask(c, uri, keys.both).status_code == (400 if ".." in uri else 200)


def test_a_path_is_public_only_if_every_reading_is(sqlite_url: str, keys: Keys) -> None:
    """Below a public `/`, `/ADMIN` and `/admin;x` need /admin's scopes; `/Docs;v=1` does not."""
    rules = {"route": [{"path": "/", "public": True}, {"path": "/admin", "scopes": ["serving"]}]}
    with client(sqlite_url, rules) as c:
        assert ask(c, "/ADMIN").status_code == 401
        assert ask(c, "/admin;x/y").status_code == 401
        assert ask(c, "/Docs;v=1/x").status_code == 200
    with client(sqlite_url) as c:  # unmatched = "deny": a reading that no rule covers is refused
        assert ask(c, "/HEALTH").status_code == 403
        assert ask(c, "/projects;x", keys.project).status_code == 403


def test_repeated_slashes_need_the_union_of_readings(ruled: TestClient, keys: Keys) -> None:
    """A path with `//` passes only if both readings (as sent, slashes merged) let it pass."""
    assert ask(ruled, "/health//projects").status_code == 200
    assert ask(ruled, "//models/x", keys.both).status_code == 403


def test_fixed_scopes_from_the_auth_url(sqlite_url: str, keys: Keys) -> None:
    """`/auth?scope=serving&scope=project` needs both on any path, which is still checked."""
    with client(sqlite_url, rules=None) as c:
        url = "/auth?scope=serving&scope=project"
        assert ask(c, "/anything", keys.both, auth=url).status_code == 200
        assert ask(c, None, keys.both, None, auth=url).status_code == 200
        assert ask(c, "/anything", keys.project, auth=url).status_code == 403
        assert ask(c, "/a/../b", keys.both, auth=url).status_code == 400
        assert ask(c, "/x", keys.both, auth="/auth?scopes=serving").status_code == 400
        assert ask(c, "/x", keys.both, auth="/auth?scope=Bad!").status_code == 400


def test_fixed_scopes_are_read_once_per_query_and_refusals_every_time(
    sqlite_url: str, keys: Keys
) -> None:
    """An auth URL's query is parsed once and kept (the answers stay those of each query,
    asked in turn); a bad query is refused each time it comes, never kept as a pass."""
    with client(sqlite_url, rules=None) as c:
        for _ in range(3):
            for url, key, status in (
                ("/auth?scope=project", keys.project, 200),
                ("/auth?scope=serving", keys.project, 403),
                ("/auth?scope=serving&scope=project", keys.both, 200),
                ("/auth?scopes=project", keys.both, 400),
                ("/auth?scope=Bad!", keys.both, 400),
            ):
                assert ask(c, "/x", key, auth=url).status_code == status, (url, status)


def test_client_query_leaking_into_auth_url_is_refused(ruled: TestClient, keys: Keys) -> None:
    """A proxy appending the client's `?scope=project` to the auth URL cannot widen access."""
    answer = ask(ruled, "/models/x?scope=project", keys.project, auth="/auth?scope=project")
    assert answer.status_code == 400
    assert "query" in answer.json()["detail"]


def test_without_rules_nothing_passes_but_a_fixed_scope(sqlite_url: str, keys: Keys) -> None:
    """No rules and no scope= parameter: no path is covered, so even the key holding every
    scope is refused (403), and a request that names no path is 400."""
    with client(sqlite_url, rules=None) as c:
        assert ask(c, "/whatever", keys.both).status_code == 403
        assert ask(c, "/whatever").status_code == 403
        assert ask(c, None, keys.both, None).status_code == 400
        assert ask(c, "/whatever", keys.both, auth="/auth?scope=project").status_code == 200


def _raw(app: ForwardAuthApp, method: str, raw_path: bytes, query: bytes, key: str) -> int:
    """Call the app with a hand-made HTTP scope (no client normalises the path)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": raw_path.decode("latin-1"),
        "raw_path": raw_path,
        "query_string": query,
        "headers": [(b"authorization", f"ApiKey {key}".encode())],
    }
    asyncio.run(app(scope, receive, send))
    status: int = sent[0]["status"]
    return status


def test_envoy_prefix_form(sqlite_url: str, keys: Keys) -> None:
    """Envoy asks `/envoy<original path>` with the original method; its query never names scopes."""
    app = ForwardAuthApp(Verifier.from_url(sqlite_url, hasher=CHEAP), rules_from_mapping(RULES))
    try:
        assert _raw(app, "POST", b"/envoy/models/x", b"", keys.both) == 200
        assert _raw(app, "POST", b"/envoy/models/x", b"scope=project", keys.project) == 403
        assert _raw(app, "GET", b"/envoy/projects", b"", keys.project) == 200
        assert _raw(app, "GET", b"/envoy/health/../models", b"", keys.project) == 400
        assert _raw(app, "GET", b"/envoy/models%2Fx", b"", keys.project) == 400
        assert _raw(app, "GET", b"/envoyx/projects", b"", keys.project) == 404
    finally:
        app.verifier.close()


def test_database_down_is_503_never_200(tmp_path: Path, keys: Keys) -> None:
    """A key database that cannot be asked (a missing SQLite file) is 503 with Retry-After."""
    with client(f"sqlite:///{tmp_path / 'missing.db'}") as c:
        answer = ask(c, "/projects", keys.both)
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "5"
        assert "www-authenticate" not in answer.headers
        assert ask(c, "/health").status_code == 200  # public: no key, no database
    assert not (tmp_path / "missing.db").exists()


def test_other_paths_are_404(ruled: TestClient) -> None:
    """Only /auth and /envoy answer: a mistyped auth URL in a proxy is a refusal."""
    assert ruled.get("/", headers={"X-Forwarded-Uri": "/health"}).status_code == 404


def test_rules_file_is_toml(tmp_path: Path) -> None:
    """load_rules reads [[route]] tables; a bad file raises ValueError naming it."""
    good = tmp_path / "rules.toml"
    good.write_text(
        'unmatched = "deny"\n[[route]]\npath = "/models"\nscopes = ["serving"]\n'
        'methods = ["POST"]\n[[route]]\npath = "/health"\npublic = true\n'
    )
    rules = load_rules(good)
    assert rules.required("POST", "/models/x") == ("serving",)
    assert rules.required("GET", "/health") is None
    for text, problem in (
        ("[[route]]\npath = 'models'\n", "literal path"),
        ("[[route]]\npath = '/x'\nscope = ['a']\n", "scope"),
        ("unmatched = 'allow'\n", "unmatched"),
        ("[[route]]\npath = '/x'\nmethods = 'GET'\n", "list of strings"),
        ("[[route]]\npath = '/x'\npublic = true\nscopes = ['serving']\n", "public"),
        ("[[route]\n", "TOML"),
        ("routes = []\n", "unknown setting"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ValueError, match=problem) as raised:
            load_rules(bad)
        assert str(bad) in str(raised.value)
    with pytest.raises(ValueError, match="cannot read"):
        load_rules(tmp_path / "absent.toml")


def test_original_path_decodes_once() -> None:
    """The forwarded URI is decoded once, its query dropped; separators and `#` are refused."""
    assert original_path("/a%20b/c?d=%2F&e=[1]") == "/a b/c"
    for uri in ("/a%2Fb", "/a#b", "/a?b#c", "/a?b c"):
        with pytest.raises(UnsafePathError):
            original_path(uri)


def test_serve_auth_refuses_a_bad_rules_file(tmp_path: Path, sqlite_url: str) -> None:
    """`apikey-tui serve-auth --rules` with a broken file exits 2 with one line, before serving."""
    bad = tmp_path / "rules.toml"
    bad.write_text("[[route]]\npath = 'nope'\n")
    result = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "serve-auth", "--database-url", sqlite_url,
         "--rules", str(bad), "--port", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "rules file" in result.stderr and "Traceback" not in result.stderr


def test_metrics_are_served_at_slash_metrics(sqlite_url: str, keys: Keys) -> None:
    """serve-auth exposes the verifier's Prometheus metrics, counting the checks it answered."""
    with client(sqlite_url) as running:
        assert ask(running, "/models/x/predict", keys.both).status_code == 200
        page = running.get("/metrics")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    assert 'apikey_tui_verifier_checks_total{outcome="ok"} 1.0' in page.text
    assert keys.public_id not in page.text and keys.both not in page.text


def _closed(sock: socket.socket) -> bool:
    """Read until the server closes the connection; False if it stays open for 30 s."""
    sock.settimeout(30)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass  # a reset is a close too
    return True


def _dribbled_until_closed(sock: socket.socket) -> bool:
    """Send a request one byte every 0.2 s; True once the server closes, False after 30 s."""
    payload = b"GET /auth HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200
    for byte in payload[:150]:
        try:
            sock.sendall(bytes([byte]))
        except ConnectionError:
            return True
        has_data = readable(sock, 0.2)
        if has_data and _closed(sock):
            return True
    return False


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_serve_auth_closes_idle_and_slow_connections(
    tmp_path: Path, sqlite_url: str, parser: str
) -> None:
    """A connection that sends nothing, half a request, blank lines or a byte at a time is
    closed, as is an idle one after its answer: --keep-alive-timeout and --header-timeout, with
    either HTTP parser."""
    port = free_port()
    command = [sys.executable, "-m", "apikey_tui", "serve-auth", "--port", str(port),
               "--database-url", sqlite_url, "--keep-alive-timeout", "1",
               "--header-timeout", "1", "--http", parser]  # fmt: skip
    server = Process("serve-auth", command, port, tmp_path)
    sockets: list[socket.socket] = []
    try:
        for _ in range(5):
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=30))
        idle, half, answered, blank, dribbling = sockets
        half.sendall(b"GET /auth?scope=project HTTP/1.1\r\nHost: x\r\n")
        answered.sendall(b"GET /auth?scope=project HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answered.recv(12) == b"HTTP/1.1 401", server.output()
        blank.sendall(b"\r\n")  # begins no request, but is a byte: the clock runs
        assert _dribbled_until_closed(dribbling), server.output()
        for sock in (idle, half, answered, blank):
            assert _closed(sock), server.output()
    finally:
        for sock in sockets:
            sock.close()
        server.stop()


def test_serve_auth_options_reach_the_verifier_and_the_server(
    monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """The verifier's options and the connection timeouts given to serve-auth are the ones used."""
    made: dict[str, Any] = {}

    def fake_create_app(url: str, rules: str | None, **options: Any) -> str:
        made.update(options)
        return "app"

    def fake_serve(app: str, **options: Any) -> None:
        made.update(options)

    monkeypatch.setattr(forward_auth, "create_app", fake_create_app)
    monkeypatch.setattr(auth_server, "serve", fake_serve)
    assert main(["serve-auth", "--database-url", sqlite_url]) == 0
    assert made == {
        "realm": "api",
        "limits_processes": 1,
        "host": "127.0.0.1",
        "port": 9180,
        "keep_alive_timeout": 5,
        "header_timeout": 10,
        "http": "auto",
    }
    made.clear()
    arguments = ["--revocation-bound", "0", "--check-timeout", "0.5", "--check-workers", "2",
                 "--max-pending-checks", "8", "--keep-alive-timeout", "7",
                 "--header-timeout", "3", "--http", "h11", "--limits-url", "redis://127.0.0.1:1/0",
                 "--limits-fail", "open", "--limits-processes", "6"]  # fmt: skip
    assert main(["serve-auth", "--database-url", sqlite_url, *arguments]) == 0
    assert made == {
        "realm": "api",
        "limits_url": "redis://127.0.0.1:1/0",
        "limits_fail": "open",
        "limits_processes": 6,
        "revocation_bound": 0.0,
        "check_timeout": 0.5,
        "check_workers": 2,
        "max_pending_checks": 8,
        "host": "127.0.0.1",
        "port": 9180,
        "keep_alive_timeout": 7,
        "header_timeout": 3,
        "http": "h11",
    }


@pytest.mark.parametrize(
    "arguments",
    [["--revocation-bound", "-1"], ["--revocation-bound", "nan"], ["--check-timeout", "0"],
     ["--check-workers", "0"], ["--max-pending-checks", "x"], ["--keep-alive-timeout", "0"],
     ["--header-timeout", "1.5"], ["--check-workers", "9", "--max-pending-checks", "8"],
     ["--limits-url", "http://cache:6379"], ["--limits-fail", "maybe"],
     ["--limits-processes", "0"]],
)  # fmt: skip
def test_serve_auth_refuses_bad_option_values(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, arguments: list[str]
) -> None:
    """A bad value for a verifier option or a timeout is a usage error (2), in one line."""
    try:
        code = main(["serve-auth", "--database-url", sqlite_url, "--port", "1", *arguments])
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err


def _process_children(pid: int) -> set[int]:
    """The pids whose parent is pid, read from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and int((entry / "stat").read_text().rpartition(")")[2].split()[1]) == pid
            ):
                found.add(int(entry.name))
        except OSError:
            continue  # ended while we looked
    return found


def _serving_pid(server_port: int, client: socket.socket, pids: set[int]) -> int | None:
    """Which of pids holds the server side of the client's TCP connection (from /proc)."""
    client_port = client.getsockname()[1]
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1].split(":")[1], fields[2].split(":")[1]
        if int(local, 16) == server_port and int(remote, 16) == client_port:
            inode = fields[9]
    for pid in pids:
        try:
            links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue
        if f"socket:[{inode}]" in links:
            return pid
    return None


def _status(sock: socket.socket, key: str) -> int:
    """One GET /auth?scope=project with the key on a kept-alive connection; its status."""
    request = f"GET /auth?scope=project HTTP/1.1\r\nHost: x\r\nAuthorization: ApiKey {key}\r\n\r\n"
    sock.sendall(request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the connection"
        head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.mark.slow
def test_serve_auth_workers_each_answer_and_each_refuse_a_deleted_key(
    tmp_path: Path, sqlite_url: str, keys: Keys
) -> None:
    """serve-auth --workers 2 runs two processes, each with its own verifier: both let a key
    pass, and both refuse it once it is deleted."""
    port = free_port()
    command = [sys.executable, "-m", "apikey_tui", "serve-auth", "--port", str(port),
               "--database-url", sqlite_url, "--workers", "2"]  # fmt: skip
    server = Process("serve-auth", command, port, tmp_path)
    by_worker: dict[int, socket.socket] = {}
    opened: list[socket.socket] = []
    try:
        # Each connection stays with the worker that accepted it: open connections until
        # both workers hold one (the kernel hands each accept to either).
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            opened.append(sock)
            assert _status(sock, keys.project) == 200, server.output()
            pid = _serving_pid(port, sock, _process_children(server.process.pid))
            if pid is not None:
                by_worker.setdefault(pid, sock)
            if len(by_worker) == 2:
                break
        assert len(by_worker) == 2, server.output()
        store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR)
        try:
            store.delete_key("alice", "reports")
        finally:
            store.close()
        for sock in by_worker.values():
            assert _status(sock, keys.project) == 401, server.output()
    finally:
        for sock in opened:
            sock.close()
        server.stop()


def test_serve_auth_help_offers_only_its_own_options(capsys: pytest.CaptureFixture[str]) -> None:
    """serve-auth --help lists --database-url and its server options, never --owner or --json
    (it serves every owner's keys and prints no JSON); given, they are usage errors."""
    with pytest.raises(SystemExit):
        main(["serve-auth", "--help"])
    shown = capsys.readouterr().out
    assert "--database-url" in shown and "--rules" in shown
    assert "--owner" not in shown and "--json" not in shown
    with pytest.raises(SystemExit) as refused:
        main(["serve-auth", "--json"])
    assert refused.value.code == 2


def test_a_proxy_sending_no_uri_is_logged_once_per_interval(
    sqlite_url: str, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """Thirty requests from a proxy that sends no X-Forwarded-Uri are thirty 400s but one log
    line (it wrote one per request)."""
    caplog.set_level(logging.WARNING, "apikey_tui")
    with client(sqlite_url) as c:
        for _ in range(30):
            assert ask(c, None, keys.both).status_code == 400
    assert caplog.text.count("fix the proxy") == 1


def test_a_method_override_header_needs_the_rules_of_the_method_it_names(
    sqlite_url: str, keys: Keys
) -> None:
    """A POST naming DELETE in X-HTTP-Method-Override (Rails, Laravel, Express route it as a
    DELETE) needs the DELETE rule's scopes as well; without the header, the POST rule's."""
    rules = {
        "unmatched": "deny",
        "route": [
            {"path": "/posts", "scopes": ["project"]},
            {"path": "/posts", "scopes": ["serving"], "methods": ["DELETE"]},
            {"path": "/health", "public": True},
        ],
    }
    with client(sqlite_url, rules) as running:
        assert ask(running, "/posts/1", keys.project, "POST").status_code == 200
        for header in ("X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"):
            overridden = {header.replace("-", "_"): "DELETE"}
            assert ask(running, "/posts/1", keys.project, "POST", **overridden).status_code == 403
            assert ask(running, "/posts/1", keys.both, "POST", **overridden).status_code == 200
        # A public path is public only if the named method's rule says so too.
        assert (
            ask(running, "/health", None, "POST", X_HTTP_Method_Override="DELETE").status_code
            == 200
        )
        assert (
            ask(running, "/posts/1", keys.project, "POST", X_HTTP_Method_Override="D E").status_code
            == 400
        )
