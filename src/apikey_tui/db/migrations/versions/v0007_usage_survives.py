"""Schema version 7: a key's usage survives recreate and rotate; a usage flush is written once.

A new table apikey_tui_previous_id (public_id, key_id, replaced_at) lists every public id a key
had before its current one, so the usage counted under an old secret stays the key's. It is
filled from what the database already knows: each key's previous id in `old_public_id`, and
the chain of `key.recreate` and `key.rotate` events ("replaces <id>") back from its current id.

A new table apikey_tui_usage_batch (id, minute) takes one row per verifier flush, in the
flush's transaction: a retry of a flush whose answer was lost finds its id and writes nothing.
On PostgreSQL every role that may append usage is granted INSERT on it too, so verifiers keep
recording without a new `db grant-verifier`. Verifiers from schema version 4 on keep working
beside it (they append usage without a batch id).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from apikey_tui.db.migrations import grant_to_holders

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)  # apikey_tui.db.models.UTCDateTime renders as this
_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
_key = sa.table(
    "apikey_tui_key",
    sa.column("id", sa.Integer),
    sa.column("owner", sa.String),
    sa.column("name", sa.String),
    sa.column("public_id", sa.String),
    sa.column("old_public_id", sa.String),
    sa.column("created_at", UTC_DATETIME),
)
_event = sa.table(
    "apikey_tui_event",
    sa.column("id", sa.Integer),
    sa.column("at", UTC_DATETIME),
    sa.column("action", sa.String),
    sa.column("owner", sa.String),
    sa.column("key_name", sa.String),
    sa.column("public_id", sa.String),
    sa.column("detail", sa.String),
)
# Every release wrote a recreate's and a rotation's detail starting so (lifecycle.rotate_in).
_REPLACES = re.compile(r"replaces (ak[a-z2-7]{16})\b")
# Grant INSERT on the batch table to every role that may insert into the usage table.
_GRANT_BATCH = grant_to_holders(
    "INSERT", "apikey_tui_usage", "INSERT ON TABLE apikey_tui_usage_batch"
)


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def previous_ids(conn: sa.Connection) -> list[dict[str, Any]]:
    """Each key's earlier public ids: its old_public_id, and the recreate and rotate events'
    chain back from its current id (each step by the same owner and name)."""
    replaced: dict[str, tuple[str, datetime, str | None, str | None]] = {}
    events = (
        sa.select(
            _event.c.at, _event.c.owner, _event.c.key_name, _event.c.public_id, _event.c.detail
        )
        .where(_event.c.action.in_(("key.recreate", "key.rotate")))
        .order_by(_event.c.id)
    )
    for at, owner, name, public_id, detail in conn.execute(events):
        found = _REPLACES.match(detail or "")
        if public_id and found:
            replaced[public_id] = (found.group(1), _utc(at), owner, name)
    current = {row.public_id for row in conn.execute(sa.select(_key.c.public_id))}
    rows: dict[str, dict[str, Any]] = {}
    for key in conn.execute(sa.select(_key)):
        if key.old_public_id:
            rows[key.old_public_id] = {
                "public_id": key.old_public_id,
                "key_id": key.id,
                "replaced_at": _utc(key.created_at),
            }
        step = key.public_id
        while step in replaced:
            old, at, owner, name = replaced[step]
            if (owner, name) != (key.owner, key.name) or old in rows or old in current:
                break
            rows[old] = {"public_id": old, "key_id": key.id, "replaced_at": at}
            step = old
    return list(rows.values())


def upgrade() -> None:
    """Create both tables, list the previous ids known, and let usage writers mark batches."""
    previous = op.create_table(
        "apikey_tui_previous_id",
        sa.Column("public_id", sa.String(length=32), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("replaced_at", UTC_DATETIME, nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["apikey_tui_key.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("public_id"),
    )
    op.create_index("ix_apikey_tui_previous_id_key_id", "apikey_tui_previous_id", ["key_id"])
    op.create_table(
        "apikey_tui_usage_batch",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("minute", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    found = previous_ids(op.get_bind())
    if found:
        op.bulk_insert(previous, found)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_GRANT_BATCH)
    _set_version("7")


def downgrade() -> None:
    """Back to schema version 6: usage under an id the key no longer names is no longer its own."""
    op.drop_table("apikey_tui_usage_batch")
    op.drop_index("ix_apikey_tui_previous_id_key_id", table_name="apikey_tui_previous_id")
    op.drop_table("apikey_tui_previous_id")
    _set_version("6")
