"""The native Django middleware and the DRF classes, in real Django and DRF, on both databases."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apikey_tui.integrations.routes import route
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Caller, Verifier
from tests.conftest import CHEAP

RULES = [
    route("/health", public=True),
    route("/projects", "project"),
    route("/models", "serving", "project"),
]
MIDDLEWARE = ["apikey_tui.integrations.django.ApiKeyMiddleware"]
APPS = ["django.contrib.contenttypes", "django.contrib.auth", "rest_framework"]
urlpatterns: list[Any] = []  # filled per test; ROOT_URLCONF points here


def configure_django() -> None:
    """Configure Django once per process, compatibly with test_integrations' WSGI test.

    Settings can be configured only once: this base is exactly what that test configures when
    it runs first, so either order works; every test here overrides what it needs.
    """
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            ROOT_URLCONF="tests.test_integrations",
            ALLOWED_HOSTS=["localhost"],
            SECRET_KEY="test-only",
            DEBUG=False,
        )
        django.setup()


@pytest.fixture
def keys(database_url: str) -> tuple[str, str, str]:
    """The database URL, a 'project'-only key and a 'project'+'serving' key."""
    store = KeyStore.open(database_url, hasher=CHEAP)
    project = store.create_key("alice", "proj", ["project"]).plaintext
    both = store.create_key("alice", "both", ["project", "serving"]).plaintext
    store.close()
    return database_url, project, both


@pytest.fixture
def verifier(keys: tuple[str, str, str]) -> Iterator[Verifier]:
    """A verifier on the keys' database."""
    checker = Verifier.from_url(keys[0], hasher=CHEAP)
    yield checker
    checker.close()


def auth(key: str) -> dict[str, str]:
    """The Authorization header for key, for the test clients' headers=."""
    return {"Authorization": f"ApiKey {key}"}


def wrong(key: str) -> str:
    """The key with its last character changed: never the key itself."""
    return key[:-1] + ("b" if key[-1] == "a" else "a")


def plain_views() -> list[Any]:
    """Plain Django views showing who called (from the middleware's request.apikey)."""
    from django.http import HttpRequest, HttpResponse
    from django.urls import path

    def who(request: HttpRequest) -> HttpResponse:
        caller: Caller = request.apikey
        return HttpResponse(f"{caller.owner}/{caller.key_name}")

    def health(request: HttpRequest) -> HttpResponse:
        return HttpResponse("ok")

    return [path("health", health), path("projects", who), path("models/m/predict", who)]


def test_middleware_answers_per_route(keys: tuple[str, str, str], verifier: Verifier) -> None:
    """The settings-configured middleware answers 200/401/403/400 and sets request.apikey."""
    configure_django()
    from django.test import Client, override_settings

    _, project, both = keys
    urlpatterns[:] = plain_views()
    with override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        MIDDLEWARE=MIDDLEWARE,
        APIKEY_TUI={"VERIFIER": verifier, "ROUTES": RULES},
    ):
        client = Client()
        assert client.get("/health").content == b"ok"
        missing = client.get("/projects")
        assert missing.status_code == 401
        assert missing["WWW-Authenticate"] == 'ApiKey realm="api"'
        assert missing["Content-Type"] == "application/problem+json"
        assert client.get("/projects", headers=auth(project)).content == b"alice/proj"
        forbidden = client.get("/models/m/predict", headers=auth(project))
        assert forbidden.status_code == 403
        assert json.loads(forbidden.content)["missing_scopes"] == ["serving"]
        assert 'scope="serving"' in forbidden["WWW-Authenticate"]
        assert client.get("/models/m/predict", headers=auth(both)).content == b"alice/both"
        bad = client.get("/projects", headers=auth(wrong(both)))
        assert bad.status_code == 401 and 'error="invalid_token"' in bad["WWW-Authenticate"]
        assert client.get("/projects", headers={"Authorization": "ApiKey a b"}).status_code == 400
        # Below a mount point the rules match the path under it (path_info), like WSGI.
        mounted = client.get("/models/m/predict", SCRIPT_NAME="/api", headers=auth(project))
        assert mounted.status_code == 403


