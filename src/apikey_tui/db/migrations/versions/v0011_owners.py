"""Schema version 11: owners of three kinds with members, metadata and tags; keys' creators.

The owners' table of schema 9 (apikey_tui_owner_limit, kept by that name so verifiers of 0.7.0
and 0.8.0 keep working beside it) gains kind ('person', 'team' or 'service'), description and
meta, and its limits become optional; every owner of a key or of network rules (schema 10's
apikey_tui_owner_network) gets a row, a person. A new table
apikey_tui_owner_member lists teams' members and service accounts' responsible people. Keys
gain created_by (the actor of the key's newest key.create event, where the trail has one),
meta (JSON, for services) and tags ('env=prod', for admins). Verifiers from schema version 4
on keep working beside it: they read no new column.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from apikey_tui.db import key_indexes

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
# Each key's creator: the actor of the newest key.create event of its owner and name (a key
# deleted and made again under one name has several). One UPDATE ... FROM a grouped read of
# the trail: a correlated subquery per key would scan the events once per key.
_CREATORS = """
UPDATE apikey_tui_key SET created_by = made.actor
FROM (
  SELECT e.owner, e.key_name, e.actor FROM apikey_tui_event e
  JOIN (
    SELECT MAX(id) AS id FROM apikey_tui_event
    WHERE action = 'key.create' GROUP BY owner, key_name
  ) newest ON newest.id = e.id
) AS made
WHERE made.owner = apikey_tui_key.owner AND made.key_name = apikey_tui_key.name
"""
_PEOPLE = """
INSERT INTO apikey_tui_owner_limit (owner, kind, description)
SELECT owner, 'person', '' FROM (
  SELECT owner FROM apikey_tui_key UNION SELECT owner FROM apikey_tui_owner_network
) AS named
WHERE owner NOT IN (SELECT owner FROM apikey_tui_owner_limit)
"""


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Give owners kinds, members and metadata, and keys their creator, metadata and tags."""
    # ADD COLUMN in place on SQLite (batch mode would copy the key table, and dropping the
    # original with foreign keys on would delete every key's scopes).
    op.add_column("apikey_tui_key", sa.Column("created_by", sa.String(length=64), nullable=True))
    op.add_column("apikey_tui_key", sa.Column("meta", sa.Text(), nullable=True))
    op.add_column("apikey_tui_key", sa.Column("tags", sa.String(length=400), nullable=True))
    op.create_index("ix_apikey_tui_key_created_by", "apikey_tui_key", ["created_by"])
    # The owners' table is small and nothing refers to it yet: SQLite may copy it (batch mode)
    # to make its limits optional.
    with op.batch_alter_table("apikey_tui_owner_limit") as batch:
        batch.alter_column("limits", existing_type=sa.String(length=200), nullable=True)
        batch.add_column(
            sa.Column("kind", sa.String(length=8), nullable=False, server_default="person")
        )
        batch.add_column(
            sa.Column("description", sa.String(length=200), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("meta", sa.Text(), nullable=True))
    op.execute(_PEOPLE)
    op.create_table(
        "apikey_tui_owner_member",
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("member", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["owner"], ["apikey_tui_owner_limit.owner"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["member"], ["apikey_tui_owner_limit.owner"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("owner", "member"),
    )
    op.create_index("ix_apikey_tui_owner_member_member", "apikey_tui_owner_member", ["member"])
    op.execute(_CREATORS)
    _set_version("11")


def downgrade() -> None:
    """Back to schema version 10: kinds, members, metadata, tags and creators are forgotten."""
    op.drop_index("ix_apikey_tui_owner_member_member", table_name="apikey_tui_owner_member")
    op.drop_table("apikey_tui_owner_member")
    op.execute("DELETE FROM apikey_tui_owner_limit WHERE limits IS NULL")
    with op.batch_alter_table("apikey_tui_owner_limit") as batch:
        batch.drop_column("meta")
        batch.drop_column("description")
        batch.drop_column("kind")
        batch.alter_column("limits", existing_type=sa.String(length=200), nullable=False)
    op.drop_index("ix_apikey_tui_key_created_by", table_name="apikey_tui_key")
    # The filter's indexes of tags (`db.key_indexes`, no part of the schema): SQLite will not
    # drop a column its triggers name, and PostgreSQL's trigger function reads the column.
    if op.get_bind().dialect.name == "sqlite":
        for trigger in key_indexes.SQLITE_TAG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        for table in (key_indexes.TAGS_TABLE, key_indexes.TERMS_TABLE):
            op.execute(f"DROP TABLE IF EXISTS {table}")
    else:
        for statement in key_indexes.PG_TERMS_DROP:
            op.execute(statement)
    # Not batch mode (see 0003): SQLite 3.35+ drops a column in place.
    op.drop_column("apikey_tui_key", "tags")
    op.drop_column("apikey_tui_key", "meta")
    op.drop_column("apikey_tui_key", "created_by")
    _set_version("10")
