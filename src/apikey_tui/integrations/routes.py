"""Which scopes each route needs: one rule table shared by the ASGI and WSGI middleware."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from apikey_tui.names import parse_scopes
from apikey_tui.verifier import Verifier

AppT = TypeVar("AppT")


@dataclass(frozen=True)
class Route:
    """Requests whose path is `path` or lies below it (and whose method matches) need `scopes`.

    `public=True` lets requests through without a key (health checks, docs).
    """

    path: str
    scopes: tuple[str, ...] = ()
    methods: frozenset[str] | None = None
    public: bool = False

    def matches(self, method: str, path: str) -> bool:
        """Tell whether a request falls under this route (whole path segments only)."""
        if self.methods is not None and method.upper() not in self.methods:
            return False
        prefix = self.path.rstrip("/")
        return path == self.path or path == prefix or path.startswith(prefix + "/")


def route(
    path: str, *scopes: str, methods: Iterable[str] | None = None, public: bool = False
) -> Route:
    """Build a Route, checking scope names and upper-casing methods."""
    return Route(
        path,
        parse_scopes(scopes),
        frozenset(m.upper() for m in methods) if methods is not None else None,
        public,
    )


class RouteScopes:
    """Find the most specific route for a request; unmatched requests need a key of any scope."""

    def __init__(self, routes: Iterable[Route], default_scopes: Iterable[str] = ()) -> None:
        # Longest path first, routes naming methods before those that do not.
        self.routes = sorted(routes, key=lambda r: (-len(r.path), r.methods is None))
        self.default_scopes = parse_scopes(default_scopes)

    def required(self, method: str, path: str) -> tuple[str, ...] | None:
        """The scopes a request needs, or None when it needs no key at all."""
        for candidate in self.routes:
            if candidate.matches(method, path):
                return None if candidate.public else candidate.scopes
        return self.default_scopes


class RouteGuard(Generic[AppT]):
    """What every middleware holds: the wrapped app, the verifier and the route rules."""

    def __init__(
        self,
        app: AppT,
        verifier: Verifier,
        routes: Iterable[Route] = (),
        default_scopes: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.rules = RouteScopes(routes, default_scopes)
