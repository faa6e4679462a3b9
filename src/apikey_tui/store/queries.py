"""Reading keys: the one key filter, the table's window, and the listings built on them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, false, func, literal_column, or_
from sqlalchemy import select as sa_select
from sqlmodel import col

from apikey_tui.db import database_errors, key_indexes
from apikey_tui.db.models import KeyRow
from apikey_tui.errors import StoreUnavailableError
from apikey_tui.names import check_span
from apikey_tui.networks import MODES
from apikey_tui.store import catalog, key_filter, policy, states
from apikey_tui.store.context import StoreContext
from apikey_tui.store.ordering import before, computed, order, sort_values
from apikey_tui.store.records import (
    INFO_COLUMNS,
    KEY_TABLE,
    SCOPE_TABLE,
    key_info,
    key_row,
    like_pattern,
    read_info,
)
from apikey_tui.store.types import KeyInfo, KeyQuery

Cancel = Callable[[], bool]
# Fewer candidates than this from the trigram index: read just them; more: the text is common,
# and scanning in the table's order finds a screenful long before the end.
SPARSE = 2000


class QueryCancelled(Exception):
    """The caller cancelled a read (a newer keystroke made it stale); nothing to report."""


def get_key(ctx: StoreContext, owner: str, name: str) -> KeyInfo:
    """Return one key of an owner by name."""
    with ctx.session() as session:
        return read_info(session, key_row(session, owner, name), ctx.clock())


def list_keys(
    ctx: StoreContext,
    owner: str | None = None,
    text: str = "",
    *,
    limit: int | None = None,
    expiring_within: timedelta | None = None,
    unused_for: timedelta | None = None,
    violating_policy: bool = False,
) -> list[KeyInfo]:
    """List keys of one owner (or all owners) that the app's filter finds for text (`matching`).

    expiring_within: only keys not yet expired that expire within this span from now.
    unused_for: only keys not used for this long (a key never used counts from its creation
    or last rotation). violating_policy: only keys whose lifetime breaks the lifetime
    policy (none when no policy is set).
    """
    now = ctx.clock()
    conditions: list[Any] = []
    if expiring_within is not None:
        expires = col(KeyRow.expires_at)
        conditions += [expires > now, expires <= now + check_span(expiring_within, "span")]
    if unused_for is not None:
        since = func.coalesce(col(KeyRow.last_used_at), col(KeyRow.created_at))
        conditions.append(since <= now - check_span(unused_for, "span"))
    maximum: timedelta | None = None
    if violating_policy:
        maximum = policy.lifetime_policy(ctx)
        if maximum is None:
            return []
    # Plain columns, not ORM objects, and all scopes in one query: 100,000 keys load in
    # about a second instead of three.
    with reading(ctx, None) as conn:
        conditions += matching(ctx, conn, KeyQuery(owner, text), now=now)
        ordered = sa_select(KEY_TABLE.c.id).where(*conditions).order_by(KeyRow.owner, KeyRow.name)
        wanted = ordered.limit(limit) if limit is not None and maximum is None else ordered
        rows = conn.execute(
            sa_select(*INFO_COLUMNS)
            .where(KEY_TABLE.c.id.in_(wanted))
            .order_by(KEY_TABLE.c.owner, KEY_TABLE.c.name)
        ).all()
        scopes = _scopes(conn, wanted)
    keys = [key_info(r, scopes.get(r.id, ()), now) for r in rows]
    if maximum is not None:
        keys = [k for k in keys if policy.breaks(k.created_at, k.expires_at, maximum)][:limit]
    return keys


def count_keys(ctx: StoreContext, query: KeyQuery, *, cancelled: Cancel | None = None) -> int:
    """How many keys match query (for the scrollbar and the status line)."""
    with reading(ctx, cancelled) as conn:
        terms = matching(ctx, conn, query)
        statement = sa_select(func.count()).select_from(KEY_TABLE).where(*terms)
        return int(conn.execute(statement).scalar_one())


def key_window(
    ctx: StoreContext,
    query: KeyQuery,
    offset: int,
    limit: int,
    *,
    total: int | None = None,
    after: KeyInfo | None = None,
    before_key: KeyInfo | None = None,
    cancelled: Cancel | None = None,
) -> list[KeyInfo]:
    """Keys offset … offset + limit - 1 of query's order, scopes included.

    Only these rows are read: at a million keys the first screen costs a millisecond when
    an index gives the order. Given total, a window in the far half is read from the other
    end (OFFSET walks the rows it skips), so the last page costs as little as the first.
    Given the key just before the window (after=) or just after it (before_key=), offset is
    ignored and the window starts from that key through the index (keyset paging): the
    cost of scrolling does not grow with the depth.
    """
    offset, limit = max(offset, 0), max(limit, 0)
    flipped = before_key is not None or (
        after is None and total is not None and offset > total // 2
    )
    now = ctx.clock()  # one moment for the order, its anchors and the rows' states
    anchor: list[Any] = []
    if after is not None:
        offset, anchor = 0, [before(query, sort_values(after, now), now, reverse=not query.reverse)]
    elif before_key is not None:
        offset, anchor = 0, [before(query, sort_values(before_key, now), now)]
    elif flipped:
        assert total is not None
        end = min(offset + limit, total)
        offset, limit = total - end, max(end - offset, 0)
    hint = bool(anchor) or (total is not None and total > 5000)
    with reading(ctx, cancelled) as conn:
        statement = (
            sa_select(*INFO_COLUMNS)
            .where(*matching(ctx, conn, query, hint_order=hint, now=now), *anchor)
            .order_by(*order(query, now, reverse=query.reverse != flipped))
            .offset(offset)
            .limit(limit)
        )
        rows = list(conn.execute(statement).all())
        if flipped:
            rows.reverse()
        scopes = _scopes(conn, [r.id for r in rows]) if rows else {}
    return [key_info(r, scopes.get(r.id, ()), now) for r in rows]


def key_position(
    ctx: StoreContext, query: KeyQuery, owner: str, name: str, *, cancelled: Cancel | None = None
) -> int | None:
    """Where the key (owner, name) stands in query's order, or None if it does not match.

    One count of the keys before it (an index range where the order has an index), so a
    selection can follow its key through a reload without reading the rows before it.
    """
    key, now = KEY_TABLE, ctx.clock()
    with reading(ctx, cancelled) as conn:
        terms = matching(ctx, conn, query, now=now)
        found = conn.execute(
            sa_select(*INFO_COLUMNS).where(key.c.owner == owner, key.c.name == name, *terms)
        ).first()
        if found is None:
            return None
        # The whole key: a computed order (State, Scopes) reads its state and scopes.
        info = key_info(found, _scopes(conn, [found.id]).get(found.id, ()), now)
        at = before(query, sort_values(info, now), now)
        statement = sa_select(func.count()).select_from(key).where(*terms, at)
        return int(conn.execute(statement).scalar_one())


def owner_counts(ctx: StoreContext, *, limit: int = 500) -> list[tuple[str, int]]:
    """The owners that have keys, with how many each, by name (the first limit of them)."""
    key = KEY_TABLE
    with reading(ctx, None) as conn:
        rows = conn.execute(
            sa_select(key.c.owner, func.count())
            .group_by(key.c.owner)
            .order_by(key.c.owner)
            .limit(limit)
        ).all()
    return [(owner, int(count)) for owner, count in rows]


def _scopes(conn: Connection, key_ids: Any) -> dict[int, list[str]]:
    """The scopes of these keys (ids, or a query of them), each key's sorted by name."""
    scope = SCOPE_TABLE
    found: dict[int, list[str]] = {}
    for key_id, name in conn.execute(
        sa_select(scope.c.key_id, scope.c.scope)
        .where(scope.c.key_id.in_(key_ids))
        .order_by(scope.c.key_id, scope.c.scope)
    ):
        found.setdefault(key_id, []).append(name)
    return found


