"""How often one client may ask serve-leaks: a token bucket per address."""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def bucket(address: str) -> str:
    """Whom a client address counts as: itself, or for IPv6 its /64 (one host usually holds a
    whole /64, so counting its addresses one by one would count nothing)."""
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return address


class RateLimit:
    """A token bucket per client: `per_minute` requests a minute, bursts up to that many.

    IPv6 clients are counted per /64 (`bucket`). At most `clients`
    buckets are kept, the least recently used dropped first, so memory stays bounded.
    """

    def __init__(
        self,
        per_minute: int,
        *,
        clients: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = float(per_minute)
        self.refill = per_minute / 60.0  # tokens per second
        self.clients = clients
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def allow(self, address: str) -> bool:
        """Take one request's token for this address; False when it has none left."""
        address = bucket(address)
        now = self.clock()
        tokens, then = self._buckets.pop(address, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.refill)
        allowed = tokens >= 1
        self._buckets[address] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > self.clients:
            self._buckets.popitem(last=False)
        return allowed
