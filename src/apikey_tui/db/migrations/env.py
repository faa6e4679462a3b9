"""Alembic's environment for apikey-tui's tables.

`apikey_tui.db.schema` runs it with a connection already inside a transaction (and, on
PostgreSQL, holding the schema advisory lock), so the whole upgrade commits or rolls back as
one. Run through the `alembic` command (a developer making a revision) it connects to
``-x url=...`` itself.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from apikey_tui.db.migrations import VERSION_TABLE, is_ours
from apikey_tui.db.models import Base


def run(connection: Connection) -> None:
    """Run the migrations Alembic was asked for on this connection."""
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,  # for autogenerate only; migrations never read it
        version_table=VERSION_TABLE,
        include_name=is_ours,
        render_as_batch=True,  # SQLite alters tables by copying them: autogenerate says so
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("apikey-tui's migrations run against a database, not as SQL scripts")
given = context.config.attributes.get("connection")
if given is not None:
    run(given)
else:
    url = context.get_x_argument(as_dictionary=True).get("url")
    if not url:
        raise SystemExit("name the database: alembic ... -x url=sqlite:////tmp/head.db ...")
    with create_engine(url).begin() as connection:
        run(connection)
