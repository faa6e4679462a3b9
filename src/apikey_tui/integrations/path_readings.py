"""The readings of a request path: every path a server behind the guard may route it as."""

from __future__ import annotations

import re

from apikey_tui.errors import UnsafePathError

# What a server's decoding can leave in a path that the app, a proxy or a file lookup might
# read differently from us: dot segments, a "/", "." or "\" still percent-encoded, backslashes,
# and C0/DEL control characters. (C1 is allowed: a WSGI PATH_INFO carries UTF-8 bytes as latin-1.)
_UNSAFE = re.compile(r"[\x00-\x1f\x7f\\]|%(?:2[ef]|5c)|/\.\.?(?:/|\Z)", re.IGNORECASE)
_REPEATED_SLASHES = re.compile(r"/{2,}")
# A path parameter, from ";" to the end of its segment: Tomcat, Jetty and Spring route
# "/admin;jsessionid=1/x" as "/admin/x". "%3B" counts too, for a server that decodes first.
_PARAMETERS = re.compile(r"(?:;|%3b)[^/]*", re.IGNORECASE)
# A path every reading leaves as it is: lower-case, no ";", "%", "\", empty or dot-led segment.
_PLAIN = re.compile(r"/(?:[a-z0-9\-_~!$&'()*+,=:@][a-z0-9\-._~!$&'()*+,=:@]*/?)*")
# Non-ASCII letters whose simple case mapping is an ASCII letter: a case-blind compare (.NET's
# OrdinalIgnoreCase, Go's EqualFold) reads "/adm\u0131n" as "/admin". They fold like ASCII.
_ASCII_LOOKALIKES = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def fold(path: str) -> str:
    """The letter-case-blind form of a path (Express, IIS and others ignore case)."""
    return path.translate(_ASCII_LOOKALIKES).lower()


def is_plain(path: str) -> bool:
    """True when every reading of `path` is `path` itself (the fast path of route lookups)."""
    return _PLAIN.fullmatch(path) is not None


def readings(path: str) -> list[tuple[str, bool]]:
    """Every (path, case-blind) pair a server may route `path` as; UnsafePathError if one is bad.

    The path as sent, with repeated slashes merged (Werkzeug does, Starlette does not), with
    `;` parameters stripped from each segment, and every mix of these, each also read blind to
    letter case. A request must pass the rules of all of them, whichever one the app acts on;
    any reading that is not in normal form (`/..;/` is `/../` once the parameter is gone) makes
    the path a 400. An empty path is the mount point itself: "/".
    """
    if not path:
        path = "/"  # a WSGI PATH_INFO or Starlette route path of ""
    found = {path}
    pending = [path]
    while pending:  # finite: each step shortens the path or leaves it as it was
        current = pending.pop()
        for other in (_REPEATED_SLASHES.sub("/", current), _PARAMETERS.sub("", current)):
            if other not in found:
                found.add(other)
                pending.append(other)
    if not path.startswith("/") or any(_UNSAFE.search(reading) for reading in found):
        raise UnsafePathError()
    return [(reading, blind) for reading in sorted(found) for blind in (False, True)]
