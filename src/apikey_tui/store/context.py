"""What every part of the store works with: the engine, the hasher, the actor and the clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlmodel import Session

from apikey_tui.clock import Clock, system_clock
from apikey_tui.config import mask_url
from apikey_tui.db import WRITE, Conflicts, database_errors
from apikey_tui.db.engine import LOCK_WAIT
from apikey_tui.hashing import SecretHasher
from apikey_tui.limits.port import CountReader
from apikey_tui.store.types import Actor


class StoreContext:
    """A database to read and write keys in, and who acts on it, on which clock."""

    def __init__(
        self,
        engine: Engine,
        *,
        hasher: SecretHasher | None = None,
        actor: Actor | None = None,
        clock: Clock = system_clock,
        writes: Engine | None = None,
    ) -> None:
        self.engine = engine
        # writes: where writes run when engine's do not run in a transaction (the verifier
        # reads in autocommit, and an isolation level set over it does not take: each write
        # statement committed by itself, and SET LOCAL lock_timeout was a WARNING, no bound).
        self._write_engine = (writes or engine).execution_options(**WRITE)
        self.hasher = hasher or SecretHasher()
        self.actor = actor or Actor.current()
        # Every timestamp the store writes, and every expiry and grace decision, reads this
        # clock (timezone-aware UTC); tests pass a fake one.
        self.clock = clock
        self.key_indexes: bool | None = None  # found on the first filtered read (`queries`)
        # The store of counts and where it is, opened on the first read (`limit_use`).
        self.limit_counts: tuple[CountReader, str] | None = None

    @property
    def label(self) -> str:
        """The database URL with its password masked, for headers and messages."""
        return mask_url(str(self.engine.url))

    def close(self) -> None:
        """Release the store's database connections."""
        self.engine.dispose()

    @contextmanager
    def session(
        self, *, write: bool = False, conflicts: Conflicts | None = None, wait: float | None = None
    ) -> Iterator[Session]:
        """A session whose database errors come out typed (conflicts: `database_errors`); a
        write's lock wait is the writes' own unless `wait` (seconds, PostgreSQL) names another."""
        engine = self.engine
        if write:
            engine = self._write_engine
            if wait is not None:
                engine = engine.execution_options(**{LOCK_WAIT: wait})
        with database_errors(self.engine, conflicts), Session(engine, expire_on_commit=False) as s:
            yield s
