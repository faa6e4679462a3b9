"""HasScopes and ApiKeyAuthentication in DRF: composition and upstream's permission behaviours.

Ported from florimondmanca/djangorestframework-api-key (commit 02f68e85d2e5, April 2025):
tests/test_permissions.py, tests/test_permissions_combination.py,
tests/test_permissions_custom.py and the object-permission route of tests/test_test_project.py.
Upstream checks keys in a permission class and answers 403 for every refusal; here an
authentication class checks the key and HasScopes checks scopes, so these answers differ on
purpose (docs/integrations/django.md): no key or another scheme is 401 with the
ApiKey challenge, a wrong, disabled, deleted or expired key is 401 `invalid_token`, an empty
credential is 400 `invalid_request`, and a bad ApiKey header is refused even when another
authentication class would have accepted the request. A key with an extra space before it is
accepted (RFC 9110 allows 1*SP), and `key.lower()` is the key itself (keys are lower case).

Not ported, and why:
- the custom header (API_KEY_CUSTOM_HEADER) and the KeyParser keyword override: keys travel
  only in `Authorization: ApiKey <key>` (the spec fixes the scheme), so there is nothing to set;
- the "retired hero" custom key model: keys here have no user-defined model; disabling a key
  (tested below) is the way to switch one off.
The composition cases of issue 14 (finding 4) are at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, FakeClock
from tests.test_django import APPS, auth, configure_django

CHALLENGE = 'ApiKey realm="api"'
INVALID = 'ApiKey realm="api", error="invalid_token"'
GENERIC_403 = "You do not have permission to perform this action."


class Keys:
    """A store and a verifier on one database and one fake clock, with alice's keys."""

    def __init__(self, store: KeyStore, verifier: Verifier, clock: FakeClock) -> None:
        self.store, self.verifier, self.clock = store, verifier, clock
        self.project = store.create_key("alice", "proj", ["project"]).plaintext
        self.serving = store.create_key("alice", "serve", ["serving"]).plaintext


@pytest.fixture
def keys(database_url: str, clock: FakeClock) -> Iterator[Keys]:
    """alice's 'project' and 'serving' keys, with DRF settings naming the verifier."""
    configure_django()
    from django.test import override_settings

    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    try:
        with override_settings(
            ALLOWED_HOSTS=["testserver"],
            INSTALLED_APPS=APPS,
            APIKEY_TUI={"VERIFIER": verifier},
            REST_FRAMEWORK={
                "DEFAULT_AUTHENTICATION_CLASSES": [
                    "apikey_tui.integrations.drf.ApiKeyAuthentication"
                ],
            },
        ):
            yield Keys(store, verifier, clock)
    finally:
        verifier.close()
        store.close()


def django_user() -> Any:
    """An authenticated django.contrib.auth user (unsaved: no table is needed)."""
    from django.contrib.auth.models import User

    return User(username="foo")


class UserFromHeader:
    """Another authentication class: a Django user for `X-User: foo` (stands in for sessions)."""

    def authenticate(self, request: Any) -> tuple[Any, None] | None:
        return (django_user(), None) if request.META.get("HTTP_X_USER") == "foo" else None

    def authenticate_header(self, request: Any) -> str | None:
        return None


def call(
    permissions: Sequence[Any],
    headers: dict[str, str] | None = None,
    *,
    object_check: bool = False,
    user: Any = None,
    authenticators: Sequence[Any] = (),
) -> Any:
    """GET a fresh APIView with these permission classes; return DRF's Response.

    The authentication classes are ApiKeyAuthentication then `authenticators`; `user` is
    forced in as DRF's test tools do (its authenticators are then not asked).
    """
    from django.test import RequestFactory
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.test import force_authenticate
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication

    class View(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication, *authenticators]
        permission_classes = list(permissions)

        def get(self, request: Request) -> Response:
            if object_check:
                self.check_object_permissions(request, object())
            return Response({"user": str(request.user)})

    request = RequestFactory().get("/test/", headers=headers or {})
    if user is not None:
        force_authenticate(request, user)
    return View.as_view()(request)


def scopes(*names: str) -> Any:
    """HasScopes.of(*names), imported once Django is configured."""
    from apikey_tui.integrations.drf import HasScopes

    return HasScopes.of(*names)


