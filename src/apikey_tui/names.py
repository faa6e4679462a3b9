"""Rules for key names, owners, scope names and descriptions: what a terminal may safely show;
and the one way durations (30s, 15m, 24h, 90d) and expiry times are written."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from apikey_tui.errors import InvalidInputError

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import Final, Literal, TypeAlias

    # What an admin may ask for: a span from now, a moment, or no expiry at all.
    Expiry: TypeAlias = timedelta | datetime | Literal["never"]

# ASCII only, no spaces, no brackets: a name can never carry Rich markup, an escape sequence
# or a look-alike character into an admin's terminal, and it is safe in a shell argument.
KEY_NAME_MAX = 64
_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Owners are login names or e-mail style service accounts.
OWNER_MAX = 64
_OWNER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]*")
# Scope names are API names: lower case, ':' allowed for sub-APIs such as 'serving:admin'.
SCOPE_NAME_MAX = 32
_SCOPE_NAME = re.compile(r"[a-z][a-z0-9_:-]*")
DESCRIPTION_MAX = 200


def _check(kind: str, value: str, pattern: re.Pattern[str], maximum: int, rule: str) -> str:
    if not value:
        raise InvalidInputError(f"{kind} is required")
    if len(value) > maximum:
        raise InvalidInputError(f"{kind} is longer than {maximum} characters")
    if not pattern.fullmatch(value):
        raise InvalidInputError(f"{kind} {value!a} is not allowed: {rule}")
    return value


def key_name_problem(name: str) -> str | None:
    """Say what is wrong with a key name, or None if it is fine (for live validation)."""
    try:
        check_key_name(name)
    except InvalidInputError as exc:
        return str(exc)
    return None


def check_key_name(name: str) -> str:
    """Return the key name unchanged if it follows the rules, else raise InvalidInputError."""
    rule = "use ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
    return _check("key name", name, _KEY_NAME, KEY_NAME_MAX, rule)


def check_owner(owner: str) -> str:
    """Return the owner unchanged if it follows the rules, else raise InvalidInputError."""
    rule = "use ASCII letters, digits, '.', '_', '@' or '-', starting with a letter, digit or '_'"
    return _check("owner", owner, _OWNER, OWNER_MAX, rule)


def check_scope_name(name: str) -> str:
    """Return the scope name unchanged if it follows the rules, else raise InvalidInputError."""
    rule = "use lower-case ASCII letters, digits, '_', ':' or '-', starting with a letter"
    return _check("scope name", name, _SCOPE_NAME, SCOPE_NAME_MAX, rule)


def check_description(text: str) -> str:
    """Return a scope description if it holds only printable characters, else raise."""
    if len(text) > DESCRIPTION_MAX:
        raise InvalidInputError(f"description is longer than {DESCRIPTION_MAX} characters")
    # Categories C* are control, format (bidi overrides), surrogates and unassigned code points:
    # any of them could move the cursor or disguise text in a terminal.
    if any(unicodedata.category(ch).startswith("C") for ch in text):
        raise InvalidInputError("description holds a control or format character")
    return text


def printable(text: str) -> str:
    """Return text with control and format characters shown as escapes such as \\x1b.

    For database content printed to a terminal: an owner, detail or actor holding an escape
    sequence is shown, never obeyed.
    """
    if all(unicodedata.category(ch)[0] != "C" for ch in text):
        return text
    return "".join(ch if unicodedata.category(ch)[0] != "C" else ascii(ch)[1:-1] for ch in text)


def parse_scopes(values: Iterable[str]) -> tuple[str, ...]:
    """Split 'a,b' / 'a b' entries, check each name, and return them sorted without repeats."""
    names = {part for value in values for part in re.split(r"[,\s]+", value) if part}
    return tuple(sorted(check_scope_name(name) for name in names))


# --- durations and expiry times ---------------------------------------------------------------

_DURATION = re.compile(r"(\d{1,9})([smhd])")
_UNITS: Final = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
DURATION_MAX = timedelta(days=36_500)  # a hundred years: further is "never", said plainly
DURATION_RULE = "write a whole number and a unit: 30s, 15m, 24h or 90d"
NEVER: Final = "never"


def parse_duration(text: str) -> timedelta:
    """Return the span '30s', '15m', '24h' or '90d' (or '0') means, else raise InvalidInputError."""
    value = text.strip()
    if value == "0":
        return timedelta(0)
    found = _DURATION.fullmatch(value)
    if found is None:
        raise InvalidInputError(f"duration {text[:30]!a} is not allowed: {DURATION_RULE}")
    span = timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])
    if span > DURATION_MAX:
        raise InvalidInputError(f"duration {text[:30]!a} is longer than 36500d (100 years)")
    return span


def check_span(span: timedelta, what: str) -> timedelta:
    """Return span unless it is longer than DURATION_MAX, else raise InvalidInputError.

    For spans that reach the store without parse_duration: now + span must never overflow.
    """
    if span > DURATION_MAX:
        raise InvalidInputError(f"{what} {format_duration(span)} is longer than 36500d (100 years)")
    return span


def counted(number: int, noun: str = "key") -> str:
    """'1 key', '3 keys', '1,200 keys': how every count of things is written (no 'key(s)')."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def format_duration(span: timedelta) -> str:
    """Write a span the way parse_duration reads it, in the largest unit that is exact."""
    seconds = int(span.total_seconds())
    if seconds == 0:
        return "0"
    for unit, size in _UNITS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds has a unit")


