"""Schema version 2: a fingerprint beside each key's hash, and an index on created_at.

The verifier compares the fingerprint before argon2 (so a wrong secret costs next to nothing)
and reads keys created since a time (hence the index). Keys made before this have no
fingerprint, and none can be made for them: their secrets are not stored.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))


def _set_version(version: str) -> None:
    # A 0.1.0 program reads this row and refuses any version but its own: fail-closed.
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Add apikey_tui_key.fingerprint (NULL for existing keys) and index created_at."""
    # Batch mode is a no-op wrapper here: SQLite adds a column and an index in place.
    with op.batch_alter_table("apikey_tui_key") as batch:
        batch.add_column(sa.Column("fingerprint", sa.String(length=16), nullable=True))
        batch.create_index("ix_apikey_tui_key_created_at", ["created_at"], unique=False)
    _set_version("2")


def downgrade() -> None:
    """Back to the 0.1.0 schema; fingerprints are lost, keys keep working."""
    op.drop_index("ix_apikey_tui_key_created_at", table_name="apikey_tui_key")
    # Not batch mode: copying apikey_tui_key on SQLite would drop the original table, and with
    # foreign keys on that deletes every key's scopes. SQLite 3.35+ drops a column in place.
    op.drop_column("apikey_tui_key", "fingerprint")
    _set_version("1")