def is_authenticated() -> Any:
    """DRF's IsAuthenticated, imported once Django is configured."""
    from rest_framework.permissions import IsAuthenticated

    return IsAuthenticated


# --- tests/test_permissions.py ----------------------------------------------------------------


def test_a_valid_key_is_granted(keys: Keys) -> None:
    """A valid key holding the scope passes; request.user is its owner."""
    response = call([scopes("project")], auth(keys.project))
    assert response.status_code == 200 and response.data == {"user": "alice"}


def test_no_key_is_401_with_the_challenge(keys: Keys) -> None:
    """No Authorization header: 401 with the ApiKey challenge (upstream: 403)."""
    response = call([scopes("project")])
    assert response.status_code == 401 and response["WWW-Authenticate"] == CHALLENGE


def scramble_public_id(key: str) -> str:
    """The key with the last character of its public id dropped (upstream's scrambled prefix)."""
    public_id, _, secret = key.partition(".")
    return public_id[:-1] + "." + secret


@pytest.mark.parametrize(
    ("modify", "status"),
    [
        pytest.param(lambda _: "", 400, id="empty"),
        pytest.param(lambda _: "abcd", 401, id="not-a-key"),
        pytest.param(lambda _: "foo.bar", 401, id="dotted-not-a-key"),
        pytest.param(lambda key: " " + key, 200, id="extra-space"),
        pytest.param(lambda key: key.upper(), 401, id="upper"),
        pytest.param(lambda key: key.lower(), 200, id="lower-is-the-key"),
        pytest.param(scramble_public_id, 401, id="scrambled-public-id"),
    ],
)
def test_modified_keys(keys: Keys, modify: Callable[[str], str], status: int) -> None:
    """Upstream's modified keys: refused 401 invalid_token (400 when empty); see the header."""
    response = call([scopes("project")], {"Authorization": f"ApiKey {modify(keys.project)}"})
    assert response.status_code == status
    if status == 401:
        assert response["WWW-Authenticate"] == INVALID


@pytest.mark.parametrize("header", ["X-Key {key}", "ApiKey:{key}", "My-Special-ApiKey {key}"])
def test_another_scheme_is_not_ours(keys: Keys, header: str) -> None:
    """A header of another scheme carries no key for us: 401 with the bare challenge."""
    from django.test import RequestFactory
    from rest_framework.request import Request

    from apikey_tui.integrations.drf import ApiKeyAuthentication

    value = header.format(key=keys.project)
    request = Request(RequestFactory().get("/test/", headers={"Authorization": value}))
    assert ApiKeyAuthentication().authenticate(request) is None  # left to other classes
    response = call([scopes("project")], {"Authorization": value})
    assert response.status_code == 401 and response["WWW-Authenticate"] == CHALLENGE


@pytest.mark.parametrize("revoke", ["disable_key", "delete_key"])
def test_a_revoked_key_is_refused(keys: Keys, revoke: str) -> None:
    """A disabled or deleted key: 401 invalid_token (upstream: 403 for its revoked keys)."""
    getattr(keys.store, revoke)("alice", "proj")
    response = call([scopes("project")], auth(keys.project))
    assert response.status_code == 401 and response["WWW-Authenticate"] == INVALID


@pytest.mark.parametrize(("days_later", "status"), [(0, 200), (2, 401)])
def test_expiry(keys: Keys, days_later: int, status: int) -> None:
    """A key expiring in a day works now and is refused two days later (fake clock)."""
    key = keys.store.create_key("alice", "day", ["project"], expires=timedelta(days=1)).plaintext
    keys.clock.at(timedelta(days=days_later).total_seconds())
    assert call([scopes("project")], auth(key)).status_code == status


# --- tests/test_permissions_combination.py -----------------------------------------------------


def test_or_with_is_authenticated_grants_a_django_user_without_a_key(keys: Keys) -> None:
    """HasScopes | IsAuthenticated lets in a Django user who sent no key."""
    response = call([scopes("project") | is_authenticated()], user=django_user())
    assert response.status_code == 200 and response.data == {"user": "foo"}


def test_or_with_is_authenticated_and_a_forced_user_ignores_a_revoked_key(keys: Keys) -> None:
    """With a user forced in (DRF's test tools), a revoked key header is never looked at."""
    keys.store.disable_key("alice", "proj")
    response = call(
        [scopes("project") | is_authenticated()], auth(keys.project), user=django_user()
    )
    assert response.status_code == 200


