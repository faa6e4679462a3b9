"""What the verifier needs from the key database: a narrow port the store implements."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from apikey_tui.store.credentials import Credential


class CredentialSource(Protocol):
    """Reads credentials and records use; nothing here can create a key or change a secret."""

    def credential(self, public_id: str) -> Credential | None:
        """The key with this public id, its scopes and its stored hash, or None."""

    def key_fingerprints(
        self, created_since: datetime | None = None
    ) -> list[tuple[str, str | None, datetime]]:
        """(public id, fingerprint, created at) of every key, or of those created since."""

    def record_use(self, used: Mapping[str, datetime]) -> None:
        """Move last_used_at forward for these public ids."""

    def replace_hash(self, public_id: str, old_hash: str, new_hash: str) -> None:
        """Store an upgraded hash of the same secret (skipped when the role may not)."""
