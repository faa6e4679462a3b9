"""The example service under real uvicorn, called over HTTP, with keys managed by the CLI."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from apikey_tui.store import KeyStore
from tests.conftest import CHEAP
from tests.throwaway_postgres import ThrowawayPostgres, free_port

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class Service:
    """examples/service.py under uvicorn on 127.0.0.1, in its own process."""

    def __init__(self, database_url: str, revocation_bound: str = "1.0") -> None:
        self.port = free_port()
        self.output = ""
        env = {
            **os.environ,
            "APIKEY_TUI_DATABASE_URL": database_url,
            "APIKEY_TUI_REVOCATION_BOUND": revocation_bound,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(EXAMPLES), "service:app",
             "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the example service did not start:\n{self.output}")

    def call(
        self, method: str, path: str, key: str | None = None, body: bytes | None = None
    ) -> tuple[int, dict[str, str], dict[str, object]]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method=method
        )
        if key is not None:
            request.add_header("Authorization", f"ApiKey {key}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers), json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), json.loads(error.read())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        assert self.process.stdout is not None
        self.output = self.process.stdout.read().decode(errors="replace")[-4000:]
        self.process.stdout.close()


@pytest.fixture
def service(database_url: str) -> Iterator[tuple[Service, str]]:
    """The service on the test database; PostgreSQL asks the database at every check."""
    KeyStore.open(database_url).close()
    running = Service(database_url, revocation_bound="0")
    yield running, database_url
    running.stop()


def cli(database_url: str, *args: str) -> str:
    """Run the real CLI in its own process and return its stdout."""
    result = subprocess.run(
        [sys.executable, "-m", "apikey_tui", "--database-url", database_url,
         "--owner", "alice", *args],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def test_the_walk_from_the_readme(service: tuple[Service, str]) -> None:
    """In scope 200; one scope missing 403 naming it; no key, bad key, deleted key 401."""
    running, url = service
    both = cli(url, "keys", "create", "model-client", "--scope", "serving", "--scope", "project")
    project = cli(url, "keys", "create", "reports", "--scope", "project")
    status, _, body = running.call("GET", "/projects", both)
    assert status == 200 and body["owner"] == "alice"
    status, _, body = running.call("POST", "/models/churn/predict", both, b'{"inputs": [1, 3]}')
    assert (status, body["score"], body["called_by"]) == (200, 2.0, "model-client")
    status, headers, body = running.call("POST", "/models/churn/predict", project, b"{}")
    assert (status, body["missing_scopes"]) == (403, ["serving"])
    assert 'scope="serving"' in headers["www-authenticate"]
    status, headers, _ = running.call("GET", "/projects")
    assert (status, headers["www-authenticate"]) == (401, 'ApiKey realm="api"')
    bad = both[:-1] + ("a" if both[-1] != "a" else "b")
    status, headers, bad_body = running.call("GET", "/projects", bad)
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    # Revocation across processes: the CLI deletes, the running service refuses at once.
    cli(url, "keys", "delete", "model-client")
    status, _, deleted_body = running.call("GET", "/projects", both)
    assert status == 401 and deleted_body == bad_body


def test_recreated_key_replaces_the_old_one_across_processes(service: tuple[Service, str]) -> None:
    """After `keys recreate` in another process, the old key gets 401 and the new one 200."""
    running, url = service
    old = cli(url, "keys", "create", "ci", "--scope", "project")
    assert running.call("GET", "/projects", old)[0] == 200
    new = cli(url, "keys", "recreate", "ci")
    assert running.call("GET", "/projects", old)[0] == 401
    assert running.call("GET", "/projects", new)[0] == 200


def test_a_trailing_slash_is_never_redirected_to_the_host_header(
    service: tuple[Service, str],
) -> None:
    """A path with a trailing slash gets no redirect built from the Host header the client sent."""
    running, url = service
    key = cli(url, "keys", "create", "ci", "--scope", "project")
    for path, headers in (
        ("/health/", {"Host": "evil.example"}),
        ("/projects/", {"Host": "evil.example", "Authorization": f"ApiKey {key}"}),
    ):
        connection = http.client.HTTPConnection("127.0.0.1", running.port, timeout=10)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            response.read()
        finally:
            connection.close()
        assert "evil.example" not in str(response.getheaders()), (path, response.getheaders())


def test_last_used_reaches_the_cli(sqlite_url: str) -> None:
    """A call through the service shows up as last_used_at in `keys list` after it stops."""
    KeyStore.open(sqlite_url).close()
    key = cli(sqlite_url, "keys", "create", "ci", "--scope", "project")
    running = Service(sqlite_url)
    assert running.call("GET", "/projects", key)[0] == 200
    running.stop()  # the lifespan flushes pending last-used times
    [entry] = json.loads(cli(sqlite_url, "keys", "list", "--json"))
    assert entry["last_used_at"] is not None


def test_database_stopped_gives_503(throwaway_postgres: ThrowawayPostgres) -> None:
    """With the service's PostgreSQL stopped, a previously good key gets 503, never 200."""
    store = KeyStore.open(throwaway_postgres.url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    store.close()
    running = Service(throwaway_postgres.url, revocation_bound="0")
    try:
        assert running.call("GET", "/projects", key)[0] == 200
        throwaway_postgres.stop()
        status, headers, body = running.call("GET", "/projects", key)
        assert (status, headers.get("retry-after"), body["status"]) == (503, "5", 503)
    finally:
        running.stop()