def test_a_bad_key_is_refused_even_if_another_class_would_authenticate(keys: Keys) -> None:
    """A revoked ApiKey header is 401 though another class accepts the request (fail closed)."""
    keys.store.disable_key("alice", "proj")
    permissions = [scopes("project") | is_authenticated()]
    headers = {**auth(keys.project), "X-User": "foo"}
    assert call(permissions, {"X-User": "foo"}, authenticators=[UserFromHeader]).status_code == 200
    refused = call(permissions, headers, authenticators=[UserFromHeader])
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == INVALID


def test_a_django_user_without_a_key_is_403_where_scopes_are_needed(keys: Keys) -> None:
    """Authenticated by another class but with no key: 403 saying a key is needed, not 401."""
    response = call([scopes("project")], {"X-User": "foo"}, authenticators=[UserFromHeader])
    assert response.status_code == 403
    assert "API key" in response.data["detail"]


# --- tests/test_permissions_custom.py: a key of the wrong kind --------------------------------


def test_a_key_without_the_scope_is_403_naming_it(keys: Keys) -> None:
    """A valid key lacking the scope is 403 naming the missing scope; the right key passes."""
    refused = call([scopes("serving", "project")], auth(keys.project))
    assert refused.status_code == 403
    assert refused.data["missing_scopes"] == ["serving"]
    assert "serving" in refused.data["detail"]
    assert call([scopes("serving")], auth(keys.serving)).status_code == 200


# --- tests/test_test_project.py: object permissions ------------------------------------------


def test_object_permissions(keys: Keys) -> None:
    """check_object_permissions passes for a key with the scope, alone and inside an OR."""
    assert call([scopes("project")], auth(keys.project), object_check=True).status_code == 200
    either = scopes("serving") | scopes("project")
    assert call([either], auth(keys.project), object_check=True).status_code == 200
    assert call([either], auth(keys.serving), object_check=True).status_code == 200


# --- issue 14, finding 4: DRF's |, & and ~ ----------------------------------------------------


@pytest.mark.parametrize("order", ["scopes-first", "is-authenticated-first"])
def test_or_with_is_authenticated_in_either_order(keys: Keys, order: str) -> None:
    """A key lacking the scope passes HasScopes | IsAuthenticated whichever comes first."""
    pair = (scopes("project"), is_authenticated())
    either = pair[0] | pair[1] if order == "scopes-first" else pair[1] | pair[0]
    assert call([either], auth(keys.serving)).status_code == 200


def test_or_of_two_scope_sets(keys: Keys) -> None:
    """HasScopes.of(a) | HasScopes.of(b) admits a key holding either, refuses one holding none."""
    keys.store.add_scope("admin")
    other = keys.store.create_key("alice", "admin", ["admin"]).plaintext
    either = scopes("serving") | scopes("project")
    assert call([either], auth(keys.project)).status_code == 200
    assert call([either], auth(keys.serving)).status_code == 200
    refused = call([either], auth(other))
    # No single set of scopes is missing: DRF's own 403 for a composed permission.
    assert refused.status_code == 403 and refused.data["detail"] == GENERIC_403
    missing = call([either])
    assert missing.status_code == 401 and missing["WWW-Authenticate"] == CHALLENGE


def test_and_and_not(keys: Keys) -> None:
    """& needs both; ~HasScopes admits keys without the scope and refuses keys with it."""
    both = scopes("project") & is_authenticated()
    assert call([both], auth(keys.project)).status_code == 200
    assert call([both], auth(keys.serving)).status_code == 403
    assert call([~scopes("serving")], auth(keys.project)).status_code == 200
    assert call([~scopes("serving")], auth(keys.serving)).status_code == 403
    # DRF's ~ also admits a request with no key at all; with IsAuthenticated it needs one.
    without_serving = is_authenticated() & ~scopes("serving")
    assert call([without_serving], auth(keys.project)).status_code == 200
    assert call([without_serving]).status_code == 401


