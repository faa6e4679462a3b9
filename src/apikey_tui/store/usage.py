"""Usage: what verifiers counted per key (a key's report; the busiest, refused, wrong-secret).

Verifiers append counts per key public id per minute (`verifier.use_counts`); compaction rolls
minutes older than 48 h into hours and hours older than 30 d into days, and deletes what is past
the retention (`usage_compaction`); right-sizing reads the same rows (`rightsizing`). Every
read sums rows of every granularity, and every window starts at a UTC
midnight (an hourly series at a full hour), so an answer is the same before and after
compaction. A key's counts are found under its public id and every public id it had before
(`apikey_tui_previous_id`, written by recreate and rotate): the use of an old secret stays the
key's, and is shown as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection, Table, and_, func, literal_column, or_, select, text

from apikey_tui.db import database_errors
from apikey_tui.db.models import (
    DAY,
    HOUR,
    USAGE_ALLOWED,
    USAGE_EPOCH,
    USAGE_FORBIDDEN,
    USAGE_KINDS,
    USAGE_LIMITED,
    USAGE_WRONG_SECRET,
    PreviousIdRow,
    UsageTable,
    usage_minute,
)
from apikey_tui.store.context import StoreContext
from apikey_tui.store.records import INFO_COLUMNS, KEY_TABLE, SCOPE_TABLE, key_info
from apikey_tui.store.types import DEFAULT_WINDOW, KeyInfo

SERIES_HOURS = 7 * 24  # the hourly series: the last 7 days
IN_CHUNK = 1000  # ids per IN (...) list
U = UsageTable.c
PREVIOUS: Table = PreviousIdRow.__table__  # type: ignore[attr-defined]
P = PREVIOUS.c


minute_of = usage_minute


def moment_of(minute: int) -> datetime:
    """The moment a period key stands for (its first minute), in UTC."""
    return USAGE_EPOCH + timedelta(minutes=minute)


def window_start(now: datetime, window: timedelta) -> datetime:
    """The start of a window of this length ending now: the UTC midnight at or before now-window.

    Whole days, so that day rows made by compaction fall wholly inside or outside it.
    """
    start = minute_of(now - window)
    return moment_of(start - start % DAY)


# --- values ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeUse:
    """A scope the key holds: requests in the window that needed it, and its last use.

    last_used is the start of the newest period with a request (a minute; an hour or a day for
    compacted periods), across everything kept, not only the window; None: never.
    """

    scope: str
    requests: int
    last_used: datetime | None

    def to_json(self) -> dict[str, Any]:
        """The JSON object `keys usage --json` lists under "scopes"."""
        last = self.last_used.isoformat() if self.last_used else None
        return {"scope": self.scope, "requests": self.requests, "last_used": last}


@dataclass(frozen=True)
class ForbiddenUse:
    """Requests refused with 403 in the window because the key lacked these scopes."""

    missing: tuple[str, ...]
    requests: int

    def to_json(self) -> dict[str, Any]:
        """The JSON object `keys usage --json` lists under "forbidden"."""
        return {"missing": list(self.missing), "requests": self.requests}


@dataclass(frozen=True)
class SecretUse:
    """One public id of the key and its use in the window: the current secret (replaced_at
    None) or an old one that a recreate or rotation replaced. last_seen is the start of the
    newest period with any request under it (allowed, refused or a wrong secret), across
    everything kept; None: never."""

    public_id: str
    replaced_at: datetime | None
    requests: int = 0
    forbidden: int = 0
    wrong_secret: int = 0
    last_seen: datetime | None = None

    @property
    def old(self) -> bool:
        """Whether this is an old secret (replaced by a recreate or rotation)."""
        return self.replaced_at is not None

    def to_json(self) -> dict[str, Any]:
        """The JSON object `keys usage --json` lists under "secrets"."""
        return {
            "public_id": self.public_id,
            "secret": "old" if self.old else "current",
            "replaced_at": self.replaced_at.isoformat() if self.replaced_at else None,
            "requests": self.requests,
            "forbidden": self.forbidden,
            "wrong_secret": self.wrong_secret,
            "last_seen": self.last_seen.isoformat() if self.last_seen else None,
        }


@dataclass(frozen=True)
class UsagePoint:
    """One period of a series: requests allowed, refused with 403, wrong secrets, and refused
    with 429 (a limit spent) in it."""

    start: datetime
    allowed: int = 0
    forbidden: int = 0
    wrong_secret: int = 0
    limited: int = 0


@dataclass(frozen=True)
class KeyUsage:
    """A key's use in a window [since, until): per scope, its 403s, wrong secrets and series.

    requests counts every allowed request (one that needed two scopes counts once here and
    once under each scope). daily has one point per UTC day from since's day to until's;
    hourly one point per hour of the last `SERIES_HOURS` hours (ending with the current hour).
    Every count is the key's whichever secret it came by; secrets splits them per public id:
    the current secret first, then each old secret with anything kept (newest first).
    """

    info: KeyInfo
    since: datetime
    until: datetime
    requests: int
    scopes: tuple[ScopeUse, ...]
    forbidden: tuple[ForbiddenUse, ...]
    wrong_secret: int
    daily: tuple[UsagePoint, ...]
    hourly: tuple[UsagePoint, ...]
    secrets: tuple[SecretUse, ...] = ()
    # Requests refused with 429 in the window, per limit ('key:600/m': how often it was spent).
    limited: tuple[tuple[str, int], ...] = ()

    @property
    def old_secrets(self) -> tuple[SecretUse, ...]:
        """The old secrets with use in the window."""
        return tuple(
            s for s in self.secrets if s.old and (s.requests or s.forbidden or s.wrong_secret)
        )

    def to_json(self) -> dict[str, Any]:
        """The `keys usage --json` object."""
        return {
            "owner": self.info.owner,
            "name": self.info.name,
            "public_id": self.info.public_id,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "requests": self.requests,
            "scopes": [s.to_json() for s in self.scopes],
            "forbidden": [f.to_json() for f in self.forbidden],
            "wrong_secret": self.wrong_secret,
            "limited": [{"limit": name, "requests": n} for name, n in self.limited],
            "daily": [
                {
                    "day": p.start.date().isoformat(),
                    "allowed": p.allowed,
                    "forbidden": p.forbidden,
                    "wrong_secret": p.wrong_secret,
                    "limited": p.limited,
                }
                for p in self.daily
            ],
            "secrets": [s.to_json() for s in self.secrets],
        }


@dataclass(frozen=True)
class KeyActivity:
    """A key's totals in a window, for the busiest / refused / wrong-secret lists.

    missing: for a key refused with 403, the missing scope sets and how often each was refused.
    old_*: of these totals, the requests made with an old secret (one a recreate or rotation
    replaced).
    """

    owner: str
    name: str
    public_id: str
    allowed: int
    forbidden: int
    wrong_secret: int
    missing: tuple[ForbiddenUse, ...] = ()
    old_allowed: int = 0
    old_forbidden: int = 0
    old_wrong_secret: int = 0
    limited: int = 0  # refused with 429 (schema version 9)


@dataclass(frozen=True)
class UsageOverview:
    """The Usage view's lists, each newest-window totals, largest first (at most `limit` each)."""

    since: datetime
    busiest: tuple[KeyActivity, ...]
    forbidden: tuple[KeyActivity, ...]
    wrong_secret: tuple[KeyActivity, ...]
    limited: tuple[KeyActivity, ...] = ()  # keys refused with 429: a limit was spent


