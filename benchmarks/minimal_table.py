"""The baselines of the app's first rows: the least a Textual app showing a table of keys does.

`python -m benchmarks.minimal_table` imports Textual, mounts a DataTable with six columns and
40 rows named as the app's first keys are (key-000000…), and nothing else: no database, no
header, no footer. With `--with-sqlmodel` it first imports what the app's store is built on
(SQLModel, SQLAlchemy and its SQLite dialect), without opening anything: the floor of an app
that reads its rows through them. bench_tui times both in tmux beside the app.
"""

import sys

if "--with-sqlmodel" in sys.argv:
    import sqlalchemy.dialects.sqlite  # noqa: F401
    import sqlmodel  # noqa: F401

from textual.app import App, ComposeResult
from textual.widgets import DataTable


class MinimalTable(App[None]):
    """One DataTable, filled on mount."""

    def compose(self) -> ComposeResult:
        yield DataTable()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Name", "Public id", "Scopes", "Created", "Last used", "Expires")
        for n in range(40):
            table.add_row(f"key-{n:06d}", "ak_xxxxxxxx", "project", "2025-01-01", "-", "never")


if __name__ == "__main__":
    MinimalTable().run()