def test_the_exception_handler_names_scopes_only_for_a_lone_has_scopes(keys: Keys) -> None:
    """With the package's handler a lone HasScopes' 403 is problem+json; a composed one is DRF's."""
    from django.test import override_settings

    handler = "apikey_tui.integrations.drf.exception_handler"
    with override_settings(REST_FRAMEWORK={"EXCEPTION_HANDLER": handler}):
        alone = call([scopes("serving")], auth(keys.project))
        assert alone.status_code == 403
        assert alone["Content-Type"] == "application/problem+json"
        assert alone["WWW-Authenticate"] == (
            'ApiKey realm="api", error="insufficient_scope", scope="serving"'
        )
        composed = call([scopes("serving") & is_authenticated()], auth(keys.project))
        assert composed.status_code == 403 and composed.data["detail"] == GENERIC_403
        assert "WWW-Authenticate" not in composed
        user = call([scopes("serving")], {"X-User": "foo"}, authenticators=[UserFromHeader])
        assert user.status_code == 403 and "API key" in user.data["detail"]


# --- issue 18: usage is recorded under the scopes HasScopes asks for --------------------------


def test_each_request_is_recorded_once_under_the_scopes_has_scopes_asks_for(keys: Keys) -> None:
    """HasScopes' scopes are the request's recorded use (a refusal is a 403 for the missing
    one, inside | the satisfied operand counts), so right-sizing keeps a scope a view uses."""
    assert call([scopes("project")], auth(keys.project)).status_code == 200
    assert call([scopes("serving", "project")], auth(keys.project)).status_code == 403
    assert call([is_authenticated()], auth(keys.project)).status_code == 200
    assert call([scopes("serving") | scopes("project")], auth(keys.project)).status_code == 200
    keys.verifier.flush()
    usage = keys.store.key_usage("alice", "proj")
    assert [(s.scope, s.requests) for s in usage.scopes] == [("project", 2)]
    assert [(f.missing, f.requests) for f in usage.forbidden] == [(("serving",), 1)]
    assert usage.requests == 3


# --- review of issue 18 (usage recorded under HasScopes' scopes) ------------------------------


def test_get_permissions_reading_request_user_answers_without_recursing(keys: Keys) -> None:
    """A view whose get_permissions reads request.user (DRF's usual pattern) answers 200, once
    recorded, rather than recursing through authenticate() into a 500."""
    from django.test import RequestFactory
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication, HasScopes

    class View(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication]

        def get_permissions(self) -> list[Any]:
            if self.request.user.is_staff:  # e.g. staff skip the scope test
                return []
            return [HasScopes.of("project")()]

        def get(self, request: Request) -> Response:
            return Response({"user": str(request.user)})

    request = RequestFactory().get("/test/", headers=auth(keys.project))
    response = View.as_view()(request)
    assert response.status_code == 200
    keys.verifier.flush()
    assert keys.store.key_usage("alice", "proj").requests == 1


def test_a_scope_refusal_inside_and_or_is_recorded_as_forbidden_not_allowed(keys: Keys) -> None:
    """A 403 because the key lacks a scope is a forbidden row whether the view writes
    [A, B] or [A & B] (and A | B refused): never an allowed use of the scope it holds."""
    listed = call([scopes("project"), scopes("serving")], auth(keys.project))
    composed = call([scopes("project") & scopes("serving")], auth(keys.project))
    assert listed.status_code == composed.status_code == 403
    keys.store.add_scope("admin")
    either = call([scopes("serving") | scopes("admin")], auth(keys.project))
    assert either.status_code == 403
    keys.verifier.flush()
    usage = keys.store.key_usage("alice", "proj")
    assert usage.requests == 0  # three 403s: no allowed request
    assert sum(f.requests for f in usage.forbidden) == 3


def test_a_key_from_outside_its_networks_is_403_with_the_network_problem(keys: Keys) -> None:
    """DRF's authentication refuses a key used from outside its network rules (RequestFactory's
    peer is 127.0.0.1) with the network problem, before the view's permissions run."""
    from apikey_tui.errors import NETWORK_NOT_ALLOWED
    from apikey_tui.networks import network_rules

    header = {"Authorization": f"ApiKey {keys.project}"}
    info = keys.store.get_key("alice", "proj")
    keys.store.set_networks_of_keys([info], network_rules(["10.0.0.0/8"]))
    # On PostgreSQL a change reaches the verifier by push, a few ms after the commit.
    response = answer_within(lambda: call([scopes("project")], header), 403)
    assert str(response.data["type"]) == NETWORK_NOT_ALLOWED
    info = keys.store.get_key("alice", "proj")
    keys.store.set_networks_of_keys([info], network_rules(["127.0.0.1"]))
    answer_within(lambda: call([scopes("project")], header), 200)