# --- reads -------------------------------------------------------------------------------------


def key_rows(conn: Connection, condition: Any) -> list[tuple[Any, list[str]]]:
    """Key rows (INFO_COLUMNS) matching condition, each with its scopes, ordered by scope."""
    query = (
        select(*INFO_COLUMNS, SCOPE_TABLE.c.scope)
        .select_from(KEY_TABLE.outerjoin(SCOPE_TABLE, SCOPE_TABLE.c.key_id == KEY_TABLE.c.id))
        .where(condition)
        .order_by(KEY_TABLE.c.id, SCOPE_TABLE.c.scope)
    )
    found: dict[int, tuple[Any, list[str]]] = {}
    for row in conn.execute(query):
        entry = found.setdefault(row.id, (row, []))
        if row.scope is not None:
            entry[1].append(row.scope)
    return list(found.values())


def previous_ids(conn: Connection, key_ids: Iterable[int]) -> dict[int, list[tuple[str, datetime]]]:
    """Each key's earlier public ids and when each was replaced, newest first."""
    found: dict[int, list[tuple[str, datetime]]] = {}
    ordered = sorted(set(key_ids))
    for start in range(0, len(ordered), IN_CHUNK):
        query = (
            select(P.key_id, P.public_id, P.replaced_at)
            .where(P.key_id.in_(ordered[start : start + IN_CHUNK]))
            .order_by(P.key_id, P.replaced_at.desc(), P.public_id)
        )
        for key_id, public_id, replaced_at in conn.execute(query):
            found.setdefault(key_id, []).append((public_id, replaced_at))
    return found


