"""Where a key may be used from: CIDR rules, client addresses as integers, trusted proxies."""

from __future__ import annotations

import functools
import ipaddress
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from apikey_tui.errors import InvalidInputError

# Every address is one integer of the IPv6 space: IPv4 a.b.c.d is ::ffff:a.b.c.d (RFC 4291's
# IPv4-mapped form), so an IPv4 peer and the same peer seen through a dual-stack socket are one
# address, and a rule list is one sorted list of ranges whatever the family.
MAPPED = 0xFFFF << 32
_V4 = (1 << 32) - 1
ENFORCE, SHADOW = "enforce", "shadow"
MODES = (ENFORCE, SHADOW)
RULES_MAX = 10_000  # allow and deny entries of one key or owner (the issue: no cap below 1,000)
# Client networks recorded in usage: an address is cut to its /24 (IPv4) or /56 (IPv6) first.
V4_AGGREGATE, V6_AGGREGATE = 24, 56
XFF, FORWARDED = "x-forwarded-for", "forwarded"
CLIENT_HEADERS = (XFF, FORWARDED)
NOTE_MAX = 320  # characters of an audit detail about rules (the column holds 400, a batch id too)
_ADDRESS_CACHE = 4096  # parsed peers kept: a service sees the same few clients again and again
# Address text -> its integer (None: not an address), filled by address_of: the request path
# looks a peer up here first (`restrictions.Placement.judge`).
ADDRESSES: dict[str | None, int | None] = {None: None}


def parse_address(text: str) -> int | None:
    """The address as an integer of the IPv6 space (IPv4 mapped), or None if it is not one.

    Strict: no port, no brackets, no zone, no leading zeros in IPv4 (as `ipaddress`).
    """
    parts = text.split(".")
    if len(parts) == 4 and ":" not in text:
        value = 0
        for part in parts:
            if not (part.isdigit() and part.isascii()) or len(part) > 3 or part[0] == "0" != part:
                return None
            octet = int(part)
            if octet > 255:
                return None
            value = value << 8 | octet
        return MAPPED | value
    if ":" not in text or "%" in text or len(text) > 45:
        return None
    try:
        return int(ipaddress.IPv6Address(text))
    except ValueError:
        return None


def address_of(text: str | None) -> int | None:
    """parse_address, remembered: the request path parses a peer once, then finds its integer."""
    if text is None:
        return None
    try:
        return ADDRESSES[text]
    except KeyError:
        pass
    if len(text) > 45:  # no address is longer (IPv6 text at most): not kept, never parsed
        return None
    value = parse_address(text)
    if len(ADDRESSES) >= _ADDRESS_CACHE:
        ADDRESSES.clear()  # a flood of distinct addresses: start again, bounded
        ADDRESSES[None] = None
    ADDRESSES[text] = value
    return value


def is_v4(value: int) -> bool:
    """Whether an address integer is an IPv4 address (mapped)."""
    return value >> 32 == 0xFFFF


def network_text(start: int, prefix: int) -> str:
    """A range's CIDR text: IPv4 for the mapped range (prefix counted in 128 bits)."""
    if prefix >= 96 and is_v4(start):
        return f"{ipaddress.IPv4Address(start & _V4)}/{prefix - 96}"
    return f"{ipaddress.IPv6Address(start)}/{prefix}"


def address_text(value: int) -> str:
    """An address integer as text (IPv4 when mapped)."""
    return (
        str(ipaddress.IPv4Address(value & _V4))
        if is_v4(value)
        else str(ipaddress.IPv6Address(value))
    )


def aggregate(value: int) -> str:
    """The network an address is recorded under: its /24 (IPv4) or /56 (IPv6)."""
    prefix = 96 + V4_AGGREGATE if is_v4(value) else V6_AGGREGATE
    return network_text(value >> (128 - prefix) << (128 - prefix), prefix)