def answer_within(send: Callable[[], Any], status: int, seconds: float = 10.0) -> Any:
    """The first response with status, sent again until it comes (a hang guard, not a timing
    claim: the push bound is milliseconds); fails with the last response's status."""
    deadline = time.monotonic() + seconds
    response = send()
    while response.status_code != status and time.monotonic() < deadline:
        time.sleep(0.02)
        response = send()
    assert response.status_code == status
    return response


# --- issue 31: the view's permissions are made and judged once per request ----------------------


def test_each_request_makes_and_judges_the_views_permissions_once(keys: Keys) -> None:
    """After a view's first request, each request makes its HasScopes once and asks it once
    (DRF's own check_permissions): the scopes it is recorded under come from a cache, not
    from a second making and judging of the view's permissions."""
    from django.test import RequestFactory
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication

    counts = {"made": 0, "asked": 0}

    class Counted(scopes("project")):  # type: ignore[misc]
        def __init__(self) -> None:
            counts["made"] += 1

        def has_permission(self, request: Request, view: Any) -> bool:
            counts["asked"] += 1
            return bool(super().has_permission(request, view))

    class View(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication]
        permission_classes = [Counted]

        def get(self, request: Request) -> Response:
            return Response({"user": str(request.user)})

    view = View.as_view()
    assert view(RequestFactory().get("/test/", headers=auth(keys.project))).status_code == 200
    counts.update(made=0, asked=0)
    for _ in range(3):
        assert view(RequestFactory().get("/test/", headers=auth(keys.project))).status_code == 200
    assert counts == {"made": 3, "asked": 3}
    keys.verifier.flush()
    usage = keys.store.key_usage("alice", "proj")
    assert [(s.scope, s.requests) for s in usage.scopes] == [("project", 4)]


def test_one_view_class_with_other_permissions_is_recorded_under_its_own(keys: Keys) -> None:
    """Two as_view() of one class with different permission_classes record each request under
    its own permissions' scopes (the remembered scopes are per permission classes, not per
    view class)."""
    from django.test import RequestFactory
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations.drf import ApiKeyAuthentication

    class View(APIView):  # type: ignore[misc]
        authentication_classes = [ApiKeyAuthentication]

        def get(self, request: Request) -> Response:
            return Response({"user": str(request.user)})

    granted = View.as_view(permission_classes=[scopes("project")])
    refused = View.as_view(permission_classes=[scopes("serving")])
    for _ in range(2):
        assert granted(RequestFactory().get("/t/", headers=auth(keys.project))).status_code == 200
        assert refused(RequestFactory().get("/t/", headers=auth(keys.project))).status_code == 403
    keys.verifier.flush()
    usage = keys.store.key_usage("alice", "proj")
    assert [(s.scope, s.requests) for s in usage.scopes] == [("project", 2)]
    assert [(f.missing, f.requests) for f in usage.forbidden] == [(("serving",), 2)]


def test_a_has_scopes_that_reads_its_scopes_its_own_way_is_asked_at_every_request(
    keys: Keys,
) -> None:
    """HasScopes reads its class's own scopes without calling `required` when the view has no
    required_scopes; a subclass with its own `required` is still asked, each request."""
    from apikey_tui.integrations.drf import HasScopes

    asked: list[object] = []

    class ServingOnly(HasScopes):
        def required(self, view: Any) -> frozenset[str]:
            asked.append(view)
            return frozenset({"serving"})

    assert call([ServingOnly], auth(keys.project)).status_code == 403
    assert call([ServingOnly], auth(keys.serving)).status_code == 200
    assert len(asked) >= 2
    assert call([scopes("serving")], auth(keys.project)).status_code == 403
    assert call([scopes("project")], auth(keys.project)).status_code == 200


