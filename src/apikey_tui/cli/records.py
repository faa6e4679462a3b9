"""A command's record (words, help, arguments, examples, handler, database rule), and its Call."""

from __future__ import annotations

import os
from collections.abc import Iterator

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    from apikey_tui.store import KeyStore

    Handler = Callable[["Call"], int]

# How a command opens the database: what it does when the SQLite file it is given is missing.
# Only `keys create` and `owners add` (first commands) may make one by themselves, so a
# mistyped path never becomes an empty database that a change then reports as done
# (docs/reference/cli.md).
NO_DATABASE = "none"
MUST_EXIST = "must exist"
MAY_CREATE = "may create"
DEFAULT_ONLY = "default location only"
MAKES = "makes it"
VERIFIER = "never creates"
# What each rule does with a missing SQLite file (the CLI reference page prints it per command).
DATABASE_RULES = {
    NO_DATABASE: "opens none (`scan --offline` neither)",
    MUST_EXIST: "refused: `no database at …`, exit 1 (`scan`: 2); nothing is created",
    MAY_CREATE: "created in a folder that exists, or at the default location with its folder; "
    "said on stderr",
    DEFAULT_ONLY: "created only at the default location (a first run with neither "
    "`--database-url` nor `APIKEY_TUI_DATABASE_URL`); a path given is refused",
    MAKES: "created, folders too, with the tables: that is what it is for",
    VERIFIER: "never created: the verifier answers 503 until it can read the database",
}


class Arg:
    """One argument, as argparse's add_argument takes it."""

    __slots__ = ("flags", "options")

    def __init__(self, *flags: str, **options: Any) -> None:
        self.flags, self.options = flags, options

    @property
    def valued(self) -> bool:
        """Whether an option takes a value (the word after it is not a command)."""
        nargs_zero = self.options.get("nargs") == 0
        return not nargs_zero and self.options.get("action") not in {"store_true", "help"}


class Group:
    """Arguments shown under a title in --help, or of which one at most may be given."""

    __slots__ = ("arguments", "exclusive", "required", "title")

    def __init__(
        self, *arguments: Arg, title: str = "", exclusive: bool = False, required: bool = False
    ) -> None:
        self.arguments, self.title = arguments, title
        self.exclusive, self.required = exclusive, required


class Command:
    """A command, declared once: the parser, --help, completion, the CLI reference page and the
    database rule are all derived from these records (cli/commands.py holds them)."""

    __slots__ = (
        "arguments",
        "bug_exit",
        "children",
        "database",
        "description",
        "examples",
        "help",
        "refused_exit",
        "run",
        "words",
    )

    def __init__(
        self,
        words: str,
        *,
        help: str,
        run: Handler | None = None,
        database: str = NO_DATABASE,
        examples: tuple[str, ...] = (),
        arguments: tuple[Arg | Group, ...] = (),
        description: str = "",
        children: tuple[Command, ...] = (),
        refused_exit: int = 1,
        bug_exit: int = 1,
    ) -> None:
        if database not in DATABASE_RULES:
            raise ValueError(f"{words!r}: no database rule {database!r}")
        if run is None and not children:
            raise ValueError(f"{words!r}: a command runs a handler or holds commands")
        self.words, self.help, self.run, self.database = words, help, run, database
        self.examples, self.arguments, self.description = examples, arguments, description
        self.children = children
        # The exit code of a refusal (an ApiKeyError) and of a bug: 1 for most commands; scan's
        # 1 means "a live key was found", so its refusals and bugs say 2.
        self.refused_exit, self.bug_exit = refused_exit, bug_exit

    @property
    def name(self) -> str:
        """The last word: what the command is called among its group's."""
        return self.words.rpartition(" ")[2]

    def flat(self) -> Iterator[Arg]:
        """Every argument in order, groups opened."""
        for item in self.arguments:
            yield from item.arguments if isinstance(item, Group) else (item,)

    def walk(self) -> Iterator[Command]:
        """This command and every one under it, in the order --help lists them."""
        yield self
        for child in self.children:
            yield from child.walk()


class Call:
    """One run of a command: `args`, and the database URL, owner and store, each found only
    when the handler first asks (`scan --offline` imports no SQLAlchemy), under the record's
    database rule. The store is closed when the handler returns (`close`)."""

    def __init__(self, record: Command, args: argparse.Namespace) -> None:
        self.record, self.args = record, args
        self._url: str | None = None
        self._store: KeyStore | None = None

    def url(self) -> str:
        """The database URL (flag, environment, else the default file); under MUST_EXIST a
        SQLite file that is missing is refused here, before anything opens it."""
        if self._url is None:
            from apikey_tui.cli.database import must_exist
            from apikey_tui.config import resolve_database_url  # SQLAlchemy: not for --help

            url = resolve_database_url(getattr(self.args, "database_url", None))
            if self.record.database == MUST_EXIST:
                must_exist(url)
            self._url = url
        return self._url

    @property
    def owner(self) -> str:
        """--owner, else the login name."""
        from apikey_tui.config import current_user

        given: str | None = getattr(self.args, "owner", None)
        return given or current_user()

    def store(self) -> KeyStore:
        """The store, opened once: created if missing only as the record's rule allows."""
        if self._store is None:
            rule = self.record.database
            if rule == MAY_CREATE:
                create = True
            elif rule == DEFAULT_ONLY:
                create = self._default_location()
            elif rule == MUST_EXIST:
                create = False
            else:  # a record that says it opens no store asked for one: a bug, not a database
                raise RuntimeError(f"{self.record.words!r} opens no store (database: {rule})")
            from apikey_tui.cli.database import open_store

            self._store = open_store(self.url(), create=create)
        return self._store

    def close(self) -> None:
        """Close the store if the handler opened one."""
        if self._store is not None:
            self._store.close()
            self._store = None

    def _default_location(self) -> bool:
        # Neither --database-url nor the environment: a first run, not a path given by mistake.
        from apikey_tui.config import DATABASE_URL_ENV

        given = getattr(self.args, "database_url", None)
        return given is None and not os.environ.get(DATABASE_URL_ENV)