def ids_of(condition: Any) -> Any:
    """Every public id, current or earlier, of the keys matching condition (a subquery)."""
    current = select(KEY_TABLE.c.public_id).where(condition)
    earlier = (
        select(P.public_id)
        .select_from(PREVIOUS.join(KEY_TABLE, KEY_TABLE.c.id == P.key_id))
        .where(condition)
    )
    return current.union_all(earlier)


def key_usage(
    ctx: StoreContext, owner: str, name: str, window: timedelta = DEFAULT_WINDOW
) -> KeyUsage:
    """The key's use in the window ending now (store clock); KeyNotFoundError if no such key."""
    from apikey_tui.errors import KeyNotFoundError

    now = ctx.clock()
    since = window_start(now, window)
    first, last = minute_of(since), minute_of(now)
    hour_start = last - last % HOUR - (SERIES_HOURS - 1) * HOUR
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        rows = key_rows(conn, and_(KEY_TABLE.c.owner == owner, KEY_TABLE.c.name == name))
        if not rows:
            raise KeyNotFoundError(owner, name)
        row, scopes = rows[0]
        earlier = previous_ids(conn, [row.id]).get(row.id, [])
        ids = [row.public_id, *(public_id for public_id, _ in earlier)]
        totals = conn.execute(
            select(
                U.public_id,
                U.kind,
                U.scope,
                func.sum(func.coalesce(_in_window(first), 0)),
                func.max(U.minute),
            )
            .where(U.public_id.in_(ids), U.kind.in_(USAGE_KINDS))
            .group_by(U.public_id, U.kind, U.scope)
        ).all()
        series = conn.execute(
            select(U.minute, U.kind, func.sum(U.requests))
            .where(
                U.public_id.in_(ids),
                U.minute >= min(first, hour_start),
                U.kind.in_(USAGE_KINDS),
            )
            .group_by(U.minute, U.kind)
        ).all()
    info = key_info(row, scopes, now)
    counts: dict[str, int] = dict.fromkeys(scopes, 0)
    newest: dict[str, int] = {}
    refused: dict[str, int] = {}
    limited: dict[str, int] = {}
    requests = wrong = 0
    # Per public id: requests of each kind in the window, and the newest period with any.
    per_id: dict[str, list[int]] = {}
    seen: dict[str, int] = {}
    for public_id, kind, scope_set, in_window, latest in totals:
        in_window = int(in_window or 0)
        per_id.setdefault(public_id, [0, 0, 0, 0])[kind] += in_window
        seen[public_id] = max(seen.get(public_id, latest), latest)
        if kind == USAGE_ALLOWED:
            requests += in_window
            for scope in scope_set.split():  # a request counts under every scope it needed
                counts[scope] = counts.get(scope, 0) + in_window
                newest[scope] = max(newest.get(scope, latest), latest)
        elif kind == USAGE_FORBIDDEN and in_window:
            refused[scope_set] = refused.get(scope_set, 0) + in_window
        elif kind == USAGE_WRONG_SECRET:
            wrong += in_window
        elif kind == USAGE_LIMITED and in_window:
            limited[scope_set] = limited.get(scope_set, 0) + in_window
    forbidden = [ForbiddenUse(tuple(s.split()), n) for s, n in refused.items()]
    secrets: list[SecretUse] = []
    for public_id, replaced_at in [(row.public_id, None), *earlier]:
        if replaced_at is not None and public_id not in seen:
            continue  # an old secret is listed only with something kept
        allowed, refused_n, wrong_n, _limited = per_id.get(public_id, [0, 0, 0, 0])
        when = moment_of(seen[public_id]) if public_id in seen else None
        secrets.append(SecretUse(public_id, replaced_at, allowed, refused_n, wrong_n, when))
    uses = tuple(
        ScopeUse(scope, counts[scope], moment_of(newest[scope]) if scope in newest else None)
        for scope in scopes
    )
    forbidden.sort(key=lambda f: (-f.requests, f.missing))
    daily = _series(series, first, last - last % DAY, DAY)
    hourly = _series(series, hour_start, last - last % HOUR, HOUR)
    return KeyUsage(
        info,
        since,
        now,
        requests,
        uses,
        tuple(forbidden),
        wrong,
        daily,
        hourly,
        tuple(secrets),
        tuple(sorted(limited.items(), key=lambda item: (-item[1], item[0]))),
    )