def test_has_scopes_sees_scopes_set_on_the_class_after_it_was_made(keys: Keys) -> None:
    """A HasScopes subclass whose scopes are set after its class statement (from settings at
    start-up, say) requires those: `_own`, taken in __init_subclass__, kept the first ones
    and let a key without the scope through (200; the release before answered 403)."""
    from apikey_tui.integrations.drf import HasScopes

    class Serving(HasScopes):
        scopes = ("project",)

    Serving.scopes = ("serving",)
    assert call([Serving], auth(keys.project)).status_code == 403
    assert call([Serving], auth(keys.serving)).status_code == 200


def test_has_scopes_sees_scopes_changed_on_the_class_after_its_first_request(keys: Keys) -> None:
    """Scopes changed on the class once it has answered requests are the ones required: the
    answers kept by (class, view scopes) still required the first ones and passed a key that
    holds only those (200)."""
    from apikey_tui.integrations.drf import HasScopes

    class Changing(HasScopes):
        scopes = ("project",)

    assert call([Changing], auth(keys.project)).status_code == 200
    Changing.scopes = ("serving",)
    assert call([Changing], auth(keys.project)).status_code == 403
    assert call([Changing], auth(keys.serving)).status_code == 200


def test_no_request_is_left_marked_as_reading_its_permissions(keys: Keys) -> None:
    """The requests whose permissions authenticate() reads are forgotten after it, whether
    get_permissions answers or raises: none is kept alive, none answered as an inner call."""
    from rest_framework.request import Request
    from rest_framework.response import Response
    from rest_framework.views import APIView

    from apikey_tui.integrations import drf

    class Reads(APIView):  # type: ignore[misc]
        authentication_classes = [drf.ApiKeyAuthentication]

        def get_permissions(self) -> list[Any]:
            if self.request.user.is_staff:
                raise RuntimeError("never: an ApiKeyUser is not staff")
            return [drf.HasScopes.of("project")()]

        def get(self, request: Request) -> Response:
            return Response({})

    class Raises(Reads):
        def get_permissions(self) -> list[Any]:
            raise RuntimeError("the view's own bug")

    from django.test import RequestFactory

    assert (
        Reads.as_view()(RequestFactory().get("/t/", headers=auth(keys.project))).status_code == 200
    )
    assert not drf._ASKING
    with pytest.raises(RuntimeError):
        Raises.as_view()(RequestFactory().get("/t/", headers=auth(keys.project)))
    assert not drf._ASKING


def test_has_scopes_sees_scopes_an_instance_sets(keys: Keys) -> None:
    """`required` reads self.scopes: one set in __init__ (DRF makes a permission per request)
    is the one required; `_own` read the class attribute and passed the wrong key (200)."""
    from apikey_tui.integrations.drf import HasScopes

    class Serving(HasScopes):
        scopes = ("project",)

        def __init__(self) -> None:
            self.scopes = ("serving",)  # type: ignore[misc]

    assert call([Serving], auth(keys.project)).status_code == 403
    assert call([Serving], auth(keys.serving)).status_code == 200


def test_a_has_scopes_subclass_may_compute_its_scopes(keys: Keys) -> None:
    """scopes as a property worked with e5d5384; __init_subclass__'s frozenset(cls.scopes) now
    raises TypeError at the class statement (the app no longer imports)."""
    from apikey_tui.integrations.drf import HasScopes

    class Serving(HasScopes):
        @property
        def scopes(self) -> Any:  # type: ignore[override]
            return ("serving",)

    assert call([Serving], auth(keys.project)).status_code == 403
    assert call([Serving], auth(keys.serving)).status_code == 200


def test_a_has_scopes_that_admits_more_its_own_way_spends_the_keys_limit(keys: Keys) -> None:
    """A HasScopes subclass whose has_permission admits reads without the scope is not taken
    for a refusal: the requests it admits spend the key's limit (they spent none: unlimited)."""
    from rest_framework.permissions import SAFE_METHODS

    from apikey_tui.integrations.drf import HasScopes
    from apikey_tui.limits import parse_limit

    class WriteNeedsAdmin(HasScopes):
        scopes = ("serving",)

        def has_permission(self, request: Any, view: Any) -> bool:
            return request.method in SAFE_METHODS or super().has_permission(request, view)

    limited = keys.store.create_key("alice", "metered", ["project"], limits=[parse_limit("2/1h")])
    answers = [call([WriteNeedsAdmin], auth(limited.plaintext)).status_code for _ in range(4)]
    assert answers == [200, 200, 429, 429]
