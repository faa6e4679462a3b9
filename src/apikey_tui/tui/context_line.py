"""The top line of a screen: what is shown and on which database, fitted to any width.

Over SSH production and staging look alike, so the database is never dropped, and neither is
what tells two databases apart: when the full (password-masked) URL does not fit, a SQLite path
loses whole directories from its middle (never the file's own directory: `…/staging/keys.db`),
a server URL becomes host:port/database; the words around it give way first.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from rich.cells import cell_len, set_cell_size
from textual.content import Content
from textual.widget import Widget

from apikey_tui.config import plain_sqlite_path
from apikey_tui.names import printable

_ELLIPSIS = "…"


def database_forms(label: str) -> list[str]:
    """Ways to name the database, most telling first, each keeping what tells it from another.

    SQLite: the URL, the path, then the path with whole directories left out of its middle:
    the more directories next to the file the better, with the first one too when it differs
    from that; down to the file and its own directory. A server: the URL, then
    host[:port]/database (the port tells two clusters on one host apart).
    """
    plain = plain_sqlite_path(label)  # the first screen draws before SQLAlchemy is imported
    if plain is not None:
        return _sqlite_forms(label, plain)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(label)
    except (ArgumentError, ValueError):
        return [label]
    database = url.database or ""
    if url.get_backend_name() != "sqlite":
        host = url.host or "local socket"
        port = f":{url.port}" if url.port else ""
        forms = [label, f"{host}{port}/{database}"]
    elif not database or database == ":memory:":
        forms = [label, "in memory"]
    else:
        return _sqlite_forms(label, database)
    return list(dict.fromkeys(forms))  # in order, without repeats


def _sqlite_forms(label: str, database: str) -> list[str]:
    """A SQLite file's forms: the URL, the path, then the path with directories left out."""
    path = PurePosixPath(database)
    names = [part for part in path.parts if part != path.root]
    root = path.root
    forms = [label, database]
    for keep in range(len(names) - 1, 1, -1):  # keep the last `keep` names, at least two
        tail = "/".join(names[-keep:])
        if len(names) - keep >= 2:  # room to keep the first name and elide what lies between
            forms.append(f"{root}{names[0]}/{_ELLIPSIS}/{tail}")
        forms.append(f"{_ELLIPSIS}/{tail}")
    return list(dict.fromkeys(forms))  # in order, without repeats


def _cut_end(text: str, width: int) -> str:
    """text in at most width cells, its end replaced by '…' when cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + _ELLIPSIS if width > 0 else ""


def _cut_start(text: str, width: int) -> str:
    """text in at most width cells, its start replaced by '…' when cut."""
    if cell_len(text) <= width:
        return text
    while text and cell_len(text) > width - 1:
        text = text[1:]
    return _ELLIPSIS + text if width > 0 else ""


def fit_context(what: str, database_label: str, width: int) -> str:
    """The longest form that fits width; the database and what tells it apart always come through.

    The whole URL only with the word 'database'; then each shorter name of the database, with
    'database' and then 'db', before a shorter one (the URL's scheme and user say little);
    when even the shortest does not fit beside them, the database stands first and the words
    are cut at the end; when the database alone is too long, its start gives way to its end.
    """
    # Both parts may quote the database (a key's name and owner, the URL): shown, never obeyed.
    what = printable(what)
    full, *forms = [printable(form) for form in database_forms(database_label)]
    lines = [f"{what} · database: {full}"]  # the whole URL, or its telling part:
    for database in forms or [full]:
        lines += [f"{what} · database: {database}", f"{what} · db: {database}"]
    for line in lines:
        if cell_len(line) <= width:
            return line
    shortest = (forms or [full])[-1]
    if cell_len(f"db: {shortest}") <= width:
        return _cut_end(f"db: {shortest} · {what}", width)
    return _cut_start(shortest, width)


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