def test_middleware_reads_serve_auths_rules_file(
    tmp_path: Path, keys: tuple[str, str, str], verifier: Verifier
) -> None:
    """RULES_FILE gives the middleware serve-auth's TOML rules; with ROUTES as well, or a bad
    file, it is ImproperlyConfigured."""
    configure_django()
    from django.core.exceptions import ImproperlyConfigured
    from django.test import Client, override_settings

    from apikey_tui.integrations.django import ApiKeyMiddleware

    _, project, both = keys
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'unmatched = "deny"\n[[route]]\npath = "/health"\npublic = true\n'
        '[[route]]\npath = "/models"\nscopes = ["serving"]\n'
    )
    urlpatterns[:] = plain_views()
    settings = {"ROOT_URLCONF": __name__, "ALLOWED_HOSTS": ["testserver"], "MIDDLEWARE": MIDDLEWARE}
    with override_settings(**settings, APIKEY_TUI={"VERIFIER": verifier, "RULES_FILE": rules}):
        client = Client()
        assert client.get("/health").content == b"ok"
        assert client.get("/projects", headers=auth(both)).status_code == 403  # unmatched: deny
        assert client.get("/models/m/predict", headers=auth(project)).status_code == 403
        assert client.get("/models/m/predict", headers=auth(both)).content == b"alice/both"
    for bad in (
        {"VERIFIER": verifier, "RULES_FILE": rules, "ROUTES": RULES},
        {"VERIFIER": verifier, "RULES_FILE": tmp_path / "absent.toml"},
    ):
        with override_settings(APIKEY_TUI=bad), pytest.raises(ImproperlyConfigured):
            ApiKeyMiddleware(lambda request: None)


async def test_middleware_in_an_async_chain(keys: tuple[str, str, str]) -> None:
    """Under ASGI the middleware runs async, builds its verifier from the URL, and answers alike."""
    configure_django()
    from django.test import AsyncClient, override_settings

    from apikey_tui.integrations.django import get_verifier

    url, project, both = keys
    urlpatterns[:] = plain_views()
    with override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        MIDDLEWARE=MIDDLEWARE,
        APIKEY_TUI={"VERIFIER": url, "OPTIONS": {"hasher": CHEAP}, "ROUTES": RULES},
    ):
        try:
            client = AsyncClient()
            assert (await client.get("/projects")).status_code == 401
            assert (await client.get("/projects", headers=auth(project))).content == b"alice/proj"
            again = await client.get("/projects", headers=auth(project))  # now from the cache
            assert again.content == b"alice/proj"
            forbidden = await client.get("/models/m/predict", headers=auth(project))
            assert forbidden.status_code == 403
            assert (await client.get("/models/m/predict", headers=auth(both))).status_code == 200
            assert get_verifier().stats.hits >= 1
        finally:
            get_verifier().close()


def drf_views() -> list[Any]:
    """DRF views: one needing any key, one needing serving+project, one with required_scopes."""
    from django.urls import path
    from rest_framework.permissions import IsAuthenticated
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyUser, HasScopes

    class WhoAmI(APIView):  # type: ignore[misc]
        permission_classes = [IsAuthenticated]

        def get(self, request: Request) -> Response:
            user = request.user
            assert isinstance(user, ApiKeyUser) and user.caller is request.auth
            return Response({"owner": str(user), "key": request.auth.key_name})

    class Predict(APIView):  # type: ignore[misc]
        permission_classes = [HasScopes.of("serving", "project")]

        def post(self, request: Request) -> Response:
            return Response({"key": request.auth.key_name})

    class Projects(APIView):  # type: ignore[misc]
        permission_classes = [HasScopes]
        required_scopes = ("project",)

        def get(self, request: Request) -> Response:
            return Response({"key": request.auth.key_name})

    return [
        path("whoami", WhoAmI.as_view()),
        path("models/m/predict", Predict.as_view()),
        path("projects", Projects.as_view()),
    ]


def drf_settings(verifier: Verifier, **rest: Any) -> Any:
    """override_settings for DRF with ApiKeyAuthentication as the only authentication class."""
    from django.test import override_settings

    return override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=APPS,
        MIDDLEWARE=[],
        APIKEY_TUI={"VERIFIER": verifier},
        REST_FRAMEWORK={
            "DEFAULT_AUTHENTICATION_CLASSES": ["apikey_tui.integrations.drf.ApiKeyAuthentication"],
            "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
            **rest,
        },
    )