def daily_requests(
    ctx: StoreContext, public_ids: Iterable[str], days: int = 7
) -> dict[str, tuple[int, ...]]:
    """Allowed requests per UTC day for each public id, `days` values ending today (oldest
    first), for a column of many keys at once: one grouped query per 1,000 ids. An id with no
    use maps to zeros. A key's current public id also gathers the counts under every id the key
    had before (an old secret's use is the key's).
    """
    now = ctx.clock()
    last = minute_of(now)
    last -= last % DAY
    first = last - (days - 1) * DAY
    ids = list(dict.fromkeys(public_ids))
    found: dict[str, list[int]] = {i: [0] * days for i in ids}
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        # A literal, not a bound parameter: PostgreSQL matches the GROUP BY to the select list
        # only if they are the same expression.
        day = U.minute - U.minute % literal_column(str(DAY))
        for chunk in chunks(ids):
            earlier = select(P.public_id, KEY_TABLE.c.public_id).select_from(
                PREVIOUS.join(KEY_TABLE, KEY_TABLE.c.id == P.key_id)
            )
            into = {i: [i] for i in chunk}  # a usage id -> the ids asked for that gather it
            for old, current in conn.execute(earlier.where(KEY_TABLE.c.public_id.in_(chunk))):
                into.setdefault(old, []).append(current)
            query = (
                select(U.public_id, day, func.sum(U.requests))
                .where(U.public_id.in_(list(into)), U.minute >= first, U.kind == USAGE_ALLOWED)
                .group_by(U.public_id, day)
            )
            for public_id, day, n in conn.execute(query):
                index = (int(day) - first) // DAY
                if 0 <= index < days:
                    for asked in into[public_id]:
                        found[asked][index] += int(n)
    return {i: tuple(v) for i, v in found.items()}


def busiest_scopes(
    ctx: StoreContext,
    public_ids: Iterable[str],
    window: timedelta = DEFAULT_WINDOW,
    top: int = 3,
) -> dict[str, tuple[tuple[str, int], ...]]:
    """The scopes each key's allowed requests needed most in the window ending now, busiest
    first (at most `top`, each with its requests; a request needing none counts as ''), for
    many keys at once: one grouped query per 1,000 ids, with the ids each key had before."""
    first = minute_of(window_start(ctx.clock(), window))
    ids = list(dict.fromkeys(public_ids))
    sums: dict[str, dict[str, int]] = {i: {} for i in ids}
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        for chunk in chunks(ids):
            earlier = select(P.public_id, KEY_TABLE.c.public_id).select_from(
                PREVIOUS.join(KEY_TABLE, KEY_TABLE.c.id == P.key_id)
            )
            into = {i: [i] for i in chunk}
            for old, current in conn.execute(earlier.where(KEY_TABLE.c.public_id.in_(chunk))):
                into.setdefault(old, []).append(current)
            query = (
                select(U.public_id, U.scope, func.sum(U.requests))
                .where(U.public_id.in_(list(into)), U.minute >= first, U.kind == USAGE_ALLOWED)
                .group_by(U.public_id, U.scope)
            )
            for public_id, scope, n in conn.execute(query):
                for asked in into[public_id]:
                    mine = sums[asked]
                    mine[scope] = mine.get(scope, 0) + int(n)
    return {
        i: tuple(sorted(found.items(), key=lambda item: (-item[1], item[0]))[:top])
        for i, found in sums.items()
    }


