"""Django REST framework: an authentication class, a scope permission and a problem+json handler.

    REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": ["apikey_tui.integrations.drf.ApiKeyAuthentication"],
        "EXCEPTION_HANDLER": "apikey_tui.integrations.drf.exception_handler",   # optional
    }
    class Predict(APIView):
        permission_classes = [HasScopes.of("serving", "project")]
        def post(self, request):
            caller: Caller = request.auth          # request.user is an ApiKeyUser

The verifier is the one of settings.APIKEY_TUI (see apikey_tui.integrations.django).
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    InvalidInputError,
    MissingKeyError,
    NetworkNotAllowedError,
    RateLimitedError,
    VerifierUnavailableError,
)
from apikey_tui.integrations.django import (
    get_meta_client,
    get_verifier,
    problem_response,
)
from apikey_tui.integrations.guard import checked_mark
from apikey_tui.names import parse_scopes
from apikey_tui.verifier import Caller, Verifier

_ERROR = "_apikey_error"  # where authenticate() leaves its refusal for authenticate_header()
# The Django requests whose view's permissions authenticate() is reading (_scopes_asked, at a
# view's first request per key scope set): empty nearly always, so every other request pays a
# global's truth test, not a missed attribute lookup on the request (about 0.1 us more).
_ASKING: set[HttpRequest] = set()


class ApiKeyUser:
    """`request.user` for a request with a valid key: the key's owner, not a Django user.

    Authenticated and active, never staff or superuser, with no Django permissions: nothing
    is read from or written to django.contrib.auth's tables. `caller` is the whole Caller.
    `pk` and `id` are "apikey:<owner>": DRF's UserRateThrottle and ScopedRateThrottle key
    their buckets on request.user.pk, so each owner (all of its keys) gets one bucket, and
    the prefix keeps it apart from any Django user's integer or UUID pk.
    """

    # Made at every request: one slot, the rest read from the caller when asked.
    __slots__ = ("caller",)

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    @property
    def username(self) -> str:
        """The key's owner."""
        return self.caller.owner

    @property
    def pk(self) -> str:
        """ "apikey:<owner>": one throttle bucket per owner, apart from any Django user's."""
        return f"apikey:{self.caller.owner}"

    id = pk

    def get_username(self) -> str:
        """The key's owner."""
        return self.caller.owner

    def has_perm(self, perm: str, obj: object = None) -> bool:
        """Django permissions do not apply to API keys: scopes do (HasScopes)."""
        return False

    def has_perms(self, perm_list: Iterable[str], obj: object = None) -> bool:
        """None held (DjangoModelPermissions asks this): scopes apply, not Django permissions."""
        return False

    def has_module_perms(self, app_label: str) -> bool:
        """None held, as has_perm."""
        return False

    def __str__(self) -> str:
        return self.caller.owner


# Each refusal carries the AuthError and realm, so exception_handler can answer exactly as the
# middleware does; DRF's own handler renders `detail` (the problem fields) as JSON. HasScopes'
# 403 is DRF's own PermissionDenied, built from the permission's message and code.


class ApiKeyRefused(exceptions.AuthenticationFailed):  # type: ignore[misc]
    """A 400 or 401 from the verifier; DRF adds the WWW-Authenticate challenge to it."""

    def __init__(self, error: AuthError, realm: str) -> None:
        super().__init__(str(error))
        self.error, self.realm = error, realm
        self.status_code, self.detail = error.status, error.problem()


class ApiKeyLimited(exceptions.Throttled):  # type: ignore[misc]
    """429: the key's limit (or its owner's pool) is spent. A Throttled, so DRF's own handler
    answers 429 with Retry-After too; exception_handler adds the RateLimit fields and body."""

    def __init__(self, error: RateLimitedError, realm: str) -> None:
        super().__init__(wait=error.retry_after, detail=str(error))
        self.error, self.realm = error, realm


