"""The one poll step every live screen shares: read the change marker, report reachability."""

from __future__ import annotations

from collections.abc import Callable

from textual.message_pump import MessagePump

from apikey_tui.errors import ApiKeyError
from apikey_tui.tui.failures import unforeseen
from apikey_tui.tui.messages import ReachabilityChanged


def marker_moved(
    screen: MessagePump,
    read_marker: Callable[[], object],
    unreachable: str | None,
    last_marker: object | None,
) -> bool:
    """In a poll worker: whether the database changed since last_marker was read.

    A database that stops or starts answering is posted once as ReachabilityChanged (said in
    the status line, not as a notification every few seconds).
    """
    try:
        marker = read_marker()
    except Exception as exc:  # an unforeseen one too: said (and logged) once, never a crash
        if unreachable is None:
            known = isinstance(exc, ApiKeyError)
            reason = str(exc) if known else unforeseen(exc, "Checking the database for changes")
            screen.post_message(ReachabilityChanged(reason))
        return False
    if unreachable is not None:
        screen.post_message(ReachabilityChanged(None))
    return last_marker is not None and marker != last_marker