def _in_window(first: int) -> Any:
    from sqlalchemy import case

    return case((U.minute >= first, U.requests), else_=0)


def _series(
    rows: Iterable[Sequence[Any]], first: int, last: int, step: int
) -> tuple[UsagePoint, ...]:
    """Points of `step` minutes from first to last (inclusive starts), summing every row in each.

    A row of a longer period than the step (a day row in an hourly series) counts in the point
    of its start.
    """
    count = (last - first) // step + 1
    cells = [[0, 0, 0, 0] for _ in range(count)]
    for minute, kind, requests in rows:
        index = (minute - first) // step
        if 0 <= index < count:
            cells[index][kind] += int(requests)
    return tuple(UsagePoint(moment_of(first + i * step), *cell) for i, cell in enumerate(cells))


def overview(
    ctx: StoreContext,
    window: timedelta = timedelta(days=7),
    *,
    limit: int = 20,
    owner: str | None = None,
) -> UsageOverview:
    """The busiest keys, the keys refused with 403, those given wrong secrets and those refused
    with 429 (a limit spent), in the window.

    Per list, one grouped query over the window's rows of its kind (the window index, which
    holds what it sums: the table is not read) that keeps its largest totals, then reads of the
    few keys named and their counts; the cost follows the traffic in the window, not the number
    of keys. A key's totals gather its current and earlier public ids (old_* say how much came
    by an old secret). A count under an id no key holds any more (deleted) is left out.
    """
    now = ctx.clock()
    since = window_start(now, window)
    first = minute_of(since)
    with database_errors(ctx.engine), ctx.engine.connect() as conn:
        # SQLite would rather walk the (public_id, minute) index for the grouping, which reads
        # every row ever kept instead of the window's: it is told which index to use.
        indexed = " INDEXED BY ix_apikey_tui_usage_window" if conn.dialect.name == "sqlite" else ""
        if conn.dialect.name == "postgresql":
            # Room to group a busy week in memory (a hash of 100,000 keys takes about 25 MB; at
            # the default 4 MB it sorted on disk, 4x slower), and no JIT compiling for one read
            # (about 0.1 s). For this transaction only: a connection goes back to the pool reset.
            conn.exec_driver_sql("SET LOCAL work_mem = '64MB'")
            conn.exec_driver_sql("SET LOCAL jit = off")
        mine = (
            " AND public_id IN (SELECT public_id FROM apikey_tui_key WHERE owner = :owner"
            " UNION ALL SELECT p.public_id FROM apikey_tui_previous_id p"
            " JOIN apikey_tui_key k ON k.id = p.key_id WHERE k.owner = :owner)"
            if owner is not None
            else ""
        )
        # Largest first, ties by id: the order the lists had when Python sorted every total.
        query = text(
            "SELECT public_id, sum(requests) AS n FROM apikey_tui_usage"  # noqa: S608 (constants)
            f"{indexed} WHERE minute >= :first AND kind = :kind{mine}"
            " GROUP BY public_id ORDER BY n DESC, public_id LIMIT :top"
        )
        parameters: dict[str, Any] = {"first": first, "top": limit * 2}  # room for deleted keys
        if owner is not None:
            parameters["owner"] = owner
        lists: dict[int, list[str]] = {}
        for kind in USAGE_KINDS:
            found_ids = conn.execute(query, {**parameters, "kind": kind}).scalars()
            lists[kind] = list(found_ids)
        named = {p for entries in lists.values() for p in entries}
        keys = gathered_by_id(conn, named, ctx.clock())
        every_id = {i for k in keys.values() for i in k.ids}
        counts = _totals(conn, every_id, first)
        missing = _missing(conn, every_id, first)
    result: list[tuple[KeyActivity, ...]] = []
    for kind in USAGE_KINDS:
        found: list[KeyActivity] = []
        seen: set[str] = set()
        for public_id in lists[kind]:
            key = keys.get(public_id)
            if key is None or key.info.public_id in seen or len(found) >= limit:
                continue
            info = key.info
            seen.add(info.public_id)
            sums = [sum(counts.get((i, k), 0) for i in key.ids) for k in USAGE_KINDS]
            old = [sum(counts.get((i, k), 0) for i in key.ids[1:]) for k in USAGE_KINDS]
            gaps = _merged(m for i in key.ids for m in missing.get(i, ()))
            found.append(
                KeyActivity(
                    info.owner,
                    info.name,
                    info.public_id,
                    sums[0],
                    sums[1],
                    sums[2],
                    gaps,
                    old_allowed=old[0],
                    old_forbidden=old[1],
                    old_wrong_secret=old[2],
                    limited=sums[3],
                )
            )
        # Ranked by the key's own total (a key's use may be split between its secrets).
        total = attrgetter(("allowed", "forbidden", "wrong_secret", "limited")[kind])
        found.sort(key=lambda a: -total(a))
        result.append(tuple(found))
    return UsageOverview(since, *result)