def matching(
    ctx: StoreContext,
    conn: Connection,
    query: KeyQuery,
    *,
    hint_order: bool = False,
    now: datetime | None = None,
) -> list[Any]:
    """WHERE terms: the owner, the text's FIELD:VALUE terms (`key_filter`: tag, owner, kind,
    state, scope), and its free text in owner, name, public id or a scope's name, or the start
    of a state's word (`states.WORDS`: `disabled`, `exp`, `grace`…) judged at now (the store
    clock's, if not given) or of a network mode's (`shadow`, `enforce`).

    The one key filter: the app's table and `keys list --filter` both read through it.
    """
    key, sqlite = KEY_TABLE, ctx.engine.dialect.name == "sqlite"
    terms: list[Any] = []
    read = key_filter.parse(query.text)
    fields = key_filter.term_words(read)
    # PostgreSQL's terms index holds the tags and scopes exactly: it answers those terms alone.
    exact = not fields or sqlite or not _searchable(ctx, conn)
    if read:
        at = ctx.clock() if now is None else now
        skip = () if exact else ("tag", "scope")
        terms += key_filter.conditions(read, at, sqlite=sqlite, skip=skip)
    # SQLite keeps no statistics unless ANALYZE ran, so it takes any owner for a handful of
    # keys and reads through the owner index; a unary + keeps it off that index where a
    # better path exists (the order's own index, or the trigram candidates below).
    # A computed order (State, Expires, Scopes) has no index: the owner's index is the path.
    owner_unindexed = sqlite and hint_order and query.sort not in ("owner", "name")
    owner_unindexed = owner_unindexed and not computed(query)
    needle = read.free.strip()
    if "\x00" in query.text:
        # No owner, name, id or scope holds a NUL; PostgreSQL and FTS5 refuse one outright.
        return [false()]
    if fields and _searchable(ctx, conn):
        # Tag and scope terms through the keys' terms index, which intersects their lists of
        # keys: terms few keys hold together (rare ones, or common ones that never meet: a
        # walk in the window's order would read every key to find none) name those few keys
        # at once. Common together: the walk finds a screenful soon.
        ids = key_indexes.term_ids(conn, fields, SPARSE)
        if ids is not None:
            terms.append(key.c.id.in_(ids))
            owner_unindexed = sqlite  # read the few ids, not the owner's every key
        elif not exact:
            # The planner estimates this from the terms' statistics (each word's share of the
            # keys), and walks the window's order, checking each key's terms by its id.
            terms.append(key.c.id.in_(key_indexes.holding(fields)))
    if needle and not (query.owner and needle.lower() in query.owner.lower()):
        pattern = like_pattern(needle)

        # Names, owners, ids and scopes are ASCII; SQLite's LIKE ignores ASCII case already,
        # and lower() around every column would double the cost of a scan.
        def contains(column: Any) -> Any:
            if sqlite:
                return column.like(pattern, escape="\\")
            if len(needle) < key_indexes.SHORTEST:
                # pg_trgm can take text this short only by reading its whole index (half a
                # second at a million keys); lower() keeps the planner off that index.
                return func.lower(column).like(pattern.lower(), escape="\\")
            return column.ilike(pattern, escape="\\")

        found = [contains(key.c.name), contains(key.c.public_id)]
        if query.owner is None:
            found.append(contains(key.c.owner))
        scope_names = [s.name for s in catalog.list_scopes(ctx) if needle.lower() in s.name]
        if scope_names:
            scope = SCOPE_TABLE
            found.append(
                sa_select(scope.c.key_id)
                .where(scope.c.key_id == key.c.id, scope.c.scope.in_(scope_names))
                .exists()
            )
        kinds = states.kinds_named(needle)
        if kinds:
            found.append(states.kind_sql(kinds, ctx.clock() if now is None else now))
        modes = networks_named(needle)
        if modes:  # the key's own network mode: its stored rules start with it
            found.extend(key.c.networks.like(f"{mode} %") for mode in modes)
        terms.append(or_(*found))
        # A state's keys hold no trigram of its word: the candidates would leave them out.
        if sqlite and not kinds and not modes and _searchable(ctx, conn):
            # SQLite cannot serve LIKE '%text%' from an index, so a rare text would scan
            # every key; the trigram table names the few keys that may match, and the
            # exact terms above still decide. Common text scans: the first rows come fast.
            ids = key_indexes.candidate_ids(conn, needle, scope_names, SPARSE)
            if ids is not None:
                terms.append(key.c.id.in_(ids))
                owner_unindexed = True  # read the few ids, not the owner's every key
    # (A text inside the owner's name matches every key of theirs: the owner term alone.)
    if query.owner is not None:
        if owner_unindexed:
            terms.append(literal_column(f"+{key.name}.owner") == query.owner)
        else:
            terms.append(key.c.owner == query.owner)
    return terms


