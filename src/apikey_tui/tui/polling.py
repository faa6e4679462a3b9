"""The one poll step every live screen shares: read the change marker, report reachability."""

from __future__ import annotations

from collections.abc import Callable

from textual.message_pump import MessagePump

from apikey_tui.tui.messages import ReachabilityChanged
from apikey_tui.tui.workers import Failure


def marker_moved(
    screen: MessagePump,
    read_marker: Callable[[], object],
    unreachable: str | None,
    last_marker: object | None,
) -> bool:
    """In a poll worker: whether the database changed since last_marker was read.

    A failure to read it raises, into the worker's boundary (`poll_failed`); a database that
    answers again is posted once as ReachabilityChanged(None).
    """
    marker = read_marker()
    if unreachable is not None:
        screen.post_message(ReachabilityChanged(None))
    return last_marker is not None and marker != last_marker


def poll_failed(screen: MessagePump, failure: Failure, unreachable: str | None) -> None:
    """A poll failed: said once, in the status line (not a notification every few seconds);
    an unforeseen error is logged that once too (Failure.line)."""
    if unreachable is None:
        screen.post_message(ReachabilityChanged(failure.line()))
