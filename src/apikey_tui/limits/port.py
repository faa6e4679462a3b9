"""What a store of counts gives: the limiter one atomic take, an admin's read the counts."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Grant(NamedTuple):
    """What one take got: tokens granted in the window the store's clock is in, that window's
    end and the store's now (Unix seconds, the store's clock), and the store's boot id."""

    granted: int
    window_end: float
    store_now: float
    boot: str


class LimitStore(Protocol):
    """Counts per (limit key, window), shared by every process and host that uses the store.

    `take` is one atomic step: in the window of `window_seconds` that holds the store's now,
    grant min(want, n - used) tokens (never below 0) and add them to used. It grants 0 in every
    window that began at or before the moment the store lost its counts (the boot marker, see
    docs/reference/limits.md): `known_boot` is the boot id this process last saw ('' if none).
    Errors are StoreUnavailableError (or a subclass), one line, never a driver's traceback.
    """

    def take(
        self, limit_key: str, n: int, window_seconds: int, want: int, known_boot: str
    ) -> Grant:
        """Grant up to `want` tokens of limit_key's current window; see the class."""
        ...

    def forget_connections(self) -> None:
        """In a forked child: drop (never use, never close) the parent's connections."""
        ...


class CountReader(Protocol):
    """What an admin's read of the counts needs (`store.limit_use`)."""

    def window_use(self, limit_key: str, window_seconds: int) -> tuple[int, float]:
        """Tokens granted so far in limit_key's current window (by the store's clock), and
        that window's end: what an admin is shown, never what decides a request."""
        ...

    def counted(self) -> bool:
        """Whether a verifier has taken from this store since it last lost its counts (its
        boot marker is there). Where none has, every window reads 0, so a reader cannot tell
        idle limits from services that count in another store: an admin's read says unknown."""
        ...


class CountStore(LimitStore, CountReader, Protocol):
    """A store of counts: both sides (`limits.where.open_store`)."""