def owned_by(owner: str | None) -> Any:
    """A condition on usage rows: under a public id (current or earlier) of owner's keys."""
    if owner is None:
        return None
    return U.public_id.in_(ids_of(KEY_TABLE.c.owner == owner))


def chunks(ids: Iterable[str]) -> Iterable[list[str]]:
    ordered = sorted(ids)
    for start in range(0, len(ordered), IN_CHUNK):
        yield ordered[start : start + IN_CHUNK]


@dataclass(frozen=True)
class Gathered:
    """A key and every public id its usage is under: the current one first, then the ids it
    had before (newest first)."""

    info: KeyInfo
    ids: tuple[str, ...]


def gathered_by_id(conn: Connection, ids: Iterable[str], now: datetime) -> dict[str, Gathered]:
    """Each id's key (by its current or an earlier id), with every id the key has had."""
    found: dict[str, Gathered] = {}
    for chunk in chunks(ids):
        earlier = select(P.key_id).where(P.public_id.in_(chunk))
        condition = or_(KEY_TABLE.c.public_id.in_(chunk), KEY_TABLE.c.id.in_(earlier))
        rows = key_rows(conn, condition)
        previous = previous_ids(conn, [row.id for row, _ in rows])
        for row, scopes in rows:
            old = tuple(public_id for public_id, _ in previous.get(row.id, ()))
            key = Gathered(key_info(row, scopes, now), (row.public_id, *old))
            for public_id in key.ids:
                found[public_id] = key
    return found


def _merged(uses: Iterable[ForbiddenUse]) -> tuple[ForbiddenUse, ...]:
    """The same missing scope sets summed (counted under several ids), most refused first."""
    sums: dict[tuple[str, ...], int] = {}
    for use in uses:
        sums[use.missing] = sums.get(use.missing, 0) + use.requests
    found = [ForbiddenUse(missing, n) for missing, n in sums.items()]
    return tuple(sorted(found, key=lambda f: (-f.requests, f.missing)))


def _totals(conn: Connection, ids: Iterable[str], first: int) -> dict[tuple[str, int], int]:
    """Each id's requests per kind since first."""
    found: dict[tuple[str, int], int] = {}
    for chunk in chunks(ids):
        query = (
            select(U.public_id, U.kind, func.sum(U.requests))
            .where(U.public_id.in_(chunk), U.minute >= first)
            .group_by(U.public_id, U.kind)
        )
        for public_id, kind, n in conn.execute(query):
            found[(public_id, kind)] = int(n)
    return found


def _missing(conn: Connection, ids: Iterable[str], first: int) -> dict[str, list[ForbiddenUse]]:
    found: dict[str, list[ForbiddenUse]] = {}
    for chunk in chunks(ids):
        query = (
            select(U.public_id, U.scope, func.sum(U.requests))
            .where(U.public_id.in_(chunk), U.minute >= first, U.kind == USAGE_FORBIDDEN)
            .group_by(U.public_id, U.scope)
        )
        for public_id, scope, n in conn.execute(query):
            found.setdefault(public_id, []).append(ForbiddenUse(tuple(scope.split()), int(n)))
    for uses in found.values():
        uses.sort(key=lambda f: (-f.requests, f.missing))
    return found
