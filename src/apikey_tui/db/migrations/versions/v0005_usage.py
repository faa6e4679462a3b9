"""Schema version 5: usage counts per key, per minute (compacted to hours and days).

A new table apikey_tui_usage (public_id, minute, span, kind, scope, requests): verifiers append
their counts to it (INSERT, nothing more: on PostgreSQL every role that may write a key's
last_used_at, as `db grant-verifier` lets a verifier, is granted it here) and `db compact` rolls
old minutes into hours and days. Keys and their data are untouched, and a verifier of schema
version 4 keeps working beside it (it records no use): the meta row 'verifiers_from' says so.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from apikey_tui.db.migrations import grant_to_holders

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Create the usage table and say which verifiers still work beside it."""
    op.create_table(
        "apikey_tui_usage",
        sa.Column("public_id", sa.String(length=32), nullable=False),
        sa.Column("minute", sa.Integer(), nullable=False),
        sa.Column("span", sa.SmallInteger(), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("requests", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    )
    op.create_index("ix_apikey_tui_usage_key", "apikey_tui_usage", ["public_id", "minute"])
    op.create_index("ix_apikey_tui_usage_minute", "apikey_tui_usage", ["minute"])
    # Version 4 verifiers read nothing this version changed: they keep working (and record no
    # use). Admin tools of version 4 are still refused: they would not compact.
    op.bulk_insert(_meta, [{"key": "verifiers_from", "value": "4"}])
    if op.get_bind().dialect.name == "postgresql":
        # The last-used column is the one write a verifier grant gives: its holders are the
        # verifiers, which record use here (0007 and 0008 then grant on from this table).
        op.execute(
            grant_to_holders(
                "UPDATE", "apikey_tui_key", "INSERT ON apikey_tui_usage", column="last_used_at"
            )
        )
    _set_version("5")


def downgrade() -> None:
    """Back to schema version 4: the usage counts go."""
    op.execute(_meta.delete().where(_meta.c.key == "verifiers_from"))
    op.drop_index("ix_apikey_tui_usage_minute", table_name="apikey_tui_usage")
    op.drop_index("ix_apikey_tui_usage_key", table_name="apikey_tui_usage")
    op.drop_table("apikey_tui_usage")
    _set_version("4")
