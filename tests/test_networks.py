"""Network rules and client addresses: parsing, matching, proposals, and the spoofing matrix."""

from __future__ import annotations

import ipaddress
import random

import pytest

from apikey_tui.errors import InvalidInputError
from apikey_tui.integrations import clients
from apikey_tui.networks import (
    ENFORCE,
    SHADOW,
    UNREADABLE,
    TrustedProxies,
    address_of,
    aggregate,
    covering,
    network_rules,
    parse_address,
    parse_cidr,
    rules_of_text,
)


def test_addresses_are_integers_of_one_space_with_ipv4_mapped() -> None:
    """IPv4, IPv6 and IPv4-mapped IPv6 parse to the integers ipaddress gives; junk is None."""
    assert parse_address("127.0.0.2") == int(ipaddress.IPv6Address("::ffff:127.0.0.2"))
    assert parse_address("::ffff:127.0.0.2") == parse_address("127.0.0.2")
    assert parse_address("::1") == 1
    assert parse_address("2001:db8::1") == int(ipaddress.IPv6Address("2001:db8::1"))
    arabic = "\u0661.\u0662.\u0663.\u0664"  # digits, but not ASCII ones
    junks = ["", "1.2.3", "1.2.3.4.5", "01.2.3.4", "256.1.1.1", "1.2.3.4:80", "[::1]"]
    junks += ["fe80::1%eth0", "unknown", "_hidden", arabic, " 1.2.3.4", "::g"]
    for junk in junks:
        assert parse_address(junk) is None, junk


def test_cidrs_parse_strictly_and_write_back_canonically() -> None:
    """A network keeps its canonical text; host bits set and bad lengths are refused in one line."""
    assert str(parse_cidr("10.0.0.0/8")) == "10.0.0.0/8"
    assert str(parse_cidr("192.0.2.7")) == "192.0.2.7/32"
    assert str(parse_cidr("2001:DB8::/32")) == "2001:db8::/32"
    assert str(parse_cidr("::1")) == "::1/128"
    for bad in ("10.0.0.1/8", "10.0.0.0/33", "::/129", "10.0.0.0/x", "nope", "10.0.0.0/-1"):
        with pytest.raises(InvalidInputError) as refused:
            parse_cidr(bad)
        assert "\n" not in str(refused.value)


