"""Alembic migrations of apikey-tui's own tables, shipped inside the package.

Schema version n is the Alembic revision ``f"{n:04d}"`` in ``versions/``; `apikey_tui.db.schema`
runs them. Alembic keeps its bookkeeping in ``apikey_tui_alembic_version``, so a service's own
Alembic history (``alembic_version``) in the same database is never read or touched, and the
migrations create and alter only ``apikey_tui_*`` tables.

A new revision, made against a database at the current head::

    alembic -c src/apikey_tui/db/migrations/alembic.ini -x url=sqlite:////tmp/head.db \\
        revision --autogenerate --rev-id 0003 -m "what changes"

then write it out by hand where autogenerate guesses (types from `apikey_tui.db.models` become
plain SQLAlchemy types: a migration never imports the models it outlives), use
``op.batch_alter_table`` for SQLite, set the meta row ``schema_version`` to the new number and
raise `apikey_tui.db.models.SCHEMA_VERSION` to match.
"""

from __future__ import annotations

from pathlib import Path

from apikey_tui.db import key_indexes

LOCATION = Path(__file__).parent
VERSION_TABLE = "apikey_tui_alembic_version"
TABLE_PREFIX = "apikey_tui_"


def revision_of(version: int) -> str:
    """The Alembic revision id of a schema version."""
    return f"{version:04d}"


def is_ours(name: str | None, type_: str, parent_names: object) -> bool:
    """Autogenerate's include_name hook: look only at apikey-tui's tables, never a service's."""
    if type_ == "schema":
        return name is None  # the connection's own schema (its search_path), no other
    # The key table's indexes are no part of any schema version (`key_indexes`).
    if type_ == "table":
        if name is None:
            return False
        return name.startswith(TABLE_PREFIX) and not name.startswith(key_indexes.SEARCH_TABLE)
    if type_ == "index":
        return name not in key_indexes.INDEXES
    return True


def grant_to_holders(privilege: str, table: str, grant: str, column: str | None = None) -> str:
    """A PostgreSQL block that runs ``GRANT {grant} TO`` every role holding `privilege` on
    `table` (on its `column` alone, when named), PUBLIC included and the table's owner aside.

    A migration that adds a table a verifier needs gives it to the roles an older `db
    grant-verifier` made, so services keep working through `db upgrade` without a new grant.
    """
    if column is None:
        holders = f"pg_catalog.pg_class c, aclexplode(c.relacl) a WHERE c.oid = '{table}'::regclass"
    else:
        holders = (
            "pg_catalog.pg_class c JOIN pg_catalog.pg_attribute att ON att.attrelid = c.oid, "
            f"aclexplode(att.attacl) a WHERE c.oid = '{table}'::regclass "
            f"AND att.attname = '{column}'"
        )
    # Names and privileges are the migrations' own constants, never input.
    return f"""
DO $$
DECLARE grantee oid;
BEGIN
  FOR grantee IN
    SELECT DISTINCT a.grantee FROM {holders}
      AND a.privilege_type = '{privilege}' AND a.grantee <> c.relowner
  LOOP
    IF grantee = 0 THEN
      EXECUTE 'GRANT {grant} TO PUBLIC';
    ELSE
      EXECUTE format('GRANT {grant} TO %s', grantee::regrole);
    END IF;
  END LOOP;
END
$$
"""  # noqa: S608
