"""A key's state in one vocabulary: the marker the app's table, its detail and the CLI all show.

Pure functions of a key and a moment (no Textual), so the table, the detail view, the CLI and
tests agree. "Unused" is the CLI's `keys list --unused` rule: no use for 90 days, counted from the
last use, else from the creation or last rotation.

The same rules are written once more, in SQL, beside their Python (`urgency_sql`, `kind_sql`):
the table sorts by urgency and the filter finds a state in the database, on SQLite and
PostgreSQL, with the store clock's now as a bound parameter. A test holds the two equal at every
boundary. The State cell shows one state, the most urgent; the filter finds every key a state
word holds for (`facts`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from apikey_tui.store import key_rows
from apikey_tui.store.types import LEAK_REASON, KeyInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from sqlalchemy.sql.elements import ColumnElement

# The SQL twins import SQLAlchemy when called, not here: the terminal app's table draws the State
# cell (marker) before SQLAlchemy is imported (tui/first_rows.py).

SOON = timedelta(days=14)  # an expiry this close is marked (⚠) and highlighted
UNUSED_AFTER = timedelta(days=90)  # `keys list --unused 90d`

# Marker kinds, each with a word or symbol of its own (never colour alone): the table styles
# the cell with the theme variable of its kind.
ACTIVE, SOON_KIND, EXPIRED, DISABLED, LEAKED, GRACE, UNUSED = (
    "active", "soon", "expired", "disabled", "leaked", "grace", "unused"
)  # fmt: skip


def in_grace(key: KeyInfo, now: datetime) -> bool:
    """Whether the key's previous secret still works at now (`key_rows.in_grace`)."""
    return key_rows.in_grace(key.old_public_id, key.grace_until, now)


def unused(key: KeyInfo, now: datetime) -> bool:
    """Whether the key went unused for UNUSED_AFTER (never used: since creation or rotation)."""
    since = key.last_used_at if key.last_used_at is not None else key.created_at
    return since <= now - UNUSED_AFTER


def expires_soon(key: KeyInfo, now: datetime) -> bool:
    """Whether the key still works but expires within SOON."""
    return key.expires_at is not None and now < key.expires_at <= now + SOON


