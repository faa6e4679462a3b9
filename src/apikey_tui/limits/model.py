"""A limit, N requests per DURATION, and the epoch-aligned windows it counts in."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise

from apikey_tui.errors import InvalidInputError
from apikey_tui.names import format_duration, parse_duration

LIMIT_RULE = "write N/DURATION: 10/s, 40/10s, 600/1m or 100000/30d"
COUNT_MAX = 999_999_999  # nine digits, as a duration's number: a count this high is no limit
SUBJECT_MAX = 200  # a store key holds the subject and the window length (`AppliedLimit.key`)
_COUNT = re.compile(r"[1-9]\d{0,8}")
_BARE_UNIT = re.compile(r"[smhd]")


@dataclass(frozen=True, slots=True)
class Limit:
    """At most `count` requests in each window of `seconds`, windows aligned to the Unix epoch.

    Window i covers [i * seconds, (i + 1) * seconds) of the deciding clock (the store's, see
    docs/reference/limits.md): a quota is simply a long window (100000/30d).
    """

    count: int
    seconds: int

    def __post_init__(self) -> None:
        if not 1 <= self.count <= COUNT_MAX or self.seconds < 1:
            raise InvalidInputError(
                f"limit {self.count}/{self.seconds}s is not allowed: {LIMIT_RULE}"
            )

    def __str__(self) -> str:
        return format_limit(self)


def parse_limit(text: str) -> Limit:
    """The limit '10/s', '40/10s', '600/1m' or '100000/30d' means; a bare unit means one of it."""
    value = text.strip()
    count, slash, duration = value.partition("/")
    duration = duration.strip()
    if not slash or not _COUNT.fullmatch(count.strip()):
        raise InvalidInputError(f"limit {text[:40]!a} is not allowed: {LIMIT_RULE}")
    if _BARE_UNIT.fullmatch(duration):
        duration = "1" + duration
    try:
        span = parse_duration(duration)
    except InvalidInputError:
        raise InvalidInputError(f"limit {text[:40]!a} is not allowed: {LIMIT_RULE}") from None
    if span.total_seconds() < 1:
        raise InvalidInputError(f"limit {text[:40]!a} is not allowed: a window of 0 holds nothing")
    return Limit(int(count), int(span.total_seconds()))


def format_limit(limit: Limit) -> str:
    """Write a limit as parse_limit reads it: '10/s' for one unit, '40/10s', '100000/30d'."""
    duration = format_duration(timedelta(seconds=limit.seconds))
    return f"{limit.count}/{duration[1:] if duration[:-1] == '1' else duration}"


def window_of(moment: float, seconds: int) -> int:
    """The index of the epoch-aligned window of `seconds` holding `moment` (Unix seconds)."""
    return int(moment // seconds)


@dataclass(frozen=True, slots=True)
class AppliedLimit:
    """A limit as it applies to one subject ('key:<public id>', 'owner:<owner>'): what the
    verifier passes to `Limiter.admit`, built once per key and kept, so a check allocates nothing.

    Two limits of one subject with the same window share a count (their store key), so a limit
    changed from 10/s to 20/s keeps what the current window has used.
    """

    subject: str
    limit: Limit
    key: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.subject or len(self.subject) > SUBJECT_MAX or not self.subject.isprintable():
            raise InvalidInputError(
                f"a limit's subject must be 1-{SUBJECT_MAX} printable characters"
            )
        object.__setattr__(self, "key", f"{self.subject}:{self.limit.seconds}")


def key_subject(owner: str, name: str) -> str:
    """The subject of a key's own limits: 'key:<owner>/<name>' (both secrets of a rotation,
    and a key recreated under its name, count together)."""
    return f"key:{owner}/{name}"


def owner_subject(owner: str) -> str:
    """The subject of an owner's pool, which every key of the owner draws from."""
    return f"owner:{owner}"


LIMITS_PER_SUBJECT = 8  # a key's (or an owner's) limits: each is a lease to hold per process


def check_limits(limits: Iterable[Limit]) -> tuple[Limit, ...]:
    """A subject's limits in their one order (shortest window first), or one clear line.

    Two limits of one window would share one count (`AppliedLimit.key`), so they are refused.
    """
    ordered = tuple(sorted(limits, key=lambda limit: (limit.seconds, limit.count)))
    if len(ordered) > LIMITS_PER_SUBJECT:
        raise InvalidInputError(f"at most {LIMITS_PER_SUBJECT} limits; nothing was done")
    for first, second in pairwise(ordered):
        if first.seconds == second.seconds:
            raise InvalidInputError(
                f"limits {first} and {second} count in the same window; keep one"
            )
    return ordered


def limits_text(limits: Iterable[Limit]) -> str | None:
    """How the database holds a subject's limits: '10/s 600/m', or None for none."""
    return " ".join(map(format_limit, check_limits(limits))) or None


def limits_of_text(text: str | None) -> tuple[Limit, ...]:
    """The limits a database text holds (`limits_text`); None or '' is none."""
    if not text:  # nearly every key and owner: no generator (a verifier's re-read reads two)
        return ()
    return tuple(parse_limit(part) for part in text.split())