@dataclass(frozen=True, slots=True)
class Cidr:
    """One network: its first address and prefix length, both in the 128-bit space."""

    start: int
    prefix: int

    @property
    def end(self) -> int:
        """Its last address."""
        return self.start | ((1 << (128 - self.prefix)) - 1)

    @property
    def v4(self) -> bool:
        """Whether it is an IPv4 network (inside ::ffff:0:0/96)."""
        return self.prefix >= 96 and is_v4(self.start)

    def ranges(self) -> list[tuple[int, int]]:
        """Its addresses as [start, end] ranges. An IPv6 network never holds IPv4 addresses:
        ::/56 or ::/0 written for IPv6 clients must not admit every IPv4 one, so the mapped
        range is cut out of it."""
        start, end = self.start, self.end
        if self.v4 or end < MAPPED or start > MAPPED | _V4:
            return [(start, end)]
        return [(a, b) for a, b in ((start, MAPPED - 1), ((MAPPED | _V4) + 1, end)) if a <= b]

    def __str__(self) -> str:
        return network_text(self.start, self.prefix)


def parse_cidr(text: str) -> Cidr:
    """A network '10.0.0.0/8', '2001:db8::/32' or an address (a /32 or /128); host bits set
    are refused ('10.0.0.1/8' is likely a typo for a wider or narrower rule than meant)."""
    value = text.strip()
    address, slash, length = value.partition("/")
    start = parse_address(address)
    if start is None or (
        slash and not (length.isdigit() and length.isascii() and len(length) <= 3)
    ):
        raise InvalidInputError(
            f"network {text[:60]!a} is not allowed: write an address or a CIDR (10.0.0.0/8, "
            "2001:db8::/32)"
        )
    # A length after an IPv6 text counts IPv6 bits, an IPv4-mapped one's too (::ffff:0:0/96 is
    # every IPv4 address); IPv4 is held mapped, so only the length's scale differs.
    family_bits = 32 if is_v4(start) and ":" not in address else 128
    bits = int(length) if slash else family_bits
    if bits > family_bits:
        raise InvalidInputError(f"network {text[:60]!a} is not allowed: /{bits} is too long")
    prefix = bits + (96 if family_bits == 32 else 0)
    if start & ((1 << (128 - prefix)) - 1):
        network = network_text(start >> (128 - prefix) << (128 - prefix), prefix)
        raise InvalidInputError(
            f"network {text[:60]!a} has host bits set: write {network} (the network) or the "
            "address alone"
        )
    return Cidr(start, prefix)


def covering(networks: Iterable[Cidr]) -> tuple[Cidr, ...]:
    """The smallest list of networks covering exactly the addresses of these (sorted): nested
    ones dropped, sibling halves joined. Never wider than what it was given."""
    merged: list[Cidr] = []
    # IPv4 first, then IPv6: an IPv6 network never covers an IPv4 one (see Cidr.ranges).
    for cidr in sorted(set(networks), key=lambda c: (not c.v4, c.start, c.prefix)):
        if merged and merged[-1].v4 == cidr.v4 and merged[-1].start <= cidr.start <= merged[-1].end:
            continue  # inside the one before
        merged.append(cidr)
        while len(merged) >= 2:  # join two halves of one network into it
            a, b = merged[-2], merged[-1]
            if a.prefix != b.prefix or a.prefix == 0 or (a.prefix == 96 and is_v4(a.start)):
                break
            size = 1 << (128 - a.prefix)
            if a.start & size or b.start != a.start + size:
                break
            merged[-2:] = [Cidr(a.start, a.prefix - 1)]
    return tuple(merged)


