"""The database: engines, the error mapper, the schema and its migrations, the tables."""

from apikey_tui.db.driver_errors import FOREIGN_KEY, UNIQUE, Conflicts, database_errors
from apikey_tui.db.engine import (
    ADMIN_APPLICATION,
    LISTENER_APPLICATION,
    POSTGRES_CONNECT_TIMEOUT_S,
    POSTGRES_KEEPALIVES,
    POSTGRES_POOL_TIMEOUT_S,
    POSTGRES_TCP_USER_TIMEOUT_MS,
    READ,
    SQLITE_BUSY_TIMEOUT_MS,
    VERIFIER_APPLICATION,
    WRITE,
    ensure_schema,
    make_engine,
    postgres_connection,
    upgrade_schema,
    use_wal,
)

__all__ = [
    "ADMIN_APPLICATION",
    "FOREIGN_KEY",
    "LISTENER_APPLICATION",
    "POSTGRES_CONNECT_TIMEOUT_S",
    "POSTGRES_KEEPALIVES",
    "POSTGRES_POOL_TIMEOUT_S",
    "POSTGRES_TCP_USER_TIMEOUT_MS",
    "READ",
    "SQLITE_BUSY_TIMEOUT_MS",
    "UNIQUE",
    "VERIFIER_APPLICATION",
    "WRITE",
    "Conflicts",
    "database_errors",
    "ensure_schema",
    "make_engine",
    "postgres_connection",
    "upgrade_schema",
    "use_wal",
]
