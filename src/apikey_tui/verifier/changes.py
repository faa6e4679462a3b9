"""Following the store's change log: which keys changed since this process last looked."""

from __future__ import annotations

import threading
from collections.abc import Callable

from apikey_tui.store.credentials import Change
from apikey_tui.verifier.freshness import Freshness
from apikey_tui.verifier.key_index import KeyIndex
from apikey_tui.verifier.port import CredentialSource

RECENT = 10_000  # changed ids remembered for racing checks; past it, such checks skip caching


class ChangeFeed:
    """Per-key invalidation: when the freshness generation moves, read the log since `seq`.

    One query returns the ids changed since the last read, with each one's fingerprint now;
    exactly those keys leave the cache and the key index learns their new state. Nothing else
    is re-read, so an unrelated commit (an admin editing a scope's description, a verifier's
    own last-used write) costs each process one small query, not a re-read of every key.

    Reads are numbered as they begin. A request that needs an up-to-date view takes a ticket
    (the number begun so far) and is answered only by a read numbered above it: one that began
    earlier may have read the log before the request's key was committed.
    """

    def __init__(
        self,
        source: CredentialSource,
        freshness: Freshness,
        index: KeyIndex,
        suspect: Callable[[list[Change] | None], None],
    ) -> None:
        self._source, self._freshness, self._index = source, freshness, index
        self._suspect = suspect  # takes these changed keys out of the warm cache (None: all)
        self.reset()

    def reset(self) -> None:
        """Unread (also after a fork: the lock may have been held by a parent's thread)."""
        self.lock = threading.Lock()
        self.synced: int | None = None  # the freshness generation the cache is valid under
        self._seq: int | None = None  # the log position read up to
        self._changed: dict[str, int] = {}  # id -> seq of its last change read
        self._floor = 0  # checks that began below this position may not cache what they read
        self._begun = self._read_by = 0

    def ticket(self) -> int:
        """The reads begun so far; `covers(ticket)` once a later one has finished."""
        return self._begun

    def covers(self, ticket: int) -> bool:
        """Whether the cache and index reflect a read begun after the ticket was taken."""
        return self._read_by > ticket

    def mark(self) -> int:
        """The log position now: a check notes it before reading a key, see `may_cache`."""
        return self._seq or 0

    def may_cache(self, public_id: str, mark: int) -> bool:
        """Whether a key read after `mark` is still current (call with `lock` held).

        A change read from the log while the check ran has already dropped the key from the
        cache; caching the check's older reading now would bring it back.
        """
        return mark >= self._floor and self._changed.get(public_id, -1) <= mark

    def sync(self) -> None:
        """Read the log since the last read (one query); in a CheckGate thread."""
        with self.lock:
            self._begun += 1
            number = self._begun
        generation = self._freshness.generation()  # before reading: later commits show next
        if self._seq is None:
            # The first read: the log position, then a snapshot from it in the background.
            self._seq = self._source.log_position()
            self._index.load_from(self._seq)
        else:
            changes = self._source.changes_since(self._seq)
            if changes is None:
                # Fell behind the pruned log: what changed is unknown, so trust nothing held.
                position = self._source.log_position()
                with self.lock:
                    self._suspect(None)
                    self._changed, self._floor, self._seq = {}, position, position
                self._index.load_from(position, distrust=True)
            elif changes:
                with self.lock:
                    if len(self._changed) + len(changes) > RECENT:
                        self._changed, self._floor = {}, changes[-1][0]
                    for seq, public_id, _, _ in changes:
                        self._changed[public_id] = seq
                    self._suspect(changes)
                    self._seq = changes[-1][0]
                self._index.apply(changes)
        with self.lock:
            self.synced, self._read_by = generation, max(self._read_by, number)
