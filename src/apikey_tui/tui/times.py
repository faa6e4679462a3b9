"""Times as the app shows them, in one wording: relative ("3 d ago") and absolute UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from apikey_tui.names import format_duration
from apikey_tui.store.types import DEFAULT_WINDOW

# The window of the key detail's scope use and right-size proposal, named as the CLI names it.
WINDOW = format_duration(DEFAULT_WINDOW)

# Short units, so the table's time columns stay narrow; the State marker writes "⚠ 3d left".
_UNITS = ((86_400 * 365, "y"), (86_400 * 30, "mo"), (86_400, "d"), (3_600, "h"), (60, "min"))
# The widest relative time ('59 min ago'): the table's time columns are never narrower, so a
# time is never cut ('52 min a…').
RELATIVE_WIDTH = 10
ABSOLUTE_WIDTH = 16  # '2026-11-20 11:59'


def absolute(moment: datetime, *, seconds: bool = False) -> str:
    """A moment in UTC, e.g. '2026-11-01 09:30 UTC'."""
    return moment.astimezone(UTC).strftime(f"%Y-%m-%d %H:%M{':%S' if seconds else ''} UTC")


def minute(moment: datetime) -> str:
    """A moment in UTC to the minute, without the zone (for columns headed 'UTC')."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def relative(moment: datetime | None, now: datetime) -> str:
    """'just now', '3 min ago', '5 h ago', '12 d ago', '3 mo ago', '2 y ago'; 'never' if none.

    A moment ahead of now (an expiry, or a clock that runs ahead of ours) reads 'in 3 d'.
    Rounded to the nearest unit, not down: a 2 h grace reads 'in 2 h' right after the rotation
    (not 'in 1 h'), and 'set-expiry 3d' reads 'in 3 d'. A count that rounds up to the next
    unit says that unit ('in 1 h', never 'in 60 min'); the largest unit the span holds once
    is used, so 13 hours stay '13 h'.
    """
    if moment is None:
        return "never"
    seconds = round((now - moment).total_seconds())
    if abs(seconds) < 60:
        return "just now"
    i = next(i for i, (size, _) in enumerate(_UNITS) if abs(seconds) >= size)
    size, unit = _UNITS[i]
    count = (abs(seconds) + size // 2) // size
    if i > 0 and count * size >= _UNITS[i - 1][0]:
        size, unit = _UNITS[i - 1]
        count = (abs(seconds) + size // 2) // size
    return f"{count} {unit} ago" if seconds > 0 else f"in {count} {unit}"


def relative_and_absolute(moment: datetime | None, now: datetime, *, never: str = "never") -> str:
    """'3 d ago (2026-11-20 12:00 UTC)', or `never` for no moment."""
    return never if moment is None else f"{relative(moment, now)} ({absolute(moment)})"
