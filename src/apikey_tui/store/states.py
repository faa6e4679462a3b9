"""A key's state in one vocabulary: the marker the app's table, its detail and the CLI all show.

Pure functions of a key and a moment (no Textual), so the table, the detail view, the CLI and
tests agree. "Unused" is the CLI's `keys list --unused` rule: no use for 90 days, counted from the
last use, else from the creation or last rotation.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from apikey_tui.store.types import KeyInfo

SOON = timedelta(days=14)  # an expiry this close is marked (⚠) and highlighted
UNUSED_AFTER = timedelta(days=90)  # `keys list --unused 90d`

# Marker kinds, each with a word or symbol of its own (never colour alone): the table styles
# the cell with the theme variable of its kind.
ACTIVE, SOON_KIND, EXPIRED, DISABLED, LEAKED, GRACE, UNUSED = (
    "active", "soon", "expired", "disabled", "leaked", "grace", "unused"
)  # fmt: skip


def in_grace(key: KeyInfo, now: datetime) -> bool:
    """Whether the key's previous secret still works at now (up to, not at, grace_until)."""
    return key.old_public_id is not None and key.grace_until is not None and now < key.grace_until


def unused(key: KeyInfo, now: datetime) -> bool:
    """Whether the key went unused for UNUSED_AFTER (never used: since creation or rotation)."""
    since = key.last_used_at if key.last_used_at is not None else key.created_at
    return since <= now - UNUSED_AFTER


def expires_soon(key: KeyInfo, now: datetime) -> bool:
    """Whether the key still works but expires within SOON."""
    return key.expires_at is not None and now < key.expires_at <= now + SOON


def span(delta: timedelta) -> str:
    """A span in the CLI's units, rounded down: '3d', '20h', '15m', '40s'."""
    seconds = max(int(delta.total_seconds()), 0)
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def marker(key: KeyInfo, now: datetime) -> tuple[str, str]:
    """(text, kind) of the table's State cell: the state that matters most, in ≤ 10 cells.

    leaked (disabled because it leaked: KeyInfo.leaked), then disabled, then expired, then
    '⚠ 3d left', then '↻ grace' (an old secret still works), then 'unused', else 'active'.
    """
    if key.leaked:
        return "leaked", LEAKED
    if key.disabled:
        return "disabled", DISABLED
    if key.expired(now):
        return "expired", EXPIRED
    if expires_soon(key, now):
        assert key.expires_at is not None
        return f"⚠ {span(key.expires_at - now)} left", SOON_KIND
    if in_grace(key, now):
        return "↻ grace", GRACE
    if unused(key, now):
        return "unused", UNUSED
    return "active", ACTIVE