def test_drf_authentication_and_scopes(keys: tuple[str, str, str], verifier: Verifier) -> None:
    """DRF answers 401 with the ApiKey challenge (not 403), 403 naming scopes, 200 with the key."""
    configure_django()
    from django.test import Client

    _, project, both = keys
    with drf_settings(verifier):
        urlpatterns[:] = drf_views()
        client = Client()
        missing = client.get("/whoami")
        assert missing.status_code == 401
        assert missing["WWW-Authenticate"] == 'ApiKey realm="api"'
        other = client.get("/whoami", headers={"Authorization": "Bearer abc"})
        assert other.status_code == 401  # another scheme is not ours to refuse: no user
        ok = client.get("/whoami", headers=auth(project))
        assert ok.status_code == 200 and ok.json() == {"owner": "alice", "key": "proj"}
        bad = client.get("/whoami", headers=auth(wrong(project)))
        assert bad.status_code == 401
        assert bad["WWW-Authenticate"] == 'ApiKey realm="api", error="invalid_token"'
        assert bad.json()["detail"] == "the API key is not valid"
        malformed = client.get("/whoami", headers={"Authorization": "ApiKey a b"})
        assert malformed.status_code == 400
        assert 'error="invalid_request"' in malformed["WWW-Authenticate"]
        forbidden = client.post("/models/m/predict", headers=auth(project))
        assert forbidden.status_code == 403
        assert forbidden.json() == {  # the problem fields but status, which DRF makes a string
            "type": "about:blank",
            "title": "Forbidden",
            "detail": "the API key lacks the scope serving for this endpoint",
            "missing_scopes": ["serving"],
        }
        assert client.post("/models/m/predict", headers=auth(both)).json() == {"key": "both"}
        assert client.post("/models/m/predict").status_code == 401
        assert client.get("/projects", headers=auth(project)).json() == {"key": "proj"}
        assert project[10:40] not in bad.content.decode()


def test_drf_exception_handler_answers_problem_json(
    keys: tuple[str, str, str], verifier: Verifier
) -> None:
    """With the package's exception handler, DRF's refusals are the middleware's exact answers,
    the no-key 401 included (no-store, problem+json: DRF's own answer had neither)."""
    configure_django()
    from django.test import Client

    _, project, _both = keys
    with drf_settings(verifier, EXCEPTION_HANDLER="apikey_tui.integrations.drf.exception_handler"):
        urlpatterns[:] = drf_views()
        client = Client()
        bad = client.get("/whoami", headers=auth(wrong(project)))
        assert bad.status_code == 401
        assert bad["Content-Type"] == "application/problem+json"
        assert bad["Cache-Control"] == "no-store"
        forbidden = client.post("/models/m/predict", headers=auth(project))
        assert forbidden.status_code == 403
        assert forbidden["Content-Type"] == "application/problem+json"
        assert forbidden["WWW-Authenticate"] == (
            'ApiKey realm="api", error="insufficient_scope", scope="serving"'
        )
        assert json.loads(forbidden.content) == {
            "type": "about:blank",
            "title": "Forbidden",
            "status": 403,
            "detail": "the API key lacks the scope serving for this endpoint",
            "missing_scopes": ["serving"],
        }
        missing = client.get("/whoami")  # DRF's own NotAuthenticated, answered as ours
        assert missing.status_code == 401 and missing["WWW-Authenticate"] == 'ApiKey realm="api"'
        assert missing["Cache-Control"] == "no-store"
        assert missing["Content-Type"] == "application/problem+json"
        assert json.loads(missing.content)["status"] == 401


def test_drf_database_down_is_503() -> None:
    """A key database that cannot be asked: DRF answers 503 with Retry-After, not 401 or 500."""
    configure_django()
    from django.test import Client

    from apikey_tui import keyformat

    down = Verifier.from_url(
        "postgresql+psycopg://nobody@127.0.0.1:1/none", hasher=CHEAP, revocation_bound=0
    )
    try:
        with drf_settings(down):
            urlpatterns[:] = drf_views()
            _, key = keyformat.generate()
            answer = Client().get("/whoami", headers=auth(key))
            assert answer.status_code == 503
            assert answer["Retry-After"] == "5"
            assert "WWW-Authenticate" not in answer
    finally:
        down.close()


