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
from typing import Any, ClassVar

from django.http import HttpResponse
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    MissingKeyError,
    VerifierUnavailableError,
)
from apikey_tui.integrations.django import get_verifier, problem_response
from apikey_tui.verifier import Caller, Verifier

_ERROR = "_apikey_error"  # where authenticate() leaves its refusal for authenticate_header()


class ApiKeyUser:
    """`request.user` for a request with a valid key: the key's owner, not a Django user.

    Authenticated and active, never staff or superuser, with no Django permissions: nothing
    is read from or written to django.contrib.auth's tables. `caller` is the whole Caller.
    `pk` and `id` are "apikey:<owner>": DRF's UserRateThrottle and ScopedRateThrottle key
    their buckets on request.user.pk, so each owner (all of its keys) gets one bucket, and
    the prefix keeps it apart from any Django user's integer or UUID pk.
    """

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.username = caller.owner
        self.pk = self.id = f"apikey:{caller.owner}"

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
# middleware does; DRF's own handler renders `detail` (the problem fields) as JSON.


class ApiKeyRefused(exceptions.AuthenticationFailed):  # type: ignore[misc]
    """A 400 or 401 from the verifier; DRF adds the WWW-Authenticate challenge to it."""

    def __init__(self, error: AuthError, realm: str) -> None:
        super().__init__(str(error))
        self.error, self.realm = error, realm
        self.status_code, self.detail = error.status, error.problem()


class ApiKeyUnavailable(exceptions.APIException):  # type: ignore[misc]
    """503: the key database cannot be asked (Retry-After: 5, no challenge)."""

    status_code = 503
    wait = 5

    def __init__(self, error: AuthError, realm: str) -> None:
        super().__init__(str(error))
        self.error, self.realm, self.detail = error, realm, error.problem()


class ApiKeyForbidden(exceptions.PermissionDenied):  # type: ignore[misc]
    """403: a valid key without every scope the view needs; names the missing ones."""

    def __init__(self, error: InsufficientScopeError, realm: str) -> None:
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
        """Check the key (no scopes here: HasScopes asks for them)."""
        verifier = self.verifier or get_verifier()
        try:
            caller = verifier.verify(request.META.get("HTTP_AUTHORIZATION"))
        except MissingKeyError:
            return None
        except AuthError as error:
            setattr(request, _ERROR, error)
            if isinstance(error, VerifierUnavailableError):
                raise ApiKeyUnavailable(error, verifier.realm) from None
            raise ApiKeyRefused(error, verifier.realm) from None
        return ApiKeyUser(caller), caller

    def authenticate_header(self, request: Request) -> str:
        """The challenge of this request's refusal, or the bare one; so DRF answers 401."""
        realm = (self.verifier or get_verifier()).realm
        error = getattr(request, _ERROR, None) or MissingKeyError()
        return error.challenge(realm) or f'ApiKey realm="{realm}"'


class HasScopes(BasePermission):  # type: ignore[misc]
    """Allow a request whose key holds every scope the view requires, else 403 naming them.

    The scopes: `HasScopes.of("serving", "project")`, or a view's `required_scopes`. Without
    a key (request.auth is not a Caller) DRF answers 401 with the ApiKey challenge.
    """

    scopes: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def of(cls, *scopes: str) -> type[HasScopes]:
        """A HasScopes requiring these scopes."""
        return type(f"HasScopes_{'_'.join(scopes) or 'any'}", (cls,), {"scopes": scopes})

    def has_permission(self, request: Request, view: Any) -> bool:
        """True when the key holds them all; raises the 403 naming the missing ones."""
        caller = request.auth
        if not isinstance(caller, Caller):
            return False  # DRF: 401 when an authenticator could have answered, else 403
        required = {*self.scopes, *getattr(view, "required_scopes", ())}
        missing = sorted(required - caller.scopes)
        if missing:
            authenticator = request.successful_authenticator
            verifier = getattr(authenticator, "verifier", None) or get_verifier()
            raise ApiKeyForbidden(InsufficientScopeError(missing), verifier.realm)
        return True


def exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """DRF's handler, but this package's refusals get their exact problem+json answer.

    Status, WWW-Authenticate (error="invalid_token", scope="…"), Retry-After and body are the
    same as the middleware's. Everything else goes to DRF's own handler.
    """
    if isinstance(exc, ApiKeyRefused | ApiKeyUnavailable | ApiKeyForbidden):
        return problem_response(exc.error, exc.realm)
    # Imported here: rest_framework.views loads the authentication classes named in settings
    # while it is being imported, so a module-level import would be circular.
    from rest_framework.views import exception_handler as drf_exception_handler

    response: HttpResponse | None = drf_exception_handler(exc, context)
    return response