def networks_named(text: str) -> list[str]:
    """The network modes (`enforce`, `shadow`) whose word starts with text, at least as long as
    a state's word must be: the filter finds keys by their own mode."""
    needle = text.strip().lower()
    if len(needle) < states.SHORTEST_WORD:
        return []
    return [mode for mode in MODES if mode.startswith(needle)]


def _searchable(ctx: StoreContext, conn: Connection) -> bool:
    """Whether the database has the trigram index (asked once per store)."""
    if ctx.key_indexes is None:
        ctx.key_indexes = key_indexes.present(conn)
    return ctx.key_indexes


@contextmanager
def reading(ctx: StoreContext, cancelled: Cancel | None) -> Iterator[Connection]:
    """A read connection; on SQLite a query stops within milliseconds once cancelled()."""
    try:
        with database_errors(ctx.engine), ctx.engine.connect() as conn:
            raw = conn.connection.driver_connection
            if cancelled is None or not isinstance(raw, sqlite3.Connection):
                yield conn
                return
            # every million SQLite instructions (a few milliseconds): more often, the
            # callback's fight for the GIL would slow the event loop down
            raw.set_progress_handler(lambda: 1 if cancelled() else 0, 1_000_000)
            try:
                yield conn
            finally:
                raw.set_progress_handler(None, 0)
    except StoreUnavailableError:
        if cancelled is not None and cancelled():
            raise QueryCancelled from None
        raise
