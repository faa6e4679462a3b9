"""Times as the views show them: relative ("3 min ago") beside the absolute UTC time."""

from __future__ import annotations

from datetime import UTC, datetime


def absolute(moment: datetime, *, seconds: bool = False) -> str:
    """A moment in UTC, e.g. '2026-11-01 09:30 UTC'."""
    return moment.astimezone(UTC).strftime(f"%Y-%m-%d %H:%M{':%S' if seconds else ''} UTC")


def minute(moment: datetime) -> str:
    """A moment in UTC to the minute, without the zone (for columns headed 'UTC')."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def relative(moment: datetime, now: datetime) -> str:
    """How long ago (or, for a clock that runs ahead, how far ahead) a moment is, in words."""
    seconds = int((now - moment).total_seconds())
    if abs(seconds) < 60:
        return "just now"
    for size, unit in ((86_400 * 365, "year"), (86_400 * 30, "month"), (86_400, "day"),
                       (3_600, "hour"), (60, "min")):  # fmt: skip
        if abs(seconds) >= size:
            count = abs(seconds) // size
            plural = "s" if count != 1 and unit != "min" else ""
            return f"{count} {unit}{plural} ago" if seconds > 0 else f"in {count} {unit}{plural}"
    raise AssertionError("unreachable")  # pragma: no cover


def relative_and_absolute(moment: datetime | None, now: datetime, *, never: str = "never") -> str:
    """'3 days ago (2026-11-20 12:00 UTC)', or `never` for no moment."""
    return never if moment is None else f"{relative(moment, now)} ({absolute(moment)})"
