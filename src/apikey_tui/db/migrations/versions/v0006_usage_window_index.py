"""Schema version 6: the usage table's minute index also holds kind, public id and requests.

ix_apikey_tui_usage_minute (minute) becomes ix_apikey_tui_usage_window (minute, kind, public_id,
requests): the Usage view's lists (the busiest keys, the refused, the wrong secrets of a window)
sum it without reading the table, and compaction still finds old rows by its first column. No
row changes; verifiers from schema version 4 on keep working beside it (they only append).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
_WINDOW = ["minute", "kind", "public_id", "requests"]


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Replace the minute index by the window index."""
    op.create_index("ix_apikey_tui_usage_window", "apikey_tui_usage", _WINDOW)
    op.drop_index("ix_apikey_tui_usage_minute", table_name="apikey_tui_usage")
    _set_version("6")


def downgrade() -> None:
    """Back to schema version 5: the minute index alone."""
    op.create_index("ix_apikey_tui_usage_minute", "apikey_tui_usage", ["minute"])
    op.drop_index("ix_apikey_tui_usage_window", table_name="apikey_tui_usage")
    _set_version("5")