def _ranges(cidrs: Iterable[Cidr]) -> tuple[list[int], list[int]]:
    """Sorted, merged [start, end] ranges of these networks: starts and ends apart, to bisect."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end in sorted(r for cidr in cidrs for r in cidr.ranges()):
        if ends and start <= ends[-1] + 1:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


class Fence:
    """One rule set, compiled for the request path: integers, sorted ranges, bisect.

    `admits(address)`: not in a deny range (deny wins), and in an allow range when there are
    any. An unknown address (None) and an unreadable rule set admit nothing (fail closed).
    """

    __slots__ = ("allow_ends", "allow_starts", "deny_ends", "deny_starts", "enforce", "readable")

    def __init__(self, rules: NetworkRules) -> None:
        self.enforce = rules.mode == ENFORCE or not rules.readable
        self.readable = rules.readable
        self.allow_starts, self.allow_ends = _ranges(rules.allow)
        self.deny_starts, self.deny_ends = _ranges(rules.deny)

    def admits(self, address: int | None) -> bool:
        """Whether a request from this address passes this rule set."""
        if address is None or not self.readable:
            return False
        starts = self.deny_starts
        if starts:
            i = bisect_right(starts, address) - 1
            if i >= 0 and address <= self.deny_ends[i]:
                return False
        starts = self.allow_starts
        if not starts:
            return True
        i = bisect_right(starts, address) - 1
        return i >= 0 and address <= self.allow_ends[i]


@dataclass(frozen=True)
class NetworkRules:
    """A key's (or owner's) network rules: allow and deny networks and the mode.

    No allow entry means any address; deny wins. `enforce` refuses (403), `shadow` admits and
    records what it would have refused. `readable` is False for stored rules that could not be
    read back: they refuse every request, whatever their mode (fail closed).
    """

    mode: str = ENFORCE
    allow: tuple[Cidr, ...] = ()
    deny: tuple[Cidr, ...] = ()
    readable: bool = True
    _fence: list[Fence] = field(default_factory=list, compare=False, repr=False)

    @property
    def fence(self) -> Fence:
        """The rules compiled for the request path (built once)."""
        if not self._fence:
            self._fence.append(Fence(self))
        return self._fence[0]

    def with_mode(self, mode: str) -> NetworkRules:
        """The same rules in another mode."""
        return network_rules(self.allow, self.deny, mode)

    def text(self) -> str:
        """What the database holds: the mode, then '+CIDR' (allow) and '-CIDR' (deny)."""
        return " ".join([self.mode, *(f"+{c}" for c in self.allow), *(f"-{c}" for c in self.deny)])

    def summary(self, most: int = 6) -> str:
        """One line for a person: 'shadow: allow 10.0.0.0/8, …; deny …' (at most `most` each)."""
        if not self.readable:
            return "unreadable (every request refused)"

        def listed(cidrs: Sequence[Cidr]) -> str:
            shown = ", ".join(str(c) for c in cidrs[:most])
            return shown + (f" and {len(cidrs) - most} more" if len(cidrs) > most else "")

        parts = [f"allow {listed(self.allow)}" if self.allow else "allow any"]
        if self.deny:
            parts.append(f"deny {listed(self.deny)}")
        return f"{self.mode}: {'; '.join(parts)}"

    def to_json(self) -> dict[str, Any]:
        """The rules as a JSON-ready dict."""
        return {
            "mode": self.mode,
            "allow": [str(c) for c in self.allow],
            "deny": [str(c) for c in self.deny],
            "readable": self.readable,
        }


UNREADABLE = NetworkRules(ENFORCE, readable=False)


def network_rules(
    allow: Iterable[Cidr | str], deny: Iterable[Cidr | str] = (), mode: str = ENFORCE
) -> NetworkRules:
    """Rules from the admin's words (InvalidInputError on a bad network or mode); duplicates
    and networks inside another of the same list are dropped."""
    if mode not in MODES:
        raise InvalidInputError(f"networks mode {mode[:20]!a} is not allowed: enforce or shadow")
    allowed = covering(c if isinstance(c, Cidr) else parse_cidr(c) for c in allow)
    denied = covering(c if isinstance(c, Cidr) else parse_cidr(c) for c in deny)
    if len(allowed) + len(denied) > RULES_MAX:
        raise InvalidInputError(f"at most {RULES_MAX} networks per key or owner")
    if not allowed and not denied:
        raise InvalidInputError("no network given: name --allow-from or --deny-from, or none")
    return NetworkRules(mode, allowed, denied)


# Stored rule texts read back, kept: every key of an owner carries the owner's text (up to
# RULES_MAX networks, ~50 ms to parse and ~1 MB compiled), and keys set in one batch carry one
# text, so each is parsed and compiled once and shared (rules are immutable), not once per key
# and per re-read.
_RULE_TEXTS = 64


@functools.lru_cache(maxsize=_RULE_TEXTS)
def rules_of_text(text: str | None) -> NetworkRules | None:
    """Stored rules read back: None (NULL) for none, UNREADABLE for anything not understood,
    an empty or blank text included: no writer of ours stores one, so it is not "no rules".
    The same text gives the same (immutable) rules, compiled once."""
    if text is None:
        return None
    mode, *entries = text.split() or [""]
    try:
        if mode not in MODES or not entries or any(e[:1] not in "+-" for e in entries):
            return UNREADABLE
        allow = [parse_cidr(e[1:]) for e in entries if e[0] == "+"]
        deny = [parse_cidr(e[1:]) for e in entries if e[0] == "-"]
        return NetworkRules(mode, tuple(allow), tuple(deny))
    except InvalidInputError:
        return UNREADABLE


def rules_note(rules: NetworkRules | None, before: NetworkRules | None) -> str:
    """An audit detail for a change of rules: short enough for the event's detail column."""

    def said(r: NetworkRules | None) -> str:
        return "anywhere" if r is None else r.summary(3)

    note = f"networks: {said(rules)} (were {said(before)})"
    return note if len(note) <= NOTE_MAX else note[: NOTE_MAX - 1] + "…"


