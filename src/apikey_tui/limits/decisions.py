"""What `Limiter.admit` answers: Admitted, Refused (a limit is spent) or Unavailable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from apikey_tui.limits.model import AppliedLimit


class Admitted:
    """Every limit had room, and the request took one of each: it may pass."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ADMITTED"


ADMITTED: Final = Admitted()  # the one instance: an admitted check allocates nothing


@dataclass(frozen=True, slots=True)
class Refused:
    """A limit has no room left in its window: 429. Nothing was consumed from any limit.

    retry_after: seconds until that window turns, by this process's monotonic clock (never
    later than the store's turn); limit: the limit that is spent (name it in the answer).
    """

    retry_after: float
    limit: AppliedLimit


@dataclass(frozen=True, slots=True)
class Unavailable:
    """The store of counts cannot be reached and the mode is fail-closed: 503 + Retry-After."""

    retry_after: float


Decision = Admitted | Refused | Unavailable
