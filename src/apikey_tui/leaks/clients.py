"""Who is asking serve-leaks: the client address under the trusted-proxy rule, and its rate."""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses or networks (`10.0.0.1`, `10.0.0.0/8`, `::1`); ValueError on a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or network: {value[:60]!r}") from None
    return tuple(networks)


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(
    peer: str | None, forwarded_for: Iterable[bytes], trusted: tuple[Network, ...]
) -> str:
    """The address a request comes from, for rate limits and the audit trail.

    The TCP peer, unless it is a trusted proxy: then X-Forwarded-For is read from the right
    (the entry the nearest proxy added) past every trusted proxy, and the first address that is
    not one is the client. Entries left of it were written by the client and are never
    believed. A trusted proxy that sent no usable entry leaves its own address: all its
    clients then share one limit, which is stricter, never looser.
    """
    here = _address(peer) if peer else None
    if here is None:
        return peer or "unknown"
    if not any(here in network for network in trusted):
        return str(here)
    entries = [e for header in forwarded_for for e in header.decode("latin-1").split(",")]
    for entry in reversed(entries):
        address = _address(entry)
        if address is None:
            break  # a garbled entry: nothing left of it can be placed
        here = address
        if not any(address in network for network in trusted):
            break
    return str(here)


class RateLimit:
    """A token bucket per client: `per_minute` requests a minute, bursts up to that many.

    IPv6 clients are counted per /64 (one host usually holds a whole /64). At most `clients`
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
        parsed = _address(address)
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is None:
            address = str(ipaddress.IPv6Network((parsed, 64), strict=False))
        now = self.clock()
        tokens, then = self._buckets.pop(address, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - then) * self.refill)
        allowed = tokens >= 1
        self._buckets[address] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > self.clients:
            self._buckets.popitem(last=False)
        return allowed
