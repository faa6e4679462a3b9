"""The top line of a screen: what is shown and on which database, fitted to any width.

Over SSH production and staging look alike, so the database is never dropped: when the full
(password-masked) URL does not fit, it is shortened to host/database for PostgreSQL or the
file name for SQLite, and the words around it give way first.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from rich.cells import cell_len
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from textual.content import Content
from textual.widget import Widget

from apikey_tui.names import printable


def short_database(label: str) -> str:
    """host[:port]/database for a server, the file name for SQLite; the label if unparsable."""
    try:
        url = make_url(label)
    except (ArgumentError, ValueError):
        return label
    database = url.database or ""
    if url.get_backend_name() == "sqlite":
        if not database or database == ":memory:":
            return "in memory"
        return PurePosixPath(database).name or database
    host = url.host or "local socket"
    port = f":{url.port}" if url.port else ""
    return f"{host}{port}/{database}"


def fit_context(what: str, database_label: str, width: int) -> str:
    """The longest of a few forms that fits width; the database name always comes through.

    When even the shortest form is too long it is cut at the end with "…", and the database
    stands first in it, so what is cut is never the database's own name.
    """
    # Both parts may quote the database (a key's name and owner, the URL): shown, never obeyed.
    what = printable(what)
    full, short = printable(database_label), printable(short_database(database_label))
    forms = [
        f"{what} · database: {full}",
        f"{what} · database: {short}",
        f"{what} · db: {short}",
        f"db: {short} · {what}",
    ]
    for form in forms:
        if cell_len(form) <= width:
            return form
    last = forms[-1]
    return last if width <= 1 else last[: max(width - 1, 0)] + "…"


class ContextLine(Widget):
    """One line naming what the screen shows and the database, shortened to fit its width."""

    def __init__(self, what: str, database_label: str, *, id: str | None = "context") -> None:
        super().__init__(id=id)
        self._what, self._database = what, database_label

    def set_what(self, what: str) -> None:
        """Change what the line says is shown (e.g. after switching owner)."""
        self._what = what
        self.refresh()

    @property
    def text(self) -> str:
        """The line as drawn at the current width."""
        return fit_context(self._what, self._database, self.content_region.width)

    def render(self) -> Content:
        return Content(self.text)

    def on_resize(self) -> None:
        self.refresh()
