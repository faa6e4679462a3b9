"""Schema version 4: the change log, so verifiers drop exactly the keys that changed.

A new table apikey_tui_change (seq, public_id, changed_at): every change to a key appends its
id(s) in the same transaction. It starts with one row (public_id '', seq 1) that marks the
log's beginning: a reader that saw it and still finds it knows it missed nothing. Keys and
their data are untouched; a verifier of this version reads the table: on PostgreSQL every role
that may read apikey_tui_key is granted SELECT on it, so verifiers granted by an older `db
grant-verifier` keep working after the upgrade.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from apikey_tui.clock import system_clock
from apikey_tui.db.migrations import grant_to_holders

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # apikey_tui.db.models.UTCDateTime renders as this
_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))


def _set_version(version: str) -> None:
    # An older program reads this row and refuses any version but its own: fail-closed. That
    # matters here: a 0.3 admin would change keys without writing the log.
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Create the change log with its first row."""
    change = op.create_table(
        "apikey_tui_change",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("public_id", sa.String(length=32), nullable=False),
        sa.Column("changed_at", UTC_DATETIME, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_apikey_tui_change_changed_at", "apikey_tui_change", ["changed_at"])
    # The moment only decides when this row may be pruned; the newest row never is.
    op.bulk_insert(change, [{"public_id": "", "changed_at": system_clock()}])
    if op.get_bind().dialect.name == "postgresql":
        # A verifier reads the log for every check's freshness: without it every check is 503.
        op.execute(grant_to_holders("SELECT", "apikey_tui_key", "SELECT ON apikey_tui_change"))
    _set_version("4")


def downgrade() -> None:
    """Back to schema version 3: the log goes; verifiers of version 3 re-read keys instead."""
    op.drop_index("ix_apikey_tui_change_changed_at", table_name="apikey_tui_change")
    op.drop_table("apikey_tui_change")
    _set_version("3")
