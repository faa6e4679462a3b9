"""The one place that resets, in a forked child, what must not cross a fork."""

from __future__ import annotations

# Imported first for its fork hooks: hooks run before a fork in the reverse order of their
# registration, so logging takes its lock only after _before_fork has waited for the writes
# (a writer that logs meanwhile never waits for the fork that waits for it).
import logging  # noqa: F401
import os
import threading
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


# SQLite keeps, per process, which of its locks the process holds on a database (shared by all
# its connections to the file). A child forked while a thread of the parent writes inherits the
# record that it holds the write lock, but not the lock: none of its connections can ever write
# to that database (each write waits out its busy timeout, "database is locked"). So a fork
# waits for the write transactions under way, at most WRITE_WAIT seconds, and new ones wait for
# the fork.
WRITE_WAIT = 10.0


class _Writes:
    """SQLite write transactions under way in this process, and forks being made."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.open = 0
        self.forking = 0


_writes = _Writes()


def write_begins() -> None:
    """A SQLite write transaction begins (`db.engine`); waits while a fork is being made."""
    writes = _writes
    with writes.changed:
        writes.changed.wait_for(lambda: not writes.forking)
        writes.open += 1


def write_ends() -> None:
    """A SQLite write transaction ended (its connection went back to the pool)."""
    writes = _writes
    with writes.changed:
        writes.open = max(0, writes.open - 1)
        writes.changed.notify_all()


def _before_fork() -> None:
    writes = _writes
    with writes.changed:
        writes.forking += 1
        writes.changed.wait_for(lambda: not writes.open, WRITE_WAIT)


def _after_fork_in_parent() -> None:
    writes = _writes
    with writes.changed:
        writes.forking = max(0, writes.forking - 1)
        writes.changed.notify_all()


def _after_fork_in_child() -> None:
    global _writes
    _writes = _Writes()  # none of the parent's transactions is this process's
    alive: list[weakref.WeakMethod[Callable[[], None]] | Callable[[], None]] = []
    for entry in _resets:
        callback = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if callback is not None:
            callback()
            alive.append(entry)
    _resets[:] = alive


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)
