"""How the CLI opens a database: never creating one that must exist, saying when it makes one."""

from __future__ import annotations

import os
import sys

from apikey_tui.errors import StoreUnavailableError

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore


def _sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names; None for PostgreSQL and for an in-memory database."""
    from apikey_tui.config import parse_database_url

    parsed = parse_database_url(url)
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    return path


def must_exist(url: str) -> None:
    """Refuse a SQLite URL whose file is missing: a mistyped path must not become a database."""
    path = _sqlite_file(url)
    if path is not None and not os.path.exists(path):  # a mistyped path: never a new database
        raise StoreUnavailableError(
            f"no database at {path}; check the path, or create it with "
            "'apikey-tui keys create NAME --scope SCOPE' or 'apikey-tui db upgrade'"
        )


def open_store(url: str, *, create: bool) -> KeyStore:
    """Open the store; with create=False a SQLite database is never created.

    PostgreSQL opens as before: there a missing database is an error of the server, and the
    schema check without create reports a role lacking USAGE on the schema as "no tables".
    """
    from apikey_tui.db import ensure_schema, make_engine
    from apikey_tui.store import KeyStore

    path = _sqlite_file(url)
    if path is None:
        return KeyStore.open(url)
    if create:
        return _create_or_open(url, path)
    must_exist(url)
    engine = make_engine(url, create=False)
    try:
        ensure_schema(engine, create=False)
    except BaseException:
        engine.dispose()
        raise
    return KeyStore(engine)


def _create_or_open(url: str, path: str) -> KeyStore:
    """Open a SQLite database for `keys create` (or the app's first run), making it if missing.

    A new database is said on stderr (a mistyped path must not pass unnoticed), and a missing
    folder is created only for the default location: elsewhere it is most likely a typo.
    """
    from apikey_tui.config import default_database_path
    from apikey_tui.store import KeyStore

    where = os.path.abspath(path)
    if os.path.exists(where):
        return KeyStore.open(url)
    folder = os.path.dirname(where)
    if not os.path.isdir(folder) and where != str(default_database_path()):
        raise StoreUnavailableError(
            f"no folder {folder} for a new database at {where}; check the path, or create "
            "the folder first"
        )
    store = KeyStore.open(url)
    try:
        print(f"apikey-tui: created a new database at {where}", file=sys.stderr, flush=True)
    except OSError:  # a note nobody can read must not fail the command it precedes
        pass
    return store