class ApiKeyForbidden(exceptions.PermissionDenied):  # type: ignore[misc]
    """403: the key may not be used from the client's network (NetworkNotAllowedError)."""

    def __init__(self, error: AuthError, realm: str) -> None:
        super().__init__(str(error))
        self.error, self.realm, self.detail = error, realm, error.problem()


class ApiKeyUnavailable(exceptions.APIException):  # type: ignore[misc]
    """503: the key database cannot be asked (Retry-After: 5, no challenge)."""

    status_code = 503
    wait = 5

    def __init__(self, error: AuthError, realm: str) -> None:
        super().__init__(str(error))
        self.error, self.realm, self.detail = error, realm, error.problem()


class ApiKeyAuthentication(BaseAuthentication):  # type: ignore[misc]
    """Authenticate `Authorization: ApiKey <key>`: (ApiKeyUser, Caller), or None without one.

    A request with no Authorization header, or one of another scheme, is left to the other
    authentication classes (and is a 401 with the ApiKey challenge if none succeeds and the
    view needs a user: list this class first so DRF asks it for the challenge). An ApiKey
    header that does not check out is refused here: 400, 401 or 503.
    """

    verifier: ClassVar[Verifier | None] = None  # a subclass may set it; else settings

    def authenticate(self, request: Request) -> tuple[ApiKeyUser, Caller] | None:
        """Check the key, and record the request once under the scopes the view's HasScopes
        will ask for (HasScopes decides; the verifier records, as for every integration)."""
        verifier = self.verifier or get_verifier()
        # Django's own request: DRF's Request reaches its attributes through a failed lookup.
        django_request: HttpRequest = request._request
        meta = django_request.META
        # The middleware's mark, looked for only behind the middleware (its `request.apikey`):
        # the mark's name is formatted per verifier, a cost DRF alone would pay per request.
        attributes = django_request.__dict__
        if "apikey" in attributes:
            checked: Caller | None = attributes.get(checked_mark(verifier))
            if checked is not None:
                return self._checked_before(request, verifier, checked)
        try:
            # request_authorization, inline: a call is a tenth of what this class adds.
            caller = verifier.identify(meta.get("HTTP_AUTHORIZATION"))
        except MissingKeyError:
            return None
        except AuthError as error:
            setattr(request, _ERROR, error)
            if isinstance(error, VerifierUnavailableError):
                raise ApiKeyUnavailable(error, verifier.realm) from None
            raise ApiKeyRefused(error, verifier.realm) from None
        if _ASKING and django_request in _ASKING:
            # The view's get_permissions reads request.user: this is DRF authenticating again
            # from inside _scopes_asked; the outer call records the request.
            return ApiKeyUser(caller), caller
        asked = _scopes_asked(request, caller)
        try:
            verifier.authorize(caller, asked, get_meta_client()(meta), django_request.path)
        except InsufficientScopeError:
            pass  # recorded as a 403 for the missing scopes; the permissions answer it
        except NetworkNotAllowedError as error:
            # The key may not be used from here: refused before the view's permissions, as
            # the verifier judges the network before the scopes.
            setattr(request, _ERROR, error)
            raise ApiKeyForbidden(error, verifier.realm) from None
        except RateLimitedError as error:
            # Limits are judged here, after the scopes (the verifier's one decision): a spent
            # limit refuses the request before the view's permissions and throttles run.
            raise ApiKeyLimited(error, verifier.realm) from None
        except VerifierUnavailableError as error:  # the store of counts, failing closed
            raise ApiKeyUnavailable(error, verifier.realm) from None
        return ApiKeyUser(caller), caller

    @staticmethod
    def _checked_before(
        request: Request, verifier: Verifier, caller: Caller
    ) -> tuple[ApiKeyUser, Caller]:
        """authenticate for a request whose key the middleware checked with this verifier: its
        network judged, its limits spent and its use counted there, so only a scope the view
        asks for beyond the route's is judged (recorded as a 403; HasScopes answers it)."""
        if _ASKING and request._request in _ASKING:
            return ApiKeyUser(caller), caller
        asked = _scopes_asked(request, caller)
        if not caller._terms.scopes.issuperset(asked):  # no property call: see Caller
            try:
                verifier.authorize(caller, asked, _spent=True)
            except InsufficientScopeError:
                pass
        return ApiKeyUser(caller), caller

    def authenticate_header(self, request: Request) -> str:
        """The challenge of this request's refusal, or the bare one; so DRF answers 401."""
        realm = (self.verifier or get_verifier()).realm
        error = getattr(request, _ERROR, None) or MissingKeyError()
        return error.challenge(realm) or f'ApiKey realm="{realm}"'