def test_drf_user_rate_throttle_keeps_one_bucket_per_owner(database_url: str) -> None:
    """DRF's UserRateThrottle counts each key owner apart (ApiKeyUser.pk is per owner)."""
    configure_django()
    from django.core.cache import cache
    from django.test import Client
    from django.urls import path
    from rest_framework.permissions import IsAuthenticated
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.throttling import UserRateThrottle
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication

    class TwoPerDay(UserRateThrottle):  # type: ignore[misc]
        rate = "2/day"
        timer = staticmethod(lambda: 1_000_000.0)  # a fixed clock: the window never moves

    class Limited(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication]
        permission_classes = [IsAuthenticated]
        throttle_classes = [TwoPerDay]

        def get(self, request: Request) -> Response:
            return Response({"owner": str(request.user)})

    store = KeyStore.open(database_url, hasher=CHEAP)
    alice = store.create_key("alice", "a", ["project"]).plaintext
    alice_too = store.create_key("alice", "b", ["project"]).plaintext
    bob = store.create_key("bob", "b", ["project"]).plaintext
    store.close()
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        with drf_settings(checker):
            urlpatterns[:] = [path("limited", Limited.as_view())]
            cache.clear()
            client = Client()
            assert client.get("/limited", headers=auth(alice)).status_code == 200
            assert client.get("/limited", headers=auth(alice_too)).status_code == 200
            assert client.get("/limited", headers=auth(alice)).status_code == 429  # one owner
            assert client.get("/limited", headers=auth(bob)).json() == {"owner": "bob"}
    finally:
        checker.close()
        cache.clear()


def test_api_key_user_pk_cannot_meet_a_django_user_pk() -> None:
    """ApiKeyUser's pk and id are 'apikey:<owner>': per owner, never an integer or a UUID."""
    configure_django()
    from apikey_tui.integrations.drf import ApiKeyUser

    user = ApiKeyUser(Caller("alice", "k", "ak" + "a" * 16, frozenset({"project"})))
    assert user.pk == user.id == "apikey:alice"
    assert not user.has_perms(["auth.view_user"]) and not user.has_module_perms("auth")


def test_drf_django_model_permissions_refuse_a_key(
    keys: tuple[str, str, str], verifier: Verifier
) -> None:
    """DjangoModelPermissions asks user.has_perms: an API key holds none, so 403, not 500."""
    configure_django()
    from django.contrib.contenttypes.models import ContentType
    from django.test import Client
    from django.urls import path
    from rest_framework.permissions import DjangoModelPermissions
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    class Types(APIView):  # type: ignore[misc]
        permission_classes = [DjangoModelPermissions]
        queryset = ContentType.objects.all()  # lazy: no query runs

        def post(self, request: Request) -> Response:
            return Response({})

    with drf_settings(verifier):
        urlpatterns[:] = [path("types", Types.as_view())]
        assert Client().post("/types", headers=auth(keys[1])).status_code == 403


@pytest.mark.parametrize(
    "scopes", [(), ("Serving",), (["serving"],)], ids=["none", "not-a-scope-name", "a-list"]
)
def test_has_scopes_of_nothing_or_of_non_scopes_is_improperly_configured(
    scopes: tuple[Any, ...],
) -> None:
    """HasScopes.of() with no scope (which would admit any key) or a non-scope name raises."""
    configure_django()
    from django.core.exceptions import ImproperlyConfigured

    from apikey_tui.integrations.drf import HasScopes

    with pytest.raises(ImproperlyConfigured, match="HasScopes"):
        HasScopes.of(*scopes)


