"""The one place that resets, in a forked child, what must not cross a fork."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

_resets: list[weakref.WeakMethod[Callable[[], None]] | Callable[[], None]] = []
# Database handles a child inherited. They are never closed: closing an inherited SQLite handle
# closes descriptors, and on Linux closing any descriptor of a file drops every POSIX lock the
# process holds on it, including those of the child's own connections (SQLite then believes
# the database is unused and may truncate the -shm file under live mappings: SIGBUS).
_parked: list[Any] = []


def reset_in_child(callback: Callable[[], None]) -> None:
    """Call callback in every forked child; a bound method is held weakly, so objects can die."""
    _resets[:] = [e for e in _resets if not isinstance(e, weakref.WeakMethod) or e() is not None]
    if hasattr(callback, "__self__"):
        _resets.append(weakref.WeakMethod(callback))
    else:
        _resets.append(callback)


def park(handles: list[Any]) -> None:
    """Keep inherited handles alive, unused, for the life of the process (see _parked)."""
    _parked.extend(handles)


def _after_fork_in_child() -> None:
    alive: list[weakref.WeakMethod[Callable[[], None]] | Callable[[], None]] = []
    for entry in _resets:
        callback = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if callback is not None:
            callback()
            alive.append(entry)
    _resets[:] = alive


os.register_at_fork(after_in_child=_after_fork_in_child)
