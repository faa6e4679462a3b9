"""Which scopes each route needs: one rule table for every integration and serve-auth."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from apikey_tui.errors import NoRouteRuleError
from apikey_tui.integrations.path_readings import fold, is_plain, readings
from apikey_tui.names import parse_scopes

Unmatched = Literal["key", "deny"]

# A rule path is a literal prefix of RFC 3986 path characters without "%" and "*": what a rule
# says is exactly what it matches, so a placeholder, a wildcard or an encoding (which would
# silently never match) fails at start-up instead.
_RULE_PATH = re.compile(r"/|(?:/[A-Za-z0-9\-._~!$&'()+,;=:@]+)+/?")
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|\Z)")
# RFC 9110 method token (tchar), upper-cased.
_METHOD = re.compile(r"[A-Z0-9!#$%&'*+.^_`|~-]+")
# The table key of a rule that names no methods; a real method is never empty.
_ANY_METHOD = ""
# Answers for recent (method, path) pairs are kept, so a hot route costs one dict lookup. The
# client chooses paths: the cache is bounded in entries and in key length (a few MiB at most
# whatever the traffic), and churning it only costs the churner cache misses.
_CACHED_REQUESTS = 2048
_CACHED_KEY_LENGTH = 256


@dataclass(frozen=True)
class Route:
    """Requests whose path is `path` or lies below it (and whose method matches) need `scopes`.

    `public=True` lets requests through without a key (health checks, docs). A rule for GET also
    covers HEAD, which frameworks answer with the GET handler.
    """

    path: str
    scopes: tuple[str, ...] = ()
    methods: frozenset[str] | None = None
    public: bool = False

    def __post_init__(self) -> None:
        if not _RULE_PATH.fullmatch(self.path) or _DOT_SEGMENT.search(self.path):
            raise ValueError(
                f"route path {self.path!r} is not a literal path: it must start with '/' and "
                "hold only letters, digits and -._~!$&'()+,;=:@ with no empty, '.' or '..' "
                "segment (no {placeholders}, * or %: a rule covers every path below it)"
            )
        if self.methods is not None and (
            not self.methods or not all(_METHOD.fullmatch(m) for m in self.methods)
        ):
            raise ValueError(
                f"route {self.path!r}: methods must be a non-empty list of upper-case HTTP "
                f"methods, got {sorted(self.methods)!r}"
            )
        if self.public and self.scopes:
            raise ValueError(f"route {self.path!r} cannot be public and need scopes")
        # "/models/" and "/models" cover the same whole segments.
        object.__setattr__(self, "path", self.path.rstrip("/") or "/")


def route(
    path: str, *scopes: str, methods: Iterable[str] | None = None, public: bool = False
) -> Route:
    """Build a Route, checking the path, the scope names and the methods (ValueError if bad)."""
    if isinstance(methods, str):
        raise ValueError(f"route {path!r}: methods must be a list, like methods=[{methods!r}]")
    return Route(
        path,
        parse_scopes(scopes),
        frozenset(m.upper() for m in methods) if methods is not None else None,
        public,
    )


class RouteScopes:
    """Find the most specific rule for a request: the longest rule path on whole segments.

    At one path, a rule naming the request's method wins over one naming none. A path no rule
    covers needs a key holding `default_scopes` (`unmatched="key"`, the default) or is refused
    with 403 (`unmatched="deny"`).
    """

    def __init__(
        self,
        routes: Iterable[Route],
        default_scopes: Iterable[str] = (),
        *,
        unmatched: Unmatched = "key",
    ) -> None:
        if unmatched not in ("key", "deny"):
            raise ValueError(f"unmatched must be 'key' or 'deny', not {unmatched!r}")
        defaults = parse_scopes(default_scopes)
        if unmatched == "deny" and defaults:
            raise ValueError(
                "default_scopes apply to unmatched paths, which unmatched='deny' refuses"
            )
        self._fallback = Route("/", defaults) if unmatched == "key" else None
        self._table: dict[str, dict[str, Route]] = {}
        for rule in routes:
            entry = self._table.setdefault(rule.path, {})
            for method in sorted(rule.methods) if rule.methods is not None else [_ANY_METHOD]:
                if method in entry:
                    shown = method or "any method"
                    raise ValueError(f"two routes for {shown} on {rule.path!r}")
                entry[method] = rule
        # The same rules keyed by case-blind path, for the case-blind readings of a request.
        self._folded = self._table
        if any(fold(path) != path for path in self._table):
            self._folded = {}
            for path, entry in self._table.items():
                blind = self._folded.setdefault(fold(path), {})
                for method, rule in entry.items():
                    if method in blind:
                        shown = method or "any method"
                        raise ValueError(
                            f"two routes for {shown} on {blind[method].path!r} and {path!r}: a "
                            "server that ignores letter case reads them as one path"
                        )
                    blind[method] = rule
        for entry in [*self._table.values(), *self._folded.values()]:
            if "GET" in entry:
                entry.setdefault("HEAD", entry["GET"])
        # Prefixes longer than every rule path cannot match: the lookup skips them, so a request
        # path of any length costs at most one step per segment of the longest rule.
        self._longest = max(map(len, self._table), default=1)
        # Refusals are exceptions, which the cache never keeps: a path it refuses is re-checked.
        self._cached = functools.lru_cache(maxsize=_CACHED_REQUESTS)(self._resolve)

    def required(self, method: str, path: str) -> tuple[str, ...] | None:
        """The scopes a request needs, or None when it needs no key at all.

        `path` is relative to where the middleware is mounted. Raises UnsafePathError (400) for
        a path not in normal form and NoRouteRuleError (403) for an unmatched path when
        unmatched="deny".
        """
        if len(path) + len(method) <= _CACHED_KEY_LENGTH:
            return self._cached(method, path)
        return self._resolve(method, path)

    def _resolve(self, method: str, path: str) -> tuple[str, ...] | None:
        """`required` without the cache."""
        method = method.upper()
        if self._folded is self._table and is_plain(path):  # its only reading is itself
            return self._need(self._lookup(self._table, method, path))
        # The request must pass the rules of every reading, whichever one the app acts on:
        # public only if all are, else the scopes of all of them.
        needs: set[str] = set()
        public = True
        for reading, blind, cut in readings(path):
            if blind:
                rule = self._lookup(self._folded, method, fold(reading))
            else:
                rule = self._lookup(self._table, method, reading)
            if cut and (rule is None or rule is self._fallback):
                # A cut reading borrows only a rule written for it: what no rule names adds
                # nothing ("/data.json" may be public by a rule while "/data" has none).
                continue
            need = self._need(rule)
            if need is not None:
                public = False
                needs.update(need)
        return None if public else tuple(sorted(needs))

    def _lookup(self, table: dict[str, dict[str, Route]], method: str, path: str) -> Route | None:
        """The rule of the longest rule path that is `path` or a whole-segment prefix of it."""
        if len(path) > self._longest:
            cut = path.rfind("/", 0, self._longest + 1)
            path = path[:cut] if cut > 0 else "/"
        while True:
            entry = table.get(path)
            if entry is not None:
                rule = entry.get(method) or entry.get(_ANY_METHOD)
                if rule is not None:
                    return rule
            if path == "/":
                return self._fallback
            cut = path.rfind("/")
            path = path[:cut] if cut > 0 else "/"

    @staticmethod
    def _need(rule: Route | None) -> tuple[str, ...] | None:
        """What a rule asks of a request; no rule at all (unmatched="deny") is a refusal."""
        if rule is None:
            raise NoRouteRuleError()
        return None if rule.public else rule.scopes
