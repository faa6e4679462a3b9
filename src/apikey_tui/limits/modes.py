"""What the limiter does when its store fails: the declared mode, never an accident."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from apikey_tui.errors import InvalidInputError


class FailMode(Enum):
    """closed (the default): no request needing the store passes, the answer is 503; open:
    each process admits at most N // processes per window of its own clock, from memory."""

    CLOSED = "closed"
    OPEN = "open"


@dataclass(frozen=True, slots=True)
class Outage:
    """The declared behaviour when the store fails.

    processes: how many processes the deployment runs (P); in fail-open each admits at most
    N // P per window, so the deployment as a whole admits at most N from memory.
    retry_seconds: after a failed store call, the store is not asked again for this long (no
    request waits on a store that is down); fail-closed answers carry it as Retry-After.
    """

    mode: FailMode = FailMode.CLOSED
    processes: int = 1
    retry_seconds: float = 1.0

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise InvalidInputError("the number of processes must be at least 1")
        if not 0 < self.retry_seconds <= 300:
            raise InvalidInputError("the store's retry interval must be within (0, 300] seconds")


def parse_fail_mode(text: str) -> FailMode:
    """'closed' or 'open' (as an option or environment variable gives it), else one clear line."""
    try:
        return FailMode(text.strip().lower())
    except ValueError:
        raise InvalidInputError(
            f"limits failure mode {text[:20]!a} is not allowed: write closed or open"
        ) from None
