"""serve-auth behind real nginx and Caddy, in front of routers that read a path their own way.

A Rails 6.1 router (Debian's ruby-actionpack, under WEBrick) routes `/admin.json` to
`get "/admin"` (every route has an optional `(.:format)`); PHP's built-in server runs a front
controller that routes on `PATH_INFO`, as Symfony and Laravel do, so `/index.php/admin` is
`/admin`. Each upstream says which route a request reached. A key without `admin` must never
reach the admin route, by any spelling, with the rules file's default (a path no rule covers is
refused) and with `unmatched = "key"`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from apikey_tui.store import KeyStore
from tests.conftest import ACTOR, CHEAP
from tests.test_proxies import PROXIES, Process, call, start_serve_auth
from tests.throwaway_postgres import free_port

RAILS_APP = """
require "action_dispatch"
reply = ->(name) { ->(env) { [200, {"Content-Type" => "text/plain"}, ["route:#{name}"]] } }
routes = ActionDispatch::Routing::RouteSet.new
routes.draw do
  get "/health", to: reply.("health")
  get "/projects", to: reply.("projects")
  get "/admin", to: reply.("admin")
end
run routes
"""

PHP_FRONT_CONTROLLER = """<?php
// Routes on PATH_INFO, else the URI's path, as Symfony's and Laravel's front controllers do.
$path = $_SERVER['PATH_INFO'] ?? parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
$routes = ['/health' => 'health', '/projects' => 'projects', '/admin' => 'admin'];
$path = rtrim($path, '/') ?: '/';
if (isset($routes[$path])) { echo 'route:' . $routes[$path]; }
else { http_response_code(404); echo 'no route'; }
"""

RULES = """
[[route]]
path = "/health"
public = true

[[route]]
path = "/projects"
scopes = ["project"]

[[route]]
path = "/admin"
scopes = ["admin"]
"""

# Spellings of /admin a router or a server may read as /admin; the list and more.
SPELLINGS = [
    "/admin", "/admin/", "/admin.json", "/admin.xml", "/admin.json/", "/ADMIN.JSON", "/Admin",
    "/admin~", "/admin%7e", "/admin%7E", "/admin%3f", "/admin%3fx", "/admin%23", "/admin.",
    "/admin%20", "/admin.%20", "/admin;x", "//admin", "/admin//", "/index.php/admin",
    "/index.php/admin/", "/index.php//admin", "/index.php/admin.json", "/INDEX.PHP/admin",
    "/index.php%2fadmin", "/admin%2ejson", "/health/../admin", "/health.json/../admin",
]  # fmt: skip


def start_rails(folder: Path) -> Process:
    """The Rails router under rackup's WEBrick."""
    (folder / "config.ru").write_text(RAILS_APP)
    port = free_port()
    rackup = shutil.which("rackup") or "/usr/bin/rackup"
    command = [rackup, "-s", "webrick", "-o", "127.0.0.1", "-p", str(port), "-q",
               str(folder / "config.ru")]  # fmt: skip
    return Process("rails", command, port, folder)


def start_php(folder: Path) -> Process:
    """PHP's built-in server with the front controller as its document root's index.php."""
    public = folder / "public"
    public.mkdir()
    (public / "index.php").write_text(PHP_FRONT_CONTROLLER)
    port = free_port()
    php = shutil.which("php") or "/usr/bin/php"
    return Process("php", [php, "-S", f"127.0.0.1:{port}", "-t", str(public)], port, folder)


UPSTREAMS: dict[str, Callable[[Path], Process]] = {"rails": start_rails, "php": start_php}


@dataclass
class RoutedStack:
    proxy: Process
    upstream: Process
    admin: str  # a key with admin + project
    project: str  # a key with project only


@contextmanager
def routed_stack(folder: Path, proxy: str, upstream: str, rules: str) -> Iterator[RoutedStack]:
    """In folder: a key database with an admin key and a project-only key, the router, serve-auth
    with these rules, and the proxy in front."""
    url = f"sqlite:///{folder / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP, actor=ACTOR)
    try:
        store.add_scope("admin")
        admin = store.create_key("alice", "ops", ["admin", "project"]).plaintext
        project = store.create_key("alice", "reports", ["project"]).plaintext
    finally:
        store.close()
    started: list[Process] = []
    try:
        started.append(UPSTREAMS[upstream](folder))
        started.append(start_serve_auth(folder, url, rules))
        started.append(PROXIES[proxy](folder, started[1].port, started[0].port))
        yield RoutedStack(started[2], started[0], admin, project)
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture(
    scope="module",
    params=[(p, u, m) for p in sorted(PROXIES) for u in sorted(UPSTREAMS) for m in ("", "key")],
    ids=lambda p: "-".join(x for x in p if x) + ("" if p[2] else "-default"),
)
def routed(request: pytest.FixtureRequest) -> Iterator[RoutedStack]:
    """A proxy, serve-auth with RULES (the file's default, or unmatched = "key") and a router."""
    proxy, upstream, mode = request.param
    rules = RULES if not mode else f'unmatched = "{mode}"\n' + RULES
    with tempfile.TemporaryDirectory(prefix=f"apikey-{proxy}-{upstream}-") as name:
        with routed_stack(Path(name), proxy, upstream, rules) as stack:
            yield stack


def reached_admin(port: int, path: str, key: str) -> bool:
    """Whether a GET of path (sent as is) with this key reached the upstream's admin route."""
    answer = call(port, path, key)
    return answer.status == 200 and answer.body == b"route:admin"


@pytest.mark.slow
def test_no_spelling_of_admin_reaches_the_admin_route_without_the_scope(
    routed: RoutedStack,
) -> None:
    """A project-only key reaches the admin route by none of the spellings, through the real
    proxy; the router really does route several of them to admin (the admin key's answers),
    so the test is not vacuous with `unmatched = "key"`."""
    port = routed.proxy.port
    leaked = [path for path in SPELLINGS if reached_admin(port, path, routed.project)]
    assert leaked == [], routed.upstream.output()
    assert reached_admin(port, "/admin", routed.admin)
    assert call(port, "/projects", routed.project).status == 200  # the key itself works


@pytest.mark.slow
@pytest.mark.parametrize("proxy", sorted(PROXIES))
def test_the_routers_really_read_these_spellings_as_admin(proxy: str) -> None:
    """With `unmatched = "key"` the admin key reaches the admin route as `/admin.json` (Rails)
    and `/index.php/admin` (PHP): the spellings above are real ways in, not invented ones."""
    for upstream, spelling in (("rails", "/admin.json"), ("php", "/index.php/admin")):
        with tempfile.TemporaryDirectory(prefix=f"apikey-{proxy}-spellings-") as name:
            rules = 'unmatched = "key"\n' + RULES
            with routed_stack(Path(name), proxy, upstream, rules) as stack:
                assert reached_admin(stack.proxy.port, spelling, stack.admin), (
                    stack.upstream.output()
                )
