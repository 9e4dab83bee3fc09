"""Which IP addresses the egress proxy may dial: one table of special-purpose ranges. No I/O.

The rule: an address may be dialled only when it lies in no range of `SPECIAL_RANGES`.
When several ranges hold it, the longest prefix decides (as a router would), so a
narrower entry such as `::ffff:0:0/96` inside the reserved `::/8` has the last word.
Every range is refused outright but one: an IPv4-mapped address `::ffff:a.b.c.d`
(`::ffff:0:0/96`) is only another spelling of the IPv4 address `a.b.c.d`, so that
IPv4 address is judged by this same table instead. The ranges that reach an IPv4
address through a translator or a tunnel are refused whatever they embed: NAT64
`64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo `2001::/32` (so on
an IPv6-only network behind DNS64, an IPv4-only host cannot be fetched). A text
that is not an IP address is never dialled. The proxy refuses a name when any one
of its addresses is refused.

The sources of the table, every entry of each:

- IANA IPv4 Special-Purpose Address Registry (RFC 6890), whether or not an entry
  is marked globally reachable: none of them is a place a web page lives;
- IANA IPv4 Multicast Address Space Registry: `224.0.0.0/4` (RFC 5771);
- IANA IPv6 Special-Purpose Address Registry (RFC 6890), likewise every entry;
- IANA Internet Protocol Version 6 Address Space: every block that is not Global
  Unicast `2000::/3`, that is the blocks "Reserved by IETF" (RFC 4291), unique
  local `fc00::/7`, link-local `fe80::/10`, multicast `ff00::/8`, and the
  deprecated site-local `fec0::/10` (RFC 3879), which Python's `ipaddress` (3.11)
  wrongly calls global; this module never asks `ipaddress` what is global.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class SpecialRange:
    """One range of the table: its network, what it is for, where it is defined.

    `embeds_ipv4` is True for the one range whose addresses are judged by the IPv4
    address in their last 32 bits (IPv4-mapped); every other range is refused.
    """

    network: IPNetwork
    name: str
    source: str
    embeds_ipv4: bool = False


def _r(cidr: str, name: str, source: str, *, embeds_ipv4: bool = False) -> SpecialRange:
    return SpecialRange(ipaddress.ip_network(cidr), name, source, embeds_ipv4)


_IPV4 = (
    _r("0.0.0.0/8", "this network", "RFC 791"),
    _r("0.0.0.0/32", "this host on this network", "RFC 1122"),
    _r("10.0.0.0/8", "private use", "RFC 1918"),
    _r("100.64.0.0/10", "shared address space (CGNAT)", "RFC 6598"),
    _r("127.0.0.0/8", "loopback", "RFC 1122"),
    _r("169.254.0.0/16", "link local", "RFC 3927"),
    _r("172.16.0.0/12", "private use", "RFC 1918"),
    _r("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    _r("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"),
    _r("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    _r("192.0.0.9/32", "port control protocol anycast", "RFC 7723"),
    _r("192.0.0.10/32", "TURN anycast", "RFC 8155"),
    _r("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 7050"),
    _r("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 7050"),
    _r("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    _r("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    _r("192.52.193.0/24", "AMT", "RFC 7450"),
    _r("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    _r("192.88.99.2/32", "6a44 relay anycast", "RFC 6751"),
    _r("192.168.0.0/16", "private use", "RFC 1918"),
    _r("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    _r("198.18.0.0/15", "benchmarking", "RFC 2544"),
    _r("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    _r("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    _r("224.0.0.0/4", "multicast", "RFC 5771"),
    _r("240.0.0.0/4", "reserved", "RFC 1112"),
    _r("255.255.255.255/32", "limited broadcast", "RFC 919"),
)

_IPV6_SPECIAL = (
    _r("::/128", "unspecified", "RFC 4291"),
    _r("::1/128", "loopback", "RFC 4291"),
    _r("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", embeds_ipv4=True),
    _r("64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052"),
    _r("64:ff9b:1::/48", "NAT64 local-use prefix", "RFC 8215"),
    _r("100::/64", "discard-only", "RFC 6666"),
    _r("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    _r("2001::/23", "IETF protocol assignments", "RFC 2928"),
    _r("2001::/32", "Teredo", "RFC 4380"),
    _r("2001:1::1/128", "port control protocol anycast", "RFC 7723"),
    _r("2001:1::2/128", "TURN anycast", "RFC 8155"),
    _r("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665"),
    _r("2001:2::/48", "benchmarking", "RFC 5180"),
    _r("2001:3::/32", "AMT", "RFC 7450"),
    _r("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    _r("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    _r("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    _r("2001:30::/28", "drone remote ID entity tags", "RFC 9374"),
    _r("2001:db8::/32", "documentation", "RFC 3849"),
    _r("2002::/16", "6to4", "RFC 3056"),
    _r("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    _r("3fff::/20", "documentation", "RFC 9637"),
    _r("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602"),
    _r("fc00::/7", "unique local", "RFC 4193"),
    _r("fe80::/10", "link-local unicast", "RFC 4291"),
    _r("fec0::/10", "deprecated site-local", "RFC 3879"),
    _r("ff00::/8", "multicast", "RFC 4291"),
)

# The IPv6 address space outside Global Unicast 2000::/3 that no entry above holds
_IPV6_RESERVED = tuple(
    _r(cidr, "reserved by IETF", "RFC 4291")
    for cidr in (
        "::/8",
        "100::/8",
        "200::/7",
        "400::/6",
        "800::/5",
        "1000::/4",
        "4000::/3",
        "6000::/3",
        "8000::/3",
        "a000::/3",
        "c000::/3",
        "e000::/4",
        "f000::/5",
        "f800::/6",
        "fe00::/9",
    )
)

SPECIAL_RANGES: tuple[SpecialRange, ...] = _IPV4 + _IPV6_SPECIAL + _IPV6_RESERVED

# longest prefix first, so the first range that holds an address is the one that decides
_BY_PREFIX = sorted(SPECIAL_RANGES, key=lambda entry: -entry.network.prefixlen)


def special_range(ip: IPAddress) -> SpecialRange | None:
    """The range that decides for `ip` (the longest prefix holding it), or None."""
    for entry in _BY_PREFIX:
        if ip.version == entry.network.version and ip in entry.network:
            return entry
    return None


def _describe(entry: SpecialRange) -> str:
    return f"{entry.network} ({entry.name}, {entry.source})"


def address_problem(address: str) -> str | None:
    """None when `address` may be dialled; otherwise why not, in words."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address!r} is not an IP address"
    entry = special_range(ip)
    if entry is None:
        return None
    if not entry.embeds_ipv4:
        return f"{address} is in {_describe(entry)}"
    embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    inner = special_range(embedded)
    if inner is None:
        return None
    return f"{address} embeds {embedded}, which is in {_describe(inner)}"


def is_public_address(address: str) -> bool:
    """True when `address` may be dialled: the rule of this module's docstring."""
    return address_problem(address) is None
