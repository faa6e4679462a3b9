"""What the verifier needs from the key database: a narrow port the store implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from apikey_tui.store.credentials import Change, Credential


class CredentialSource(Protocol):
    """Reads credentials and records use; nothing here can create a key or change a secret."""

    def open_reads(self, count: int) -> None:
        """Connect `count` reads now, so the first requests find them open."""

    def credential(self, public_id: str) -> Credential | None:
        """The key with this public id, its scopes and its stored hash, or None."""

    def key_count(self) -> int:
        """How many keys there are (to size the key index before loading it)."""

    def fingerprint_page(self, after: int, limit: int) -> tuple[int, list[tuple[str, str | None]]]:
        """Up to `limit` (public id, fingerprint) pairs of keys after row `after`, and the last row.

        A rotated key's previous id is listed too while its grace runs.
        """

    def log_position(self) -> int:
        """The newest entry's position in the change log."""

    def changes_since(self, seq: int) -> list[Change] | None:
        """(seq, public id, its fingerprint now, whether a key holds it) of every change after seq.

        None when entries after seq were pruned: the reader fell behind and must drop all.
        """

    def record_use(self, used: Mapping[str, datetime]) -> None:
        """Move last_used_at forward for these public ids."""

    def record_usage(
        self, rows: Sequence[tuple[str, int, int, int, str, int]], batch: str | None = None
    ) -> None:
        """Append usage counts (public_id, minute, span, kind, scope, requests), all or none;
        once only per batch id (a retry of a batch already written writes nothing)."""

    def add_fingerprint(
        self, public_id: str, fingerprint: str, *, wait: float | None = None
    ) -> bool:
        """Store a key of 0.1.0's fingerprint, unless it has one (skipped when the role may not)."""

    def replace_hash(
        self, public_id: str, old_hash: str, new_hash: str, *, wait: float | None = None
    ) -> None:
        """Store an upgraded hash of the same secret (skipped when the role may not)."""

    def release(self) -> None:
        """Return the connections kept for reads to the engine's pool (the engine stays open)."""

    def close(self) -> None:
        """Release the connections kept for reads, then the engine's pool."""
