"""Session: what a screen needs from the app it runs in (the store, whose keys, which database)."""

from __future__ import annotations

from typing import Protocol

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Batch, KeyStore
    from apikey_tui.tui.first_rows import OpeningStore


class Session(Protocol):
    """The narrow port screens are given: they never import the app, nor each other."""

    @property
    def store(self) -> KeyStore:
        """The store (while it is still opening, the caller waits for it)."""
        ...

    @property
    def opening(self) -> OpeningStore | None:
        """The store still opening, with the first rows read without it (tui/first_rows.py);
        None once it is open."""
        ...

    @property
    def owner(self) -> str | None:
        """Whose keys are shown; None: every owner's, with an owner column."""
        ...

    @property
    def default_owner(self) -> str:
        """The owner a new key gets when every owner's keys are shown."""
        ...

    @property
    def database_label(self) -> str: ...

    @property
    def poll_seconds(self) -> float: ...

    # The last change u can undo (a disable, enable, expiry or scopes batch), whichever screen
    # made it; every screen's next write clears it, so undo is offered until the next change.
    undoable: Batch | None