def rules_text(rules: NetworkRules | None) -> str | None:
    """What the database holds for these rules (None: no rules)."""
    return None if rules is None else rules.text()


class TrustedProxies:
    """The client address of a request: the TCP peer, unless the peer is a trusted proxy.

    Then the one forwarding header configured (X-Forwarded-For by default, or RFC 7239
    Forwarded) is read from the right past every trusted proxy: the first hop that is not one is
    the client; when every hop is trusted, the leftmost. The other header is never read: a
    proxy that sets one passes the other through from the client. Anything that cannot be read
    (a hop that is no address, a trusted peer that sent no header, a peer that is no address)
    gives None, the unknown client, which no network rule admits. Without trusted proxies the
    headers are never read and the peer is taken as it is.
    """

    def __init__(self, proxies: Iterable[str] = (), header: str = XFF) -> None:
        header = header.strip().lower()
        if header not in CLIENT_HEADERS:
            raise InvalidInputError(
                f"client header {header[:30]!a} is not allowed: x-forwarded-for or forwarded"
            )
        self.header = header
        self.networks = tuple(parse_cidr(p) for p in proxies if p.strip())
        self._fence = NetworkRules(ENFORCE, self.networks).fence if self.networks else None

    def __bool__(self) -> bool:
        return self._fence is not None

    def trusted(self, address: int | None) -> bool:
        """Whether the address is one of the trusted proxies."""
        return self._fence is not None and self._fence.admits(address)

    def client(self, peer: str | None, values: Sequence[str]) -> str | None:
        """The client's address text, or None when it cannot be known (see the class)."""
        if self._fence is None:
            return peer
        address = address_of(peer)
        if address is None:
            return None
        if not self._fence.admits(address):
            return peer
        hops = xff_hops(values) if self.header == XFF else forwarded_hops(values)
        if not hops:
            return None
        for hop in reversed(hops):
            at = address_of(hop)
            if at is None:
                return None
            if not self._fence.admits(at):
                return hop
        return hops[0]


def xff_hops(values: Sequence[str]) -> list[str]:
    """The hops of X-Forwarded-For header lines, in order (several lines are one list)."""
    return [hop.strip() for value in values for hop in value.split(",")]


def forwarded_hops(values: Sequence[str]) -> list[str]:
    """The `for=` address of each element of RFC 7239 Forwarded lines, in order; an element
    without one, with two (which is the client?), or one that is no address ('unknown',
    '_hidden', '[v6]junk'), gives '' (unreadable)."""
    hops: list[str] = []
    for value in values:
        for element in value.split(","):
            found: str | None = None
            for pair in element.split(";"):
                name, eq, text = pair.strip().partition("=")
                if not eq or name.strip().lower() != "for":
                    continue
                if found is not None:
                    found = ""
                    break
                text = text.strip()
                if len(text) >= 2 and text[0] == text[-1] == '"':
                    text = text[1:-1]
                if text.startswith("["):
                    inside, bracket, port = text[1:].partition("]")
                    ported = not port or port[0] == ":"
                    text = inside if bracket and ":" in inside and ported else ""
                elif text.count(":") == 1:
                    text = text.partition(":")[0]  # an IPv4 address with its port
                found = text
            hops.append(found or "")
    return hops
