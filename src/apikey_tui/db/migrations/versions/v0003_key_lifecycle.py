"""Schema version 3: expiry, disable and rotation with a grace window on each key.

New nullable columns on apikey_tui_key: expires_at (indexed: `keys list --expiring`),
disabled_at and disabled_reason, and the previous secret of a rotation (old_public_id, unique,
old_secret_hash, old_fingerprint) with grace_until, the moment it stops working. Every existing
key keeps working exactly as before: no expiry, enabled, nothing in grace. The lifetime policy
is a row of apikey_tui_meta ('max_lifetime_seconds'); there is none until an admin sets one.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # apikey_tui.db.models.UTCDateTime renders as this
POLICY = "max_lifetime_seconds"
_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
_key = sa.table(
    "apikey_tui_key", sa.column("expires_at", UTC_DATETIME), sa.column("disabled_at", UTC_DATETIME)
)


def _set_version(version: str) -> None:
    # An older program reads this row and refuses any version but its own: fail-closed.
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Add the lifecycle columns (NULL for existing keys) and their two indexes."""
    # Batch mode is a no-op wrapper here: SQLite adds nullable columns and indexes in place.
    # old_public_id is unique through a unique index, not a constraint, for the same reason:
    # a constraint would make SQLite copy the table (see downgrade of 0002).
    with op.batch_alter_table("apikey_tui_key") as batch:
        batch.add_column(sa.Column("expires_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("disabled_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("disabled_reason", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("old_public_id", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("old_secret_hash", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("old_fingerprint", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("grace_until", UTC_DATETIME, nullable=True))
        batch.create_index("ix_apikey_tui_key_expires_at", ["expires_at"], unique=False)
        batch.create_index("ix_apikey_tui_key_old_public_id", ["old_public_id"], unique=True)
    _set_version("3")


def downgrade() -> None:
    """Back to schema version 2; refused while any key is disabled or has an expiry.

    Version 2 has no place for either, so such a key would silently work again, for ever.
    Old secrets in grace simply stop (fail-closed), and the lifetime policy is dropped.
    """
    held = sa.or_(_key.c.expires_at.is_not(None), _key.c.disabled_at.is_not(None))
    count = sa.select(sa.func.count()).select_from(_key).where(held)
    bound = op.get_bind().execute(count).scalar_one()
    if bound:
        raise RuntimeError(
            f"{bound} key(s) are disabled or expire, which schema version 2 cannot hold: "
            "they would work again with no end; delete them (or enable them and set their "
            "expiry to never) before downgrading"
        )
    op.drop_index("ix_apikey_tui_key_old_public_id", table_name="apikey_tui_key")
    op.drop_index("ix_apikey_tui_key_expires_at", table_name="apikey_tui_key")
    # Not batch mode: copying apikey_tui_key on SQLite would drop the original table, and with
    # foreign keys on that deletes every key's scopes. SQLite 3.35+ drops a column in place.
    for name in (
        "grace_until",
        "old_fingerprint",
        "old_secret_hash",
        "old_public_id",
        "disabled_reason",
        "disabled_at",
        "expires_at",
    ):
        op.drop_column("apikey_tui_key", name)
    op.execute(_meta.delete().where(_meta.c.key == POLICY))
    _set_version("2")