def _scope_names(values: object, where: str) -> tuple[str, ...]:
    """The scope names in values, read as route() reads them, or ImproperlyConfigured."""
    # A lone string is refused: iterating "project" would require the scopes p, r, o, ...
    if not isinstance(values, tuple | list | set | frozenset) or not all(
        isinstance(name, str) for name in values
    ):
        raise ImproperlyConfigured(f"{where} must be a tuple of scope names, such as ('project',)")
    try:
        return parse_scopes(values)
    except InvalidInputError as error:
        raise ImproperlyConfigured(f"{where}: {error}") from None


# Without a scope HasScopes would admit any key: a forgotten argument must not do that.
_NO_SCOPE = (
    "names no scope; for any valid key use IsAuthenticated with ApiKeyAuthentication as the "
    "only authentication class"
)


# HasScopes.required's answers by the permission's scopes, then by the view's required_scopes
# (their values, so scopes changed on a class or set by an instance are the ones required): a
# few per app. Two lookups, not one under a (scopes, scopes) key: that key would be a tuple
# made and hashed at every request.
_REQUIRED: dict[object, dict[object, frozenset[str]]] = {}
_REQUIRED_MAX = 10_000  # a bound on each, should views make their scopes per request


class HasScopes(BasePermission):  # type: ignore[misc]
    """Allow a request whose key holds every scope the view requires, else False.

    The scopes: `HasScopes.of("serving", "project")`, or a view's `required_scopes` (both
    together add up); naming none is ImproperlyConfigured, never "any key". A refusal is
    False, as DRF's composition (|, &, ~) needs: DRF then answers 401 with the ApiKey
    challenge when no authentication class accepted the request, else 403 with `message`,
    which names the missing scopes when HasScopes alone refused (a composed permission gets
    DRF's generic 403, since no one set of scopes is missing then).
    """

    scopes: ClassVar[tuple[str, ...]] = ()
    # Read by DRF's permission_denied after a refusal; each request gets a new instance.
    message: dict[str, object] | str | None = None
    code: str | None = None

    def required(self, view: Any) -> frozenset[str]:
        """The scopes this permission requires on view: its own and the view's.

        Both read at every request (each request asks), the answer kept by their values: a
        tuple of scopes is parsed at its first request; a list, which cannot be a key, every
        time.
        """
        own, given = self.scopes, getattr(view, "required_scopes", ())
        try:
            return _REQUIRED[own][given]
        except (KeyError, TypeError):
            pass
        where = f"{type(view).__name__}.required_scopes"
        found = frozenset({*own, *_scope_names(given, where)})
        try:
            by_given = _REQUIRED.get(own)
            if by_given is None:
                if len(_REQUIRED) >= _REQUIRED_MAX:
                    return found
                by_given = _REQUIRED[own] = {}
            if len(by_given) < _REQUIRED_MAX:
                by_given[given] = found
        except TypeError:  # unhashable (a list)
            pass
        return found

    @classmethod
    def of(cls, *scopes: str) -> type[HasScopes]:
        """A HasScopes requiring these scopes (ImproperlyConfigured for none or a bad name)."""
        names = _scope_names(scopes, "HasScopes.of()")
        if not names:
            raise ImproperlyConfigured(f"HasScopes.of() {_NO_SCOPE}")
        return type(f"HasScopes_{'_'.join(names)}", (cls,), {"scopes": names})

    def has_permission(self, request: Request, view: Any) -> bool:
        """True when the request's key holds them all; otherwise False with a message."""
        # Asked at every request, not taken at the class statement: scopes set on the class
        # later (from settings at start-up), by an instance or a property are the ones required.
        required = self.required(view)
        if not required:
            raise ImproperlyConfigured(
                f"{type(self).__name__} on {type(view).__name__} {_NO_SCOPE}: use "
                "HasScopes.of('scope', ...) or set the view's required_scopes"
            )
        caller = request.auth
        if not isinstance(caller, Caller):
            # DRF answers 401 when no authentication class accepted the request; a request
            # that another class accepted (a session user) is told it needs a key: 403.
            self.message = str(MissingKeyError())
            return False
        if required <= caller._terms.scopes:  # no property call on the request path (Caller)
            return True
        # DRF turns every value of a message into a string: "status" (a number in RFC 9457)
        # is left out; the HTTP status says it. exception_handler answers the problem exactly.
        problem = InsufficientScopeError(sorted(required - caller.scopes)).problem()
        self.message = {name: value for name, value in problem.items() if name != "status"}
        self.code = InsufficientScopeError.error_code
        return False


