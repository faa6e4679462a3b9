"""Errors the app did not foresee: one line for the admin, a traceback without locals in a log.

Textual prints a crash as a rich traceback with every frame's local variables: in a rotation
those are the new key's plaintext, its argon2 hash and its fingerprint. The app never lets it
print one (textual_private.QuietCrashes); instead the error is logged here with Python's logging,
whose tracebacks hold file, line and code, never a value, and the admin reads one line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from io import TextIOWrapper
from pathlib import Path

from apikey_tui.config import xdg_home

log = logging.getLogger("apikey_tui.tui")


class _PrivateFileHandler(logging.FileHandler):
    """A log file only its owner can read (0600), made on the first record, not before."""

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return open(descriptor, "a", encoding=self.encoding, errors=self.errors)


def log_path(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/apikey-tui/app.log (~/.local/state): where XDG puts logs."""
    return xdg_home("XDG_STATE_HOME", ".local/state", env) / "apikey-tui" / "app.log"


@contextmanager
def logging_to_file(path: Path) -> Iterator[None]:
    """While the app runs, its unforeseen errors are appended to path (made 0600 when needed)."""
    handler = _PrivateFileHandler(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        handler.close()


def _where() -> str:
    files = [h.baseFilename for h in log.handlers if isinstance(h, _PrivateFileHandler)]
    return f"; details (no secrets) in {files[0]}" if files else ""


def unforeseen(error: BaseException, doing: str) -> str:
    """Log error with its traceback (never a frame's locals); return one line saying what failed.

    The line names the error's type, not its text: an unforeseen error's text was never meant
    for the screen.
    """
    log.error("%s failed", doing, exc_info=error)
    return f"{doing} failed on an unexpected error ({type(error).__name__}){_where()}"