def span(delta: timedelta) -> str:
    """A span in the CLI's units, rounded to the nearest: '3d', '20h', '15m', '40s'.

    Nearest, not down: right after `set-expiry 3d` the key has 3 days less a few seconds, and
    reads '3d left', not '2d'. A count that rounds up to the next unit says that unit ('1d',
    not '24h'). The largest unit that holds the span at least once is used: 13 hours stay
    '13h', never '1d'.
    """
    seconds = max(round(delta.total_seconds()), 0)
    units = ((86_400, "d"), (3_600, "h"), (60, "m"), (1, "s"))
    for i, (size, unit) in enumerate(units):
        if seconds >= size or size == 1:
            count = (seconds + size // 2) // size
            bigger = units[i - 1][0] if i else None
            if bigger is not None and count * size >= bigger:
                return f"{count * size // bigger}{units[i - 1][1]}"
            return f"{count}{unit}"
    raise AssertionError("unreachable: the last unit holds every span")


def facts(key: KeyInfo, now: datetime) -> list[str]:
    """Every kind that holds for the key at now, in the State cell's order ([ACTIVE]: none).

    leaked (disabled because it leaked: KeyInfo.leaked), disabled, expired, expiring soon, in
    grace (an old secret still works), unused. A key can be several at once: rotated and
    expiring soon, disabled and unused. The State cell shows the first (`marker`); the filter's
    words find a key by any of them (`/grace` finds a rotated key that shows '⚠ 3d left').
    """
    held = [
        kind
        for kind, holds in (
            (LEAKED, key.leaked),
            (DISABLED, key.disabled),
            (EXPIRED, key.expired(now)),
            (SOON_KIND, expires_soon(key, now)),
            (GRACE, in_grace(key, now)),
            (UNUSED, unused(key, now)),
        )
        if holds
    ]
    return held or [ACTIVE]


_TEXT = {LEAKED: "leaked", DISABLED: "disabled", EXPIRED: "expired", GRACE: "↻ grace"}


def marker(key: KeyInfo, now: datetime) -> tuple[str, str]:
    """(text, kind) of the table's State cell: the first of the key's facts, in ≤ 10 cells."""
    kind = facts(key, now)[0]
    if kind == SOON_KIND:
        assert key.expires_at is not None
        return f"⚠ {span(key.expires_at - now)} left", SOON_KIND
    return _TEXT.get(kind, kind), kind


# The table's State order, most urgent first (sort by State; S reverses it). A leaked key comes
# first: its secret is out, and it wants a recreate. Then what stopped or is about to stop
# working, then what merely wants a look.
URGENCY = (LEAKED, EXPIRED, SOON_KIND, GRACE, DISABLED, UNUSED, ACTIVE)
# The filter's words for each kind ('/' and `keys list --filter`): typing at least 3 letters of
# one (`dis`, `expir`, `grace`) finds the keys in that state, besides any name containing it.
WORDS: dict[str, tuple[str, ...]] = {
    LEAKED: ("leaked", "disabled"),  # a leaked key is disabled too: `disabled` finds it
    EXPIRED: ("expired",),
    SOON_KIND: ("soon", "expiring"),
    GRACE: ("grace",),
    DISABLED: ("disabled",),
    UNUSED: ("unused",),
    ACTIVE: ("active",),
}
SHORTEST_WORD = 3  # 'un' or 'ex' would match half the words; three letters name one


def urgency(key: KeyInfo, now: datetime) -> int:
    """Where the key's State stands in URGENCY (0: most urgent)."""
    return URGENCY.index(marker(key, now)[1])


def kinds_named(text: str) -> list[str]:
    """The kinds whose filter word starts with text (at least SHORTEST_WORD letters), in order."""
    needle = text.strip().lower()
    if len(needle) < SHORTEST_WORD:
        return []
    return [k for k in URGENCY if any(w.startswith(needle) for w in WORDS[k])]


def _conditions(now: datetime) -> list[tuple[str, Any]]:
    """(kind, SQL condition) of each fact in `facts`' order: the first that holds is the key's
    kind (the State cell's)."""
    from sqlalchemy import and_, func

    from apikey_tui.store import records

    key = records.KEY_TABLE.c
    # substr, not LIKE: SQLite's LIKE ignores case, startswith does not.
    leaked = and_(
        key.disabled_reason.is_not(None),
        func.substr(key.disabled_reason, 1, len(LEAK_REASON)) == LEAK_REASON,
    )
    since = func.coalesce(key.last_used_at, key.created_at)
    return [
        (LEAKED, leaked),
        (DISABLED, key.disabled_at.is_not(None)),
        (EXPIRED, and_(key.expires_at.is_not(None), key.expires_at <= now)),
        (SOON_KIND, and_(key.expires_at > now, key.expires_at <= now + SOON)),
        (GRACE, records.grace_sql(now)),
        (UNUSED, since <= now - UNUSED_AFTER),
    ]


def urgency_sql(now: datetime) -> ColumnElement[int]:
    """urgency() in SQL, for the key table's rows at now (a bound parameter)."""
    from sqlalchemy import case, literal

    whens = [(cond, literal(URGENCY.index(kind))) for kind, cond in _conditions(now)]
    return case(*whens, else_=literal(URGENCY.index(ACTIVE)))


def kind_sql(kinds: list[str], now: datetime) -> ColumnElement[bool]:
    """SQL: one of these kinds is among the key's facts at now (`facts`, for the filter)."""
    from sqlalchemy import or_

    held = dict(_conditions(now))
    active = urgency_sql(now) == URGENCY.index(ACTIVE)
    return or_(*(active if kind == ACTIVE else held[kind] for kind in kinds))