def _scope_refusal(exc: Exception) -> InsufficientScopeError | None:
    """The refusal DRF raised from HasScopes' message and code, or None for anything else."""
    if not isinstance(exc, exceptions.PermissionDenied) or not isinstance(exc.detail, dict):
        return None
    detail, missing = exc.detail.get("detail"), exc.detail.get("missing_scopes")
    if getattr(detail, "code", None) != InsufficientScopeError.error_code:
        return None
    if not isinstance(missing, list) or not missing:
        return None
    return InsufficientScopeError([str(scope) for scope in missing])


def _realm(request: Request | None) -> str:
    """The realm of the verifier that authenticated the request, else of the settings' one."""
    authenticator = getattr(request, "successful_authenticator", None)
    return (getattr(authenticator, "verifier", None) or get_verifier()).realm


def exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """DRF's handler, but this package's refusals get their exact problem+json answer.

    Status, WWW-Authenticate (error="invalid_token", scope="…"), Retry-After and body are the
    same as the middleware's, the 401 of a request with no key included (when the ApiKey
    challenge is the one DRF sends). Everything else goes to DRF's own handler.
    """
    if isinstance(exc, ApiKeyRefused | ApiKeyUnavailable | ApiKeyLimited | ApiKeyForbidden):
        return problem_response(exc.error, exc.realm)
    if isinstance(exc, exceptions.NotAuthenticated) and str(
        getattr(exc, "auth_header", "")
    ).startswith("ApiKey "):
        # No key, and ours is the challenge DRF chose: the middleware's 401, problem+json and
        # no-store included (DRF's own answer is cacheable {"detail": ...}).
        return problem_response(MissingKeyError(), _realm(context.get("request")))
    forbidden = _scope_refusal(exc)
    if forbidden is not None:
        return problem_response(forbidden, _realm(context.get("request")))
    # Imported here: rest_framework.views loads the authentication classes named in settings
    # while it is being imported, so a module-level import would be circular.
    from rest_framework.views import exception_handler as drf_exception_handler

    response: HttpResponse | None = drf_exception_handler(exc, context)
    return response


_NONE: frozenset[str] = frozenset()


class _Asked:
    """What _scopes_asked remembers of a view class: the permission classes and
    required_scopes it was judged with (the objects themselves), and its answer per key
    scope set."""

    __slots__ = ("by_scopes", "classes", "given")

    def __init__(self, classes: object, given: object) -> None:
        self.classes, self.given = classes, given
        self.by_scopes: dict[frozenset[str], frozenset[str]] = {}


# _scopes_asked's answers by view class: the permissions a view makes by DRF's own
# get_permissions judge a key's scopes the same way at every request, so they are made and
# judged here once per key scope set, and DRF's own check_permissions is the only one to make
# them per request. The view's permission_classes and required_scopes are matched by
# identity (as_view(permission_classes=...) gives each request the same list): a class given
# others is judged again. Bounds, should views make their scopes per request.
_ASKED: dict[type, _Asked] = {}
_ASKED_MAX = 10_000
_SCOPE_SETS_MAX = 1_000


