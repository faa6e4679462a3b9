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
# A path every reading leaves as it is: lower-case, no ";", "%", "\", ".", "~" or empty segment.
# Each repetition starts with its "/", so a path is matched one way only: a pattern that could
# split a segment several ways ("(?:[a-z]+/?)*") backtracks exponentially on "/aaa…a%".
_PLAIN = re.compile(r"/(?:[a-z0-9\-_!$&'()*+,=:@]+(?:/[a-z0-9\-_!$&'()*+,=:@]+)*/?)?")
# A "?" or "#" left in the decoded path: a server that decodes before it splits off the query
# (or a fragment) routes only what comes before it ("/admin%3f" is "/admin").
_QUERY_OR_FRAGMENT = re.compile(r"[?#]")
# What Windows and IIS cut from the end of each segment ("/admin." and "/admin " are "/admin"),
# with "~"; cut without the dots too, so "/x/.. /admin" shows its hidden dot segment. A match
# starts only where a run starts and never gives characters back: tried from inside a run too,
# a long run not at a segment's end cost its length squared.
_TRAILING = re.compile(r"(?<![. ~])[. ~]++(?=/|\Z)")
_TRAILING_BLANKS = re.compile(r"(?<![ ~])[ ~]++(?=/|\Z)")
# A script before PATH_INFO: PHP front controllers (Symfony, Laravel) route "/index.php/admin"
# as "/admin"; so do CGI and ASP.NET handlers.
_SCRIPT = re.compile(
    r"\A.*?/[^/]*?\.(?:php\d?|phtml|cgi|fcgi|pl|py|asp|aspx|ashx|dll|exe)(?=/)", re.IGNORECASE
)
# More readings than this is no real request's path but a flood's: refused (400), so one
# request's cost stays bounded whatever its path.
_MAX_READINGS = 64
# Non-ASCII letters whose simple case mapping is an ASCII letter: a case-blind compare (.NET's
# OrdinalIgnoreCase, Go's EqualFold) reads "/adm\u0131n" as "/admin". They fold like ASCII.
_ASCII_LOOKALIKES = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def fold(path: str) -> str:
    """The letter-case-blind form of a path (Express, IIS and others ignore case)."""
    return path.translate(_ASCII_LOOKALIKES).lower()


def is_plain(path: str) -> bool:
    """True when every reading of `path` is `path` itself (the fast path of route lookups)."""
    return _PLAIN.fullmatch(path) is not None


def _without_format(path: str) -> str:
    """The path without its last segment's format suffix: Rails routes "/admin.json" and
    "/admin.xml" to "/admin" (every route has an optional "(.:format)"), Symfony and DRF's format
    suffixes likewise. The suffix runs from the segment's first dot (not its first character) to
    its end, before one trailing "/". Found by position: a pattern searched for it tried every
    dot of a long segment to its end, the segment's length squared."""
    end = len(path) - 1 if path.endswith("/") else len(path)
    dot = path.find(".", path.rfind("/", 0, end) + 2, end)
    return path if dot < 0 else path[:dot] + path[end:]


def readings(path: str) -> list[tuple[str, bool, bool]]:
    """Every (path, case-blind, cut) reading a server may route `path` as; UnsafePathError if
    one is bad.

    The path as sent, with repeated slashes merged (Werkzeug does, Starlette does not), with
    `;` parameters stripped from each segment, and every mix of these, each also read blind to
    letter case. Then the *cut* readings (cut=True), shorter paths a server may route the request
    to: before a decoded `?` or `#`, without the last segment's format suffix (`/admin.json`),
    without each segment's trailing dots, spaces and `~`, and after a script name
    (`/index.php/admin`). A request must pass the rules of all of them, whichever one the app
    acts on; any reading that is not in normal form (`/..;/` is `/../` once the parameter is
    gone) makes the path a 400, and so does a path with more than 64 readings. An empty path
    is the mount point itself: "/".
    """
    if not path:
        path = "/"  # a WSGI PATH_INFO or Starlette route path of ""
    found = {path: False}
    pending = [path]
    while pending:  # finite: each step shortens the path or leaves it as it was
        current = pending.pop()
        cut = found[current]
        for other, cuts in (
            (_REPEATED_SLASHES.sub("/", current), False),
            (_PARAMETERS.sub("", current), False),
            (_QUERY_OR_FRAGMENT.split(current, 1)[0] or "/", True),
            (_without_format(current), True),
            (_TRAILING.sub("", current), True),
            (_TRAILING_BLANKS.sub("", current), True),
            (_SCRIPT.sub("", current, 1), True),
        ):
            if other not in found:
                if len(found) == _MAX_READINGS:
                    raise UnsafePathError()
                found[other] = cut or cuts
                pending.append(other)
            elif found[other] and not (cut or cuts):  # reached uncut too: so are its own
                found[other] = False
                pending.append(other)
    if not path.startswith("/") or any(_UNSAFE.search(reading) for reading in found):
        raise UnsafePathError()
    return [
        (reading, blind, found[reading]) for reading in sorted(found) for blind in (False, True)
    ]
