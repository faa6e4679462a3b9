"""Fill a database with many keys quickly (one transaction), for benchmarks only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select, text

from apikey_tui import keyformat
from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.store import KeyStore

SCOPE_SETS = [("project",), ("project", "serving"), ("serving",)]


def fill(url: str, count: int, *, profile: str = "cheapest", owner: str = "bench") -> list[str]:
    """Insert count keys for owner and return their plaintexts (benchmark databases only)."""
    store = KeyStore.open(url)
    hasher = SecretHasher(profile)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    keys, rows, scopes = [], [], []
    with store.engine.begin() as conn:
        first = (conn.execute(select(func.max(KeyRow.id))).scalar() or 0) + 1
        for n in range(count):
            parts, plaintext = keyformat.generate()
            keys.append(plaintext)
            rows.append(
                {
                    "id": first + n,
                    "owner": owner,
                    "name": f"key-{n:06d}",
                    "public_id": parts.public_id,
                    "secret_hash": hasher.hash(parts.secret),
                    # As the store writes it: the index's size and refusals depend on it.
                    "fingerprint": fingerprint(parts.public_id, parts.secret),
                    "created_at": start + timedelta(minutes=n),
                    "last_used_at": None,
                }
            )
            scopes += [{"key_id": first + n, "scope": s} for s in SCOPE_SETS[n % 3]]
        for chunk in range(0, count, 5000):
            conn.execute(insert(KeyRow), rows[chunk : chunk + 5000])
        for chunk in range(0, len(scopes), 10000):
            conn.execute(insert(KeyScopeRow), scopes[chunk : chunk + 10000])
        if conn.dialect.name == "postgresql" and count:
            # Explicit ids do not move PostgreSQL's sequence: move it, or the next key the store
            # creates would collide with these.
            table = KeyRow.__tablename__
            conn.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), :last)"),
                {"last": first + count - 1},
            )
    store.close()
    return keys
