"""One module per schema version; Alembic loads them by path (`apikey_tui.db.migrations`)."""