@pytest.mark.parametrize("required", [None, (), "project"], ids=["absent", "empty", "a-string"])
def test_a_bare_has_scopes_without_required_scopes_is_improperly_configured(
    keys: tuple[str, str, str], verifier: Verifier, required: Any
) -> None:
    """A bare HasScopes on a view without a tuple of required_scopes raises, key or not."""
    configure_django()
    from django.core.exceptions import ImproperlyConfigured
    from django.test import Client
    from django.urls import path
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import HasScopes

    class Bare(APIView):  # type: ignore[misc]
        permission_classes = [HasScopes]

        def get(self, request: Request) -> Response:
            return Response({})

    if required is not None:
        Bare.required_scopes = required
    with drf_settings(verifier):
        urlpatterns[:] = [path("bare", Bare.as_view())]
        for headers in ({}, auth(keys[2])):
            with pytest.raises(ImproperlyConfigured, match="required_scopes"):
                Client().get("/bare", headers=headers)


def test_the_verifier_is_found_once_and_again_when_the_setting_changes(sqlite_url: str) -> None:
    """get_verifier reads the APIKEY_TUI setting once (a request does not pay for it), and
    finds the verifier again when the setting changes (override_settings' setting_changed)."""
    configure_django()
    from django.conf import settings
    from django.test import override_settings

    from apikey_tui.integrations.django import get_verifier

    KeyStore.open(sqlite_url, hasher=CHEAP).close()
    first = Verifier.from_url(sqlite_url, hasher=CHEAP)
    second = Verifier.from_url(sqlite_url, hasher=CHEAP)
    try:
        with override_settings(APIKEY_TUI={"VERIFIER": first}):
            assert get_verifier() is first
            settings.APIKEY_TUI["VERIFIER"] = second  # no signal: the found one stays
            assert get_verifier() is first
            with override_settings(APIKEY_TUI={"VERIFIER": second}):
                assert get_verifier() is second
            assert get_verifier() is second  # the outer setting (changed in place) again
    finally:
        first.close()
        second.close()


def test_a_child_forked_while_the_url_verifier_is_built_builds_its_own(sqlite_url: str) -> None:
    """A child forked while a thread of its parent builds the verifier a URL setting names
    (holding the lock of built verifiers) builds its own, never waiting for a lock no thread
    of its own holds (a preloading master importing the app in one thread, say)."""
    import os
    import signal

    from django.test import override_settings

    from apikey_tui.integrations import django as integration

    configure_django()
    with override_settings(APIKEY_TUI={"VERIFIER": sqlite_url}), integration._by_url_lock:
        pid = os.fork()
        if pid == 0:  # exits 0 once it has its verifier; a hang is ended by the alarm
            code = 1
            try:
                signal.alarm(20)
                code = 0 if isinstance(integration.get_verifier(), Verifier) else 1
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_middleware_and_drf_spend_a_request_once(database_url: str) -> None:
    """Behind the middleware, ApiKeyAuthentication takes the caller it checked: a key limited
    to 2 an hour gets 2 requests (not 1), counted twice no more; a scope HasScopes asks for
    beyond the route's is still refused (403)."""
    configure_django()
    from django.test import Client, override_settings
    from django.urls import path
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication, HasScopes
    from apikey_tui.limits import parse_limit

    class Project(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication]
        permission_classes = [HasScopes.of("project")]

        def get(self, request: Request) -> Response:
            return Response({"owner": str(request.user)})

    class Serving(Project):
        permission_classes = [HasScopes.of("serving")]

    store = KeyStore.open(database_url, hasher=CHEAP)
    limit = [parse_limit("2/1h")]
    key = store.create_key("alice", "a", ["project"], limits=limit).plaintext
    checker = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        with drf_settings(checker), override_settings(MIDDLEWARE=MIDDLEWARE):
            urlpatterns[:] = [
                path("projects", Project.as_view()),
                path("serving", Serving.as_view()),
            ]
            client = Client()
            assert client.get("/serving", headers=auth(key)).status_code == 403
            answer = client.get("/projects", headers=auth(key))
            assert answer.status_code == 200, answer.content
            assert client.get("/projects", headers=auth(key)).status_code == 429
            checker.flush()
            usage = store.key_usage("alice", "a")
            assert usage.requests == 2
            assert [(f.missing, f.requests) for f in usage.forbidden] == [(("serving",), 1)]
    finally:
        checker.close()
        store.close()
