"""Fill a database with up to millions of keys in seconds (benchmarks only: fake hashes).

`benchmarks.bulk.fill` makes real keys with real (cheapest) hashes, which is what the verifier
benchmarks need; the table only shows names, ids, scopes and times, so here every secret hash is
the same placeholder, fingerprints are random and public ids come from a seeded generator: a
million keys load in about half a minute on SQLite.
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select, text

from apikey_tui import keyformat
from apikey_tui.db.models import KeyRow, KeyScopeRow
from apikey_tui.store import KeyStore

SCOPE_SETS = [("project",), ("project", "serving"), ("serving",)]
CHUNK = 20_000
FAKE_HASH = "$argon2id$v=19$m=8,t=1,p=1$benchmark$not-a-real-hash"


def fast_fill(url: str, count: int, *, owner: str = "bench", seed: int = 1) -> None:
    """Insert count keys named key-000000… for owner, with fake hashes (benchmark databases)."""
    if url.startswith("postgresql"):
        # A million rows in one executemany fill the server's socket while its triggers work
        # (the keys' terms index): the product's 2 s TCP user timeout, meant for a vanished
        # host, counts that zero window as unacknowledged data and drops the connection.
        url += ("&" if "?" in url else "?") + "tcp_user_timeout=0"
    store = KeyStore.open(url)
    rng = random.Random(seed)
    alphabet = keyformat.ALPHABET
    start = datetime(2025, 1, 1, tzinfo=UTC)
    with store.engine.begin() as conn:
        first = (conn.execute(select(func.max(KeyRow.id))).scalar() or 0) + 1
        for base in range(0, count, CHUNK):
            rows, scopes = [], []
            for n in range(base, min(base + CHUNK, count)):
                public_id = keyformat.PREFIX + "".join(rng.choices(alphabet, k=keyformat.ID_CHARS))
                rows.append(
                    {
                        "id": first + n,
                        "owner": owner,
                        "name": f"key-{n:06d}",
                        "public_id": public_id,
                        "secret_hash": FAKE_HASH,
                        # Random, like a real one's: the verifier's key index holds it.
                        "fingerprint": f"{rng.getrandbits(64):016x}",
                        "created_at": start + timedelta(seconds=30 * n),
                        # a third never used, the rest used at some time in the last year
                        "last_used_at": None
                        if n % 3 == 0
                        else start + timedelta(seconds=rng.randrange(365 * 86400)),
                    }
                )
                scopes += [{"key_id": first + n, "scope": s} for s in SCOPE_SETS[n % 3]]
            conn.execute(insert(KeyRow), rows)
            conn.execute(insert(KeyScopeRow), scopes)
        if conn.dialect.name == "postgresql" and count:
            table = KeyRow.__tablename__
            conn.execute(
                text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), :last)"),
                {"last": first + count - 1},
            )
            conn.execute(text(f"ANALYZE {table}"))
    store.close()


if __name__ == "__main__":  # python -m benchmarks.scale_data URL COUNT
    fast_fill(sys.argv[1], int(sys.argv[2]))
