"""Schema version 8: limits per key and per owner keep their counts in the key database.

Two new tables, written by verifiers only (`apikey_tui.limits.sql_store`):
apikey_tui_limit_count (limit_key, window_index, used, last_grant, ends_at) holds each limit's
tokens granted per epoch-aligned window, and apikey_tui_limit_boot holds the one boot marker.
On PostgreSQL both are UNLOGGED: no WAL per lease, and a crash empties both together, which the
verifiers notice (the marker is gone) and answer by granting nothing in the windows running then.
On PostgreSQL every role that may append usage is granted SELECT, INSERT, UPDATE and DELETE on
both, so verifiers count without a new `db grant-verifier`. Verifiers from schema version 4 on
keep working beside it (they never read these tables).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from apikey_tui.db.migrations import grant_to_holders

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
_GRANT_COUNTS = grant_to_holders(
    "INSERT",
    "apikey_tui_usage",
    "SELECT, INSERT, UPDATE, DELETE ON TABLE apikey_tui_limit_count, apikey_tui_limit_boot",
)


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Create both tables (UNLOGGED on PostgreSQL) and let verifiers write them."""
    postgres = op.get_bind().dialect.name == "postgresql"
    unlogged: dict[str, Any] = {"prefixes": ["UNLOGGED"]} if postgres else {}
    op.create_table(
        "apikey_tui_limit_count",
        sa.Column("limit_key", sa.String(length=255), nullable=False),
        sa.Column("window_index", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.BigInteger(), nullable=False),
        sa.Column("last_grant", sa.BigInteger(), nullable=False),
        sa.Column("ends_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("limit_key", "window_index"),
        **unlogged,
    )
    op.create_index("ix_apikey_tui_limit_count_ends_at", "apikey_tui_limit_count", ["ends_at"])
    op.create_table(
        "apikey_tui_limit_boot",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("boot", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("lost_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        **unlogged,
    )
    if postgres:
        op.execute(_GRANT_COUNTS)
    _set_version("8")


def downgrade() -> None:
    """Back to schema version 7: limits have nowhere to count."""
    op.drop_table("apikey_tui_limit_boot")
    op.drop_index("ix_apikey_tui_limit_count_ends_at", table_name="apikey_tui_limit_count")
    op.drop_table("apikey_tui_limit_count")
    _set_version("7")