def parse_expiry(text: str) -> Expiry:
    """A span from now ('90d'), a moment (ISO 8601 date or date and time) or 'never'.

    A date alone means 00:00 UTC that day; a time without an offset is UTC. Whether the moment
    lies in the future is for the caller to judge, on its own clock.
    """
    value = text.strip()
    if value.lower() == NEVER:
        return NEVER
    if _DURATION.fullmatch(value) or value == "0":
        return parse_duration(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            f"expiry {text[:40]!a} is not allowed: a duration from now (90d, 24h), an ISO date "
            "or date and time (2030-01-31, 2030-01-31T12:00Z), or 'never'"
        ) from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 lies before year 1 in UTC
        raise InvalidInputError(f"expiry {text[:40]!a} is out of range") from None


def check_expiry(moment: datetime, now: datetime) -> datetime:
    """Return moment unless it lies more than DURATION_MAX after now, else raise.

    Dates are bounded as durations are, so that no expiry, and no lifetime a rotation inherits
    from one, can carry date arithmetic past year 9999.
    """
    if moment - now > DURATION_MAX:
        raise InvalidInputError(
            f"expiry {format_moment(moment)} is more than 36500d (100 years) away; for no "
            "expiry, write 'never'"
        )
    return moment


def whole_second(moment: datetime) -> datetime:
    """Expiries and graces fall on whole seconds (earlier, never later)."""
    return moment.replace(microsecond=0)


def expiry_moment(expires: Expiry, now: datetime) -> datetime | None:
    """The moment an expiry asks for at now (None: never), refused unless in the future.

    Everything the store checks but the lifetime policy (which needs the database): the app's
    expiry dialog checks each keystroke with this, so it refuses exactly what the store would.
    """
    if expires == NEVER:
        return None
    if isinstance(expires, timedelta):
        expires = now + check_span(expires, "expiry")
    moment = check_expiry(whole_second(expires), now)
    if moment <= now:
        raise InvalidInputError(f"expiry {format_moment(moment)} is not in the future")
    return moment


def read_expiry(text: str, now: datetime) -> Expiry:
    """An expiry as `--expires` reads it, refused unless the store would take it at now (the
    lifetime policy aside): the app's expiry fields check each keystroke with this."""
    expires = parse_expiry(text)
    expiry_moment(expires, now)
    return expires


def format_moment(moment: datetime) -> str:
    """Write a moment as people read it everywhere (messages, the CLI, the audit trail):
    '2030-01-31 12:00:00 UTC'. JSON keeps ISO 8601 (isoformat)."""
    # isoformat, not strftime: %Y leaves year 1 as '1' instead of '0001'.
    plain = moment.astimezone(UTC).replace(tzinfo=None)
    return plain.isoformat(sep=" ", timespec="seconds") + " UTC"


def check_reason(text: str) -> str:
    """Return why a key was disabled if it is printable and at most 200 characters, else raise."""
    if len(text) > DESCRIPTION_MAX:
        raise InvalidInputError(f"reason is longer than {DESCRIPTION_MAX} characters")
    if any(unicodedata.category(ch).startswith("C") for ch in text):
        raise InvalidInputError("reason holds a control or format character")
    return text


ELLIPSIS: Final = "…"
# How wide a table keeps a column before any is cut to its minimum (the app and `keys list`):
# owner and name their comfortable width; the scopes a fair one ('project serving' whole), so
# one long name never squeezes every row's scopes to 'proje…'.
FAIR_WIDTHS: Final = {"owner": 12, "name": 24, "scopes": 16}


def shorten(text: str, width: int, apart: tuple[int, int] | None = None) -> str:
    """text in at most width characters; a longer one keeps both ends around '…'.

    Names that differ only at the end ('…-eu-west-1', '…-eu-west-2') stay apart when cut:
    'production-inf…-eu-west-2'. The head keeps the larger half. apart (from `look_alikes`)
    says where text differs from the names shown beside it: when that part would fall in the
    cut ('…-eu-west-2-primary-cluster', '…-us-east-1-primary-cluster'), the cut keeps a little
    of both ends and the part that differs between two '…'. The one rule of the app and the
    CLI, for ASCII names and the one-cell state markers; the caller pads.
    """
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = (width - 1) // 2
    head = width - 1 - tail
    plain = text[:head] + ELLIPSIS + (text[-tail:] if tail else "")
    if apart is None or width < 5:
        return plain
    first, _ = apart
    if first < head or first >= len(text) - tail:
        return plain  # where it starts to differ shows already
    # The start keeps its share (what a name is), the end a few characters, the rest shows
    # where it differs: 'production…eu-west-2-…er' beside 'production…us-east-1-…er'.
    start, end = max((width - 1) // 2 - 1, 1), max((width - 2) // 8, 1)
    window = width - 2 - start - end
    if first + window + end >= len(text):  # the difference runs into the end: one cut will do
        return text[:start] + ELLIPSIS + text[-(width - 1 - start) :]
    return text[:start] + ELLIPSIS + text[first : first + window] + ELLIPSIS + text[-end:]


def look_alikes(texts: Iterable[str]) -> dict[str, tuple[int, int]]:
    """For each text, (how many first characters, how many last ones) it shares at most with
    any other text: what `shorten` must keep to tell it apart. Sorted neighbours only, so
    O(n log n) for the rows of a table."""
    distinct = sorted(set(texts))
    ends = sorted(distinct, key=lambda t: t[::-1])
    found = {t: [0, 0] for t in distinct}
    for side, order in ((0, distinct), (1, ends)):
        for a, b in itertools.pairwise(order):
            shared = _shared(a, b) if side == 0 else _shared(a[::-1], b[::-1])
            for t in (a, b):
                found[t][side] = max(found[t][side], shared)
    return {t: (start, end) for t, (start, end) in found.items()}


def _shared(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
