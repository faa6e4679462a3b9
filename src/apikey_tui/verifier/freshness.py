"""How the verifier's caches learn of changes: a generation that moves when they may be stale."""

from __future__ import annotations

import itertools
import sqlite3
import time
from typing import Protocol

from sqlalchemy import Engine

from apikey_tui import forksafety
from apikey_tui.errors import VerifierUnavailableError
from apikey_tui.sqlite_watch import CommitWatch, watch_for


class Freshness(Protocol):
    """`generation()` moves whenever what was read from the database may have changed."""

    def generation(self) -> int:
        """The current generation; a cache entry read under an older one must be re-read."""


class CommitFreshness:
    """SQLite: the generation moves with every commit to the file, by any process."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._watch: CommitWatch | None = None
        self._last: object = None
        self._generation = 0
        forksafety.reset_in_child(self._forget_watch)

    def _forget_watch(self) -> None:
        self._watch = None  # the parent's; the child makes (and locks) its own

    def generation(self) -> int:
        try:
            watch = self._watch
            if watch is None:
                watch = self._watch = watch_for(self._path)
            token = watch.token()
        except (sqlite3.Error, OSError):
            raise VerifierUnavailableError() from None
        if token != self._last:
            self._last = token
            self._generation += 1
        return self._generation


class BoundFreshness:
    """PostgreSQL (until it pushes changes): the generation moves every `bound` seconds.

    An entry read in one period is trusted until the period ends, so never longer than the
    bound; a bound of 0 makes every call a new generation (ask the database every time).
    """

    def __init__(self, bound: float) -> None:
        self._bound = bound
        self._counter = itertools.count()

    def generation(self) -> int:
        if self._bound <= 0:
            return next(self._counter)
        return int(time.monotonic() / self._bound)


def freshness_for(engine: Engine, bound: float) -> Freshness:
    """Commit watch for a SQLite file; the time bound for PostgreSQL and in-memory SQLite."""
    path = engine.url.database if engine.dialect.name == "sqlite" else None
    if path and path != ":memory:":
        return CommitFreshness(path)
    return BoundFreshness(bound)
