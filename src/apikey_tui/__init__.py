"""API-key access for HTTP services: a terminal app for admins and a verifier for services."""

__version__ = "0.9.0"
# The database schema this release reads and writes (Alembic revision f"{SCHEMA_VERSION:04d}"
# in apikey_tui/db/migrations). A release that changes the schema gets a version of its own,
# and docs/changelog.md names both (a test holds the three together).
SCHEMA_VERSION = 11
