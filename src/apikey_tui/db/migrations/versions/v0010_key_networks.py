"""Schema version 10: where a key may be used from, per key and per owner, and usage by network.

A new nullable column apikey_tui_key.networks holds a key's network rules ('shadow +10.0.0.0/8
-10.9.0.0/16', None for anywhere) and a new table apikey_tui_owner_network (owner, networks) an
owner's, which every key of the owner must pass too. Usage rows of kinds 4, 5 and 6 count
requests refused for the network, would-be refusals in shadow mode, and the client networks a
key was used from (no schema change: the kind is a small integer, the scope text the network).
On PostgreSQL every role that may read apikey_tui_key is granted SELECT on the owner table, so
verifiers read owner rules without a new `db grant-verifier`. Verifiers from schema version 4
on keep working beside it; they do not enforce networks (docs/reference/networks.md).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from apikey_tui.db.migrations import grant_to_holders

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

_meta = sa.table("apikey_tui_meta", sa.column("key", sa.String), sa.column("value", sa.String))
# Every role that may read keys may read owners' rules: a verifier needs both for one check.
_GRANT_OWNER_NETWORKS = grant_to_holders(
    "SELECT", "apikey_tui_key", "SELECT ON TABLE apikey_tui_owner_network"
)


def _set_version(version: str) -> None:
    op.execute(_meta.update().where(_meta.c.key == "schema_version").values(value=version))


def upgrade() -> None:
    """Add the key's networks column and the owners' networks table."""
    # ADD COLUMN in place on SQLite (see 0009: batch mode would copy the key table).
    op.add_column("apikey_tui_key", sa.Column("networks", sa.Text(), nullable=True))
    op.create_table(
        "apikey_tui_owner_network",
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("networks", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("owner"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_GRANT_OWNER_NETWORKS)
    _set_version("10")


def _enforcing(table: str) -> int:
    """Rows of this table whose rules refuse requests: every one but shadow mode's (rules that
    cannot be read refuse everything, as the verifier reads them)."""
    networks = sa.column("networks", sa.String)
    enforcing = sa.and_(networks.is_not(None), networks.not_like("shadow %"))
    query = sa.select(sa.func.count()).select_from(sa.table(table, networks)).where(enforcing)
    return int(op.get_bind().execute(query).scalar_one())


def downgrade() -> None:
    """Back to schema version 9: network rules are forgotten, and usage by network with them;
    refused while any rule refuses requests (as 0003's downgrade refuses disabled keys).

    Version 9 has no place for rules, so a key kept from a network would work from anywhere.
    """
    keys, owners = _enforcing("apikey_tui_key"), _enforcing("apikey_tui_owner_network")
    if keys or owners:
        raise RuntimeError(
            f"{keys} key(s) and {owners} owner(s) have network rules in enforce mode, which "
            "schema version 9 cannot hold: their keys would work from anywhere; lift the rules "
            "(keys set-networks NAME none, owners set-networks OWNER none) or put them in "
            "shadow mode before downgrading"
        )
    op.execute("DELETE FROM apikey_tui_usage WHERE kind IN (4, 5, 6)")
    op.drop_table("apikey_tui_owner_network")
    op.drop_column("apikey_tui_key", "networks")
    _set_version("9")