def test_rules_match_like_ipaddress_on_random_addresses() -> None:
    """Deny wins, no allow entry means any address, and bisecting integers agrees with
    ipaddress's own membership on 2,000 random addresses of both families."""
    rng = random.Random(29)
    allow = ["10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "203.0.113.7"]
    deny = ["10.9.0.0/16", "2001:db8:bad::/48"]
    fence = network_rules(allow, deny).fence
    nets_allow = [ipaddress.ip_network(a) for a in allow]
    nets_deny = [ipaddress.ip_network(d) for d in deny]
    for _ in range(2000):
        if rng.random() < 0.5:
            base = rng.choice(["10.9.1.1", "10.1.2.3", "192.0.2.9", "203.0.113.7", "8.8.8.8"])
            addr = (
                ipaddress.ip_address(base)
                if rng.random() < 0.3
                else ipaddress.IPv4Address(rng.getrandbits(32))
            )
        else:
            prefix = rng.choice([0x20010DB8, 0x20010DB8_0BAD >> 16, 0x2A000000])
            addr = ipaddress.IPv6Address((prefix << 96) | rng.getrandbits(96))
        expected = not any(addr in n for n in nets_deny if n.version == addr.version) and any(
            addr in n for n in nets_allow if n.version == addr.version
        )
        assert fence.admits(address_of(str(addr))) is expected, addr
    assert network_rules([], ["10.0.0.0/8"]).fence.admits(address_of("8.8.8.8"))
    assert not network_rules([], ["10.0.0.0/8"]).fence.admits(None)


def test_stored_rules_round_trip_and_unreadable_ones_admit_nothing() -> None:
    """Rules survive their text; anything else read back refuses every address, even in shadow."""
    rules = network_rules(["10.0.0.0/8"], ["10.9.0.0/16"], SHADOW)
    assert rules_of_text(rules.text()) == rules
    assert rules_of_text(None) is None
    for broken in ("", " \t", "shadow", "maybe +10.0.0.0/8", "enforce 10.0.0.0/8",
                   "shadow +10.0.0.1/8", "enforce +999.0.0.0/8", "shadow +::/129"):  # fmt: skip
        read = rules_of_text(broken)
        assert read is UNREADABLE and read.fence.enforce
        assert not read.fence.admits(address_of("10.1.1.1"))


def test_a_thousand_rules_are_allowed_and_more_than_the_cap_refused() -> None:
    """1,000 networks make one rule set; the cap is 10,000 entries, said in one line."""
    many = [f"10.{i // 256}.{i % 256}.0/24" for i in range(0, 2000, 2)]
    rules = network_rules(many, mode=ENFORCE)
    assert len(rules.allow) == 1000
    assert rules.fence.admits(address_of("10.0.2.9")) and not rules.fence.admits(
        address_of("10.0.1.9")
    )
    with pytest.raises(InvalidInputError, match="at most 10000"):
        network_rules([f"10.{(2 * i) >> 8}.{(2 * i) & 255}.0/24" for i in range(10_001)])


def test_covering_is_exact_and_aggregate_cuts_to_24_and_56() -> None:
    """Sibling halves join and nested networks drop, never covering more; addresses are cut
    to /24 (IPv4) and /56 (IPv6) before they are stored."""
    assert aggregate(address_of("203.0.113.77") or 0) == "203.0.113.0/24"
    assert aggregate(address_of("2001:db8:1:2ff::9") or 0) == "2001:db8:1:200::/56"
    nets = [parse_cidr(t) for t in ("10.0.0.0/24", "10.0.1.0/24", "10.0.0.0/25", "10.0.3.0/24")]
    assert [str(c) for c in covering(nets)] == ["10.0.0.0/23", "10.0.3.0/24"]
    # Never across families: ::ffff:0:0/96 and its neighbour stay apart.
    halves = [parse_cidr("0.0.0.0/1"), parse_cidr("128.0.0.0/1")]
    assert [str(c) for c in covering(halves)] == ["0.0.0.0/0"]


PROXY = "127.0.0.1"
PROXIES = TrustedProxies(["127.0.0.1", "10.0.0.0/8", "fd00::/8"])
FORWARDED = TrustedProxies(["127.0.0.1", "fd00::/8"], header="forwarded")


@pytest.mark.parametrize(
    ("proxies", "peer", "values", "client"),
    [
        # No trusted proxies: headers are never read.
        (TrustedProxies(), "198.51.100.1", ["203.0.113.9"], "198.51.100.1"),
        (TrustedProxies(), None, ["203.0.113.9"], None),
        # An untrusted peer's headers are ignored, however they look.
        (PROXIES, "198.51.100.1", ["203.0.113.9"], "198.51.100.1"),
        (PROXIES, "2001:db8::1", ["10.0.0.1, 127.0.0.1"], "2001:db8::1"),
        # A trusted peer: the rightmost hop that is not a trusted proxy.
        (PROXIES, PROXY, ["203.0.113.9"], "203.0.113.9"),
        (PROXIES, PROXY, ["1.1.1.1, 203.0.113.9"], "203.0.113.9"),
        (PROXIES, PROXY, ["1.1.1.1, 203.0.113.9, 10.1.2.3"], "203.0.113.9"),
        (PROXIES, PROXY, ["1.1.1.1", "203.0.113.9, 10.1.2.3"], "203.0.113.9"),
        (PROXIES, PROXY, ["10.0.0.5, 10.1.2.3"], "10.0.0.5"),
        (PROXIES, "fd00::1", ["2001:db8::7"], "2001:db8::7"),
        (PROXIES, "::ffff:127.0.0.1", ["203.0.113.9"], "203.0.113.9"),
        # Anything unreadable fails closed: None, the unknown client.
        (PROXIES, PROXY, [], None),
        (PROXIES, PROXY, [""], None),
        (PROXIES, PROXY, ["203.0.113.9, garbage"], None),
        (PROXIES, PROXY, ["203.0.113.9:443"], None),
        (PROXIES, PROXY, ["[2001:db8::7]"], None),
        (PROXIES, PROXY, ["203.0.113.9,"], None),
        (PROXIES, "not-an-address", ["203.0.113.9"], None),
        (PROXIES, None, ["203.0.113.9"], None),
        # Forwarded when configured; X-Forwarded-For is then never read (and vice versa).
        (FORWARDED, PROXY, ["for=203.0.113.9;proto=https"], "203.0.113.9"),
        (FORWARDED, PROXY, ['for="[2001:db8::7]:4711"'], "2001:db8::7"),
        (FORWARDED, PROXY, ["for=1.1.1.1, for=203.0.113.9:80"], "203.0.113.9"),
        (FORWARDED, PROXY, ["for=unknown"], None),
        (FORWARDED, PROXY, ['for="_hidden"'], None),
        (FORWARDED, PROXY, ["proto=https"], None),
        (FORWARDED, PROXY, ["for=203.0.113.9, by=127.0.0.1"], None),
        # An element naming two clients, or a bracket followed by anything but a port: unreadable.
        (FORWARDED, PROXY, ["for=1.1.1.1;for=203.0.113.9"], None),
        (FORWARDED, PROXY, ["for=203.0.113.9;FOR=1.1.1.1"], None),
        (FORWARDED, PROXY, ['for="[2001:db8::7]junk"'], None),
        (FORWARDED, PROXY, ['for="[2001:db8::7]:_obf"'], "2001:db8::7"),
    ],
)
def test_the_client_address_under_the_trusted_proxy_rule(
    proxies: TrustedProxies, peer: str | None, values: list[str], client: str | None
) -> None:
    """The spoofing matrix at the source: peer, trusted or not, and every header shape."""
    assert proxies.client(peer, values) == client


def test_a_bad_trusted_proxy_or_header_name_is_refused_at_start() -> None:
    """Configuration is read once and refused in one line when wrong."""
    with pytest.raises(InvalidInputError):
        TrustedProxies(["10.0.0.0/33"])
    with pytest.raises(InvalidInputError):
        TrustedProxies([], header="x-real-ip")


def test_an_ipv6_network_never_admits_ipv4_clients() -> None:
    """::/0 (or ::/56, the aggregate of ::1) holds the IPv4-mapped range in the integer space,
    but an IPv6 rule admits no IPv4 client, and 0.0.0.0/0 no IPv6 one."""
    assert not network_rules(["::/0"]).fence.admits(address_of("10.0.0.1"))
    assert network_rules(["::/0"]).fence.admits(address_of("2001:db8::1"))
    assert not network_rules(["0.0.0.0/0"]).fence.admits(address_of("::1"))
    assert network_rules(["0.0.0.0/0"]).fence.admits(address_of("::ffff:10.0.0.1"))
    assert [str(c) for c in covering([parse_cidr("::/56"), parse_cidr("10.0.0.0/24")])] == [
        "10.0.0.0/24",
        "::/56",
    ]


def test_a_text_longer_than_any_address_is_unknown_and_not_kept() -> None:
    """A 4 KB 'address' (a forwarding header's hop) is no address, and the parse cache keeps
    no entry for it: a flood of long hops cannot fill memory 4,096 strings at a time."""
    from apikey_tui.networks import ADDRESSES

    long = "1" * 4096
    assert address_of(long) is None
    assert long not in ADDRESSES
    assert address_of("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255") is not None  # 45 chars


def test_an_ipv4_mapped_network_written_in_ipv6_counts_its_length_in_ipv6_bits() -> None:
    """'::ffff:10.0.0.0/104' is 10.0.0.0/8 and '::ffff:0:0/96' every IPv4 address: a length
    written after an IPv6 text is an IPv6 length (was refused as '/104 is too long')."""
    assert parse_cidr("::ffff:10.0.0.0/104") == parse_cidr("10.0.0.0/8")
    assert parse_cidr("::ffff:0:0/96") == parse_cidr("0.0.0.0/0")
    assert parse_cidr("::ffff:192.0.2.7") == parse_cidr("192.0.2.7")
    with pytest.raises(InvalidInputError, match="host bits set"):
        parse_cidr("::ffff:0:0/80")  # wider than IPv4's space, from a mapped address


def test_a_client_the_server_took_from_a_header_is_unknown_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer of port 0, or one X-Forwarded-For names with a port (uvicorn's own proxy handling
    wrote it), is unknown in ASGI and Django's META alike, and one warning per process says
    how to set the server up; a real peer is read as it is, without a word."""
    clients._REWRITTEN.done = False
    forwarded = [(b"x-forwarded-for", b"127.0.0.2:443")]
    with caplog.at_level("WARNING", logger="apikey_tui.integrations"):
        assert clients._asgi_peer({"client": ("10.1.2.3", 50000), "headers": []}) == "10.1.2.3"
        assert clients.meta_peer({"REMOTE_ADDR": "10.1.2.3", "REMOTE_PORT": "50000"}) == (
            "10.1.2.3"
        )
        assert caplog.records == []
        assert clients._asgi_peer({"client": ("127.0.0.2", 0), "headers": []}) is None
        assert clients._asgi_peer({"client": ("127.0.0.2", 443), "headers": forwarded}) is None
        assert clients.meta_peer({"REMOTE_ADDR": "127.0.0.2", "REMOTE_PORT": 0}) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "--no-proxy-headers" in warnings[0]
