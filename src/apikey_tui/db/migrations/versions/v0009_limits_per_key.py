"""Schema version 9: limits per key and per owner, and usage refused by a limit (kind 3).

A new nullable column apikey_tui_key.limits holds a key's own limits ('10/s 600/m', None for
none) and a new table apikey_tui_owner_limit (owner, limits) an owner's pool. Usage rows of
kind 3 count requests refused with 429 (no schema change: the kind is a small integer).
On PostgreSQL every role that may read apikey_tui_key is granted SELECT on the owner table, so
verifiers read owner limits without a new `db grant-verifier`. Verifiers from schema version 4
on keep working beside it; they do not enforce limits (docs/reference/limits.md).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from apikey_tui.db.migrations import grant_to_holders

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
# Every role that may read keys may read owners' limits: a verifier needs both for one check.
_GRANT_OWNER_LIMITS = grant_to_holders(
    "SELECT", "apikey_tui_key", "SELECT ON TABLE apikey_tui_owner_limit"
)


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Add the key's limits column and the owners' limits table."""
    # ADD COLUMN in place on SQLite (batch mode would copy the key table, and dropping the
    # original with foreign keys on would delete every key's scopes).
    op.add_column("apikey_tui_key", sa.Column("limits", sa.String(length=200), nullable=True))
    op.create_table(
        "apikey_tui_owner_limit",
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("limits", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("owner"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_GRANT_OWNER_LIMITS)
    _set_version("9")


def downgrade() -> None:
    """Back to schema version 8: limits are forgotten, and 429 counts with them."""
    op.execute("DELETE FROM apikey_tui_usage WHERE kind = 3")
    op.drop_table("apikey_tui_owner_limit")
    # Not batch mode (see 0003): SQLite 3.35+ drops a column in place.
    op.drop_column("apikey_tui_key", "limits")
    _set_version("8")
