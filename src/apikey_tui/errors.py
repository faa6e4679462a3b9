"""One error tree for the whole package; messages never carry a secret."""

from __future__ import annotations


class ApiKeyError(Exception):
    """Base of every error this package raises on purpose; its message is one line for humans."""


class InvalidInputError(ApiKeyError):
    """A name, owner, scope or description breaks the documented rules."""


class UnknownScopeError(InvalidInputError):
    """A key asked for a scope that is not in the scope catalog."""

    def __init__(self, unknown: list[str], known: list[str]) -> None:
        self.unknown = unknown
        super().__init__(
            f"unknown scope {', '.join(map(repr, unknown))}; "
            f"known scopes: {', '.join(known) or '(none)'}"
        )


class DuplicateKeyNameError(ApiKeyError):
    """The owner already has a key with this name (the database's unique constraint said so)."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(f"{owner!s} already has a key named {name!r}")


class DuplicateOwnerError(ApiKeyError):
    """An owner of this name exists: refused like a duplicate key or scope (exit 1), not a usage
    error, since the name itself follows the rules."""

    def __init__(self, name: str) -> None:
        super().__init__(f"owner {name} exists; change it with `owners change`")


class KeyNotFoundError(ApiKeyError):
    """No key with this owner and name exists (perhaps someone deleted it meanwhile)."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(f"{owner} has no key named {name!r}")


class KeyChangedError(ApiKeyError):
    """The key was recreated (its public id changed) after the admin chose it; nothing was done."""

    def __init__(self, owner: str, name: str) -> None:
        super().__init__(
            f"key {name!r} of {owner} changed meanwhile (it was recreated); nothing was done"
        )


class KeyStateError(ApiKeyError):
    """The key is not in a state that allows this (enabling a key that is not disabled, ending a
    grace that is not running); nothing was done."""


class LifetimePolicyError(ApiKeyError):
    """An expiry beyond the database's maximum lifetime policy (or none under a policy): refused,
    never shortened in silence; nothing was done."""


class DuplicateScopeError(ApiKeyError):
    """The scope catalog already holds this scope."""

    def __init__(self, name: str) -> None:
        super().__init__(f"scope {name!r} already exists")