def _scopes_asked(request: Request, caller: Caller) -> frozenset[str]:
    """The scopes a request is recorded under, judged as the view's permissions will judge it
    (all of them must pass). A permission that refuses for want of scopes contributes those
    scopes: the key lacks them, so the request is recorded as a 403 for them. One that passes
    contributes the scopes of each HasScopes the key satisfies in it. Other permissions and
    `~` cannot be judged here and contribute none. Outside a DRF view (no view in the parser
    context): none. Anything the view's own code raises: none (DRF raises it again where it
    always does).
    """
    view = request.parser_context.get("view")
    if view is None:
        return _NONE
    try:
        classes, given = view.permission_classes, getattr(view, "required_scopes", ())
    except Exception:  # the view's own code
        return _NONE
    known = _ASKED.get(type(view))
    if known is not None and known.classes is classes and known.given is given:
        found = known.by_scopes.get(caller._terms.scopes)  # no property call (Caller)
        if found is not None:
            return found
    django_request = request._request
    _ASKING.add(django_request)
    try:
        made = view.get_permissions()
        asked = _NONE
        for permission in made:
            passes, used, missing = _judged(permission, view, caller)
            # A frozenset: the verifier's usage tally takes it as it is (HasScopes.required's)
            found = frozenset(missing if passes is False else used)
            asked = found if not asked else asked | found
    except Exception:
        return _NONE
    finally:
        _ASKING.discard(django_request)
    if _settled(view, made):
        if known is None or known.classes is not classes or known.given is not given:
            if len(_ASKED) >= _ASKED_MAX:
                _ASKED.clear()
            known = _ASKED[type(view)] = _Asked(classes, given)
        if len(known.by_scopes) >= _SCOPE_SETS_MAX:
            known.by_scopes.clear()
        known.by_scopes[caller.scopes] = asked
    return asked


def _settled(view: Any, found: Iterable[object]) -> bool:
    """Whether the permissions found judge every request to view alike for the same key
    scopes: made by DRF's own get_permissions (not one of the view's, which may read the
    request), with HasScopes' own `required` in each."""
    # Imported here, as in exception_handler.
    from rest_framework.views import APIView

    return type(view).get_permissions is APIView.get_permissions and all(
        _fixed(permission) for permission in found
    )


def _fixed(permission: object) -> bool:
    """Whether each HasScopes in a (composed) permission reads its scopes as HasScopes does."""
    if isinstance(permission, HasScopes):
        return type(permission).required is HasScopes.required
    if isinstance(permission, permissions.AND | permissions.OR):
        return _fixed(permission.op1) and _fixed(permission.op2)
    return True


def _judged(
    permission: object, view: Any, caller: Caller
) -> tuple[bool | None, AbstractSet[str], AbstractSet[str]]:
    """Whether a (composed) permission passes on scopes alone (None: it depends on more), the
    scopes it uses if it passes, and the scopes it misses if it refuses."""
    if isinstance(permission, HasScopes):
        required = permission.required(view)
        missing = required - caller.scopes
        if missing and type(permission).has_permission is not HasScopes.has_permission:
            # A has_permission of its own may admit the key without them (reads without the
            # scope): taken for a refusal, the request would be recorded as one and spend no
            # limit though the view answers it.
            return None, set(), set()
        return not missing, set() if missing else required, missing
    if isinstance(permission, permissions.AND | permissions.OR):
        a, b = _judged(permission.op1, view, caller), _judged(permission.op2, view, caller)
        if isinstance(permission, permissions.AND):
            passes = False if False in (a[0], b[0]) else (a[0] and b[0])
        else:
            passes = True if True in (a[0], b[0]) else (None if None in (a[0], b[0]) else False)
        if passes is False:  # the operands that refused say what was missing
            return (
                False,
                set(),
                (a[2] if a[0] is False else set()) | (b[2] if b[0] is False else set()),
            )
        return passes, (a[1] if a[0] else set()) | (b[1] if b[0] else set()), set()
    return None, set(), set()