class ScopeNotFoundError(ApiKeyError):
    """The scope catalog holds no scope of this name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no scope named {name!r}")


class ScopeInUseError(ApiKeyError):
    """A scope cannot be removed while keys still hold it."""

    def __init__(self, name: str, holders: list[str]) -> None:
        self.holders = holders
        shown = ", ".join(holders[:10]) + (
            f" and {len(holders) - 10} more" if len(holders) > 10 else ""
        )
        super().__init__(f"scope {name!r} is still held by: {shown}")


class DatabaseUrlError(InvalidInputError):
    """The database URL cannot be used: unparsable, not SQLite or PostgreSQL, or a bad port."""


class StoreUnavailableError(ApiKeyError):
    """The database could not be reached, or it failed an operation for a reason of its own.

    Every SQLAlchemy and driver error becomes this class or a subclass (`db.database_errors`),
    so a service answers 503 and the CLI prints one line, never a traceback.
    """


class DatabasePermissionError(StoreUnavailableError):
    """The database role (or the Unix user, for a SQLite file) lacks a privilege it needs."""


class DatabaseCorruptError(StoreUnavailableError):
    """The database file is damaged or is not a SQLite database; the server reported corruption."""


class SchemaVersionError(ApiKeyError):
    """The database was made by another release (or is not an apikey-tui database at all)."""


class AuthError(ApiKeyError):
    """A request cannot pass: each subclass knows its HTTP status, challenge and problem body.

    The HTTP mapping lives here, once, so every integration answers alike (RFC 9110 challenges,
    RFC 6750 error codes, RFC 9457 problem bodies). Nothing here ever holds the presented key.
    """

    status = 401
    title = "Unauthorized"
    error_code: str | None = None

    def challenge(self, realm: str) -> str | None:
        """The WWW-Authenticate value for this error, or None when none applies."""
        value = f'ApiKey realm="{realm}"'
        return value + (f', error="{self.error_code}"' if self.error_code else "")

    def problem(self) -> dict[str, object]:
        """The application/problem+json body."""
        return {
            "type": "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": str(self),
        }

    def http_headers(self, realm: str) -> list[tuple[str, str]]:
        """All response headers for this error, content type included."""
        headers = [("content-type", "application/problem+json"), ("cache-control", "no-store")]
        challenge = self.challenge(realm)
        if challenge:
            headers.append(("www-authenticate", challenge))
        return headers

    def response(self, realm: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """Status, headers (content length included) and body, ready for any framework."""
        # Imported here, not at the top: the CLI's `--help` loads this module, and json
        # and http cost it a tenth of starting Python. After the first call, a dict lookup.
        import json

        body = json.dumps(self.problem()).encode()
        return self.status, [*self.http_headers(realm), ("content-length", str(len(body)))], body


class MissingKeyError(AuthError):
    """No Authorization header, or one of another scheme: 401 with a bare challenge."""

    def __init__(self) -> None:
        super().__init__("this endpoint needs an API key: send 'Authorization: ApiKey <key>'")


class MalformedHeaderError(AuthError):
    """The ApiKey header is not exactly one credential of allowed characters: 400."""

    status = 400
    title = "Bad Request"
    error_code = "invalid_request"

    def __init__(self) -> None:
        super().__init__("the Authorization header must be 'ApiKey <key>' with exactly one key")


class InvalidKeyError(AuthError):
    """Unknown key, wrong secret, deleted key or bad checksum: one identical 401 for all."""

    error_code = "invalid_token"

    def __init__(self) -> None:
        super().__init__("the API key is not valid")


class InsufficientScopeError(AuthError):
    """A valid key whose scope lacks APIs this endpoint needs: 403 naming them."""

    status = 403
    title = "Forbidden"
    error_code = "insufficient_scope"

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(f"the API key lacks the scope {', '.join(missing)} for this endpoint")

    def challenge(self, realm: str) -> str | None:
        return f'{super().challenge(realm)}, scope="{" ".join(self.missing)}"'

    def problem(self) -> dict[str, object]:
        return {**super().problem(), "missing_scopes": self.missing}


class NetworkNotAllowedError(AuthError):
    """A valid key used from an address its network rules (or its owner's) refuse: 403.

    The problem `type` is stable (NETWORK_NOT_ALLOWED), so a client can tell it from a scope's
    403; the challenge is the scope refusal's (RFC 6750 has no closer code), with a description.
    The client's address is not echoed: behind proxies it may be a hop the client never saw.
    """

    status = 403
    title = "Forbidden"
    error_code = "insufficient_scope"
    type = "urn:apikey-tui:problem:network-not-allowed"

    def __init__(self) -> None:
        super().__init__("the API key may not be used from this network")

    def challenge(self, realm: str) -> str | None:
        return f'{super().challenge(realm)}, error_description="network not allowed"'

    def problem(self) -> dict[str, object]:
        return {**super().problem(), "type": self.type}


NETWORK_NOT_ALLOWED = NetworkNotAllowedError.type


class VerifierUnavailableError(AuthError):
    """The key database cannot be reached, so no request may pass: 503."""

    status = 503
    title = "Service Unavailable"

    def __init__(self) -> None:
        super().__init__("API keys cannot be checked right now; try again shortly")

    def challenge(self, realm: str) -> str | None:
        return None

    def http_headers(self, realm: str) -> list[tuple[str, str]]:
        return [*super().http_headers(realm), ("retry-after", "5")]


def whole_seconds(seconds: float) -> int:
    """A Retry-After value: whole seconds, rounded up, at least 1 (a client never retries early)."""
    whole = int(seconds)
    return max(1, whole + (whole < seconds))


class RateLimitedError(AuthError):
    """A valid key with its scopes whose limit (its own or its owner's pool) is spent: 429.

    The answer names that limit alone, as a policy of draft-ietf-httpapi-ratelimit-headers
    ('"key:600/m";q=600;w=60' in RateLimit-Policy, '"key:600/m";r=0;t=37' in RateLimit), with
    Retry-After, and an RFC 9457 body: nothing of another key, no count of other callers.
    """

    status = 429
    title = "Too Many Requests"

    def __init__(self, of: str, limit: str, quota: int, window: int, retry_after: float) -> None:
        self.of, self.limit, self.quota, self.window = of, limit, quota, window
        self.retry_after = whole_seconds(retry_after)
        whose = "the API key's" if of == "key" else "the key owner's shared"
        super().__init__(f"{whose} limit of {limit} is used up; try again in {self.retry_after} s")

    @property
    def policy(self) -> str:
        """The policy's name in the RateLimit fields: 'key:600/m' or 'owner:100000/30d'."""
        return f"{self.of}:{self.limit}"

    def challenge(self, realm: str) -> str | None:
        return None  # the key is good: nothing to authenticate again

    def problem(self) -> dict[str, object]:
        return {
            **super().problem(),
            "limit": self.limit,
            "limit_of": self.of,
            "retry_after": self.retry_after,
        }

    def http_headers(self, realm: str) -> list[tuple[str, str]]:
        name = f'"{self.policy}"'  # an sf-string: the limit's text holds no quote or backslash
        return [
            *super().http_headers(realm),
            ("retry-after", str(self.retry_after)),
            ("ratelimit-policy", f"{name};q={self.quota};w={self.window}"),
            ("ratelimit", f"{name};r=0;t={self.retry_after}"),
        ]

    def response(self, realm: str) -> tuple[int, list[tuple[str, str]], bytes]:
        """As AuthError's, kept per everything it says: a spent window answers every caller
        alike for a second of Retry-After at a time, and building it (JSON, the fields) cost a
        429 twice a 401's. The headers are a new list each time (a WSGI server may add to it)."""
        key = (self.of, self.limit, self.quota, self.window, self.retry_after, realm)
        found = _LIMITED_ANSWERS.get(key)
        if found is None:
            if len(_LIMITED_ANSWERS) >= _LIMITED_ANSWERS_MAX:
                _LIMITED_ANSWERS.clear()  # the hot limits' answers come straight back
            found = _LIMITED_ANSWERS[key] = super().response(realm)
        status, headers, body = found
        return status, list(headers), body


_Answer = tuple[int, list[tuple[str, str]], bytes]
# RateLimitedError's answers by (of, limit, quota, window, retry_after, realm): bounded.
_LIMITED_ANSWERS: dict[tuple[str, str, int, int, int, str], _Answer] = {}
_LIMITED_ANSWERS_MAX = 1024


class LimitsUnavailableError(VerifierUnavailableError):
    """The store of limits' counts cannot be reached and limits fail closed: 503 + Retry-After
    (the limiter's retry interval), for a valid key that needed the store."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = whole_seconds(retry_after)
        AuthError.__init__(self, "request limits cannot be checked right now; try again shortly")

    def http_headers(self, realm: str) -> list[tuple[str, str]]:
        return [*AuthError.http_headers(self, realm), ("retry-after", str(self.retry_after))]


class UnsafePathError(AuthError):
    """A request path not in normal form (dot segments, encoded '/', '.' or '\\', controls): 400.

    No key makes such a path safe to match against route rules, so no challenge is sent.
    """

    status = 400
    title = "Bad Request"

    def __init__(self) -> None:
        super().__init__(
            "the request path is not in normal form: dot segments, an encoded '/', '.' or '\\', "
            "backslashes and control characters are refused"
        )

    def challenge(self, realm: str) -> str | None:
        return None


class NoRouteRuleError(AuthError):
    """No route rule covers the path and the middleware refuses unmatched paths: 403."""

    status = 403
    title = "Forbidden"

    def __init__(self) -> None:
        super().__init__("no access rule covers this path")

    def challenge(self, realm: str) -> str | None:
        return None


class LeakRequestError(AuthError):
    """serve-leaks refuses a request and changes nothing: a bad, missing or unknown signature
    (401), a malformed report (400), an unknown path (404) or method (405), a body over the
    limit (413), too many revocations from one address (429), or the database down (503).

    No ApiKey challenge: these endpoints take signed reports, not API keys.
    """

    def __init__(
        self, status: int, detail: str, *, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(detail)
        self.status = status
        from http import HTTPStatus  # see response()

        self.title = HTTPStatus(status).phrase
        self.extra_headers = headers

    def challenge(self, realm: str) -> str | None:
        return None

    def http_headers(self, realm: str) -> list[tuple[str, str]]:
        return [*super().http_headers(realm), *self.extra_headers]
