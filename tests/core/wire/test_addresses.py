"""The special-purpose address table, range by range, against expectations written here.

For each refused range, its first, middle and last addresses are refused, and the
address just before or just after it is allowed where that neighbour is a public
address (judged by hand below, not by the code under test).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.wire.addresses import (
    SPECIAL_RANGES,
    IPAddress,
    address_problem,
    is_public_address,
    special_range,
)

NONE, BEFORE, AFTER, BOTH = "", "before", "after", "both"

# (range, id, which neighbours just outside it are public)
REFUSED = [
    # IPv4 special-purpose registry, and multicast
    ("0.0.0.0/8", "v4-this-network", AFTER),
    ("0.0.0.0/32", "v4-this-host", NONE),
    ("10.0.0.0/8", "v4-private-10", BOTH),
    ("100.64.0.0/10", "v4-shared-cgnat", BOTH),
    ("127.0.0.0/8", "v4-loopback", BOTH),
    ("169.254.0.0/16", "v4-link-local", BOTH),
    ("172.16.0.0/12", "v4-private-172", BOTH),
    ("192.0.0.0/24", "v4-ietf-protocol", BOTH),
    ("192.0.0.0/29", "v4-service-continuity", BEFORE),
    ("192.0.0.8/32", "v4-dummy", NONE),
    ("192.0.0.9/32", "v4-pcp-anycast", NONE),
    ("192.0.0.10/32", "v4-turn-anycast", NONE),
    ("192.0.0.170/32", "v4-nat64-discovery-170", NONE),
    ("192.0.0.171/32", "v4-nat64-discovery-171", NONE),
    ("192.0.2.0/24", "v4-test-net-1", BOTH),
    ("192.31.196.0/24", "v4-as112", BOTH),
    ("192.52.193.0/24", "v4-amt", BOTH),
    ("192.88.99.0/24", "v4-6to4-relay", BOTH),
    ("192.88.99.2/32", "v4-6a44-relay", NONE),
    ("192.168.0.0/16", "v4-private-192", BOTH),
    ("192.175.48.0/24", "v4-as112-delegation", BOTH),
    ("198.18.0.0/15", "v4-benchmarking", BOTH),
    ("198.51.100.0/24", "v4-test-net-2", BOTH),
    ("203.0.113.0/24", "v4-test-net-3", BOTH),
    ("224.0.0.0/4", "v4-multicast", BEFORE),
    ("240.0.0.0/4", "v4-reserved", NONE),
    ("255.255.255.255/32", "v4-broadcast", NONE),
    # IPv6 special-purpose registry, site-local and multicast
    ("::/128", "v6-unspecified", NONE),
    ("::1/128", "v6-loopback", NONE),
    ("64:ff9b::/96", "v6-nat64", NONE),
    ("64:ff9b:1::/48", "v6-nat64-local", NONE),
    ("100::/64", "v6-discard", NONE),
    ("100:0:0:1::/64", "v6-dummy", NONE),
    ("2001::/23", "v6-ietf-protocol", BOTH),
    ("2001::/32", "v6-teredo", BEFORE),
    ("2001:1::1/128", "v6-pcp-anycast", NONE),
    ("2001:1::2/128", "v6-turn-anycast", NONE),
    ("2001:1::3/128", "v6-dns-sd-anycast", NONE),
    ("2001:2::/48", "v6-benchmarking", NONE),
    ("2001:3::/32", "v6-amt", NONE),
    ("2001:4:112::/48", "v6-as112", NONE),
    ("2001:10::/28", "v6-orchid", NONE),
    ("2001:20::/28", "v6-orchid-v2", NONE),
    ("2001:30::/28", "v6-drone-det", NONE),
    ("2001:db8::/32", "v6-documentation", BOTH),
    ("2002::/16", "v6-6to4", BOTH),
    ("2620:4f:8000::/48", "v6-as112-delegation", BOTH),
    ("3fff::/20", "v6-documentation-3fff", BOTH),
    ("5f00::/16", "v6-srv6", NONE),
    ("fc00::/7", "v6-unique-local", NONE),
    ("fe80::/10", "v6-link-local", NONE),
    ("fec0::/10", "v6-site-local", NONE),
    ("ff00::/8", "v6-multicast", NONE),
    # IPv6 address space reserved by IETF (everything outside 2000::/3 not named above)
    ("::/8", "v6-reserved-0000", NONE),
    ("100::/8", "v6-reserved-0100", NONE),
    ("200::/7", "v6-reserved-0200", NONE),
    ("400::/6", "v6-reserved-0400", NONE),
    ("800::/5", "v6-reserved-0800", NONE),
    ("1000::/4", "v6-reserved-1000", AFTER),
    ("4000::/3", "v6-reserved-4000", BEFORE),
    ("6000::/3", "v6-reserved-6000", NONE),
    ("8000::/3", "v6-reserved-8000", NONE),
    ("a000::/3", "v6-reserved-a000", NONE),
    ("c000::/3", "v6-reserved-c000", NONE),
    ("e000::/4", "v6-reserved-e000", NONE),
    ("f000::/5", "v6-reserved-f000", NONE),
    ("f800::/6", "v6-reserved-f800", NONE),
    ("fe00::/9", "v6-reserved-fe00", NONE),
]

# the one range judged by the IPv4 address in its last 32 bits
MAPPED = "::ffff:0:0/96"


def _inside(cidr: str) -> list[IPAddress]:
    network = ipaddress.ip_network(cidr)
    return [network[0], network[network.num_addresses // 2], network[-1]]


@pytest.mark.parametrize(
    ("cidr", "where"),
    [pytest.param(cidr, where, id=name) for cidr, name, where in REFUSED],
)
def test_a_range_is_refused_and_its_public_neighbours_are_not(cidr: str, where: str) -> None:
    for ip in _inside(cidr):
        problem = address_problem(str(ip))
        assert problem is not None, ip
        assert not is_public_address(str(ip))
    network = ipaddress.ip_network(cidr)
    if where in (BEFORE, BOTH):
        assert is_public_address(str(network[0] - 1)), network[0] - 1
    if where in (AFTER, BOTH):
        assert is_public_address(str(network[-1] + 1)), network[-1] + 1


def test_the_table_and_this_file_name_the_same_ranges() -> None:
    in_table = {str(entry.network) for entry in SPECIAL_RANGES}
    in_tests = {str(ipaddress.ip_network(cidr)) for cidr, _, _ in REFUSED}
    in_tests.add(str(ipaddress.ip_network(MAPPED)))
    assert in_table == in_tests
    assert len(SPECIAL_RANGES) == len(in_table)  # no range twice


@pytest.mark.parametrize(
    ("ipv4", "allowed"),
    [
        ("127.0.0.1", False),
        ("10.0.0.1", False),
        ("0.0.0.0", False),  # noqa: S104 - an address to judge, never bound
        ("255.255.255.255", False),
        ("93.184.216.34", True),
        ("1.1.1.1", True),
    ],
)
def test_a_mapped_address_is_judged_by_its_ipv4(ipv4: str, allowed: bool) -> None:
    prefix = ipaddress.ip_network(MAPPED)
    address = str(prefix[int(ipaddress.IPv4Address(ipv4))])
    assert is_public_address(address) is allowed
    if not allowed:
        assert f"embeds {ipv4}" in (address_problem(address) or "")


def test_site_local_is_refused_although_python_calls_it_global() -> None:
    assert ipaddress.ip_address("fec0::1").is_global  # what Python 3.11 says
    assert not is_public_address("fec0::1")
    assert address_problem("fec0::1") == "fec0::1 is in fec0::/10 (deprecated site-local, RFC 3879)"


@pytest.mark.parametrize(
    "address",
    [
        "93.184.216.34",
        "8.8.8.8",
        "2606:2800:220:1:248:1893:25c8:1946",
        "2a00:1450:4001:82a::200e",
        "2000::",
        "3fff:1000::",
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize(
    "address",
    ["", "example.com", "1.2.3", "::g", "93.184.216.34 ", "fe80::1%"],
)
def test_text_that_is_not_an_address_is_refused(address: str) -> None:
    assert address_problem(address) == f"{address!r} is not an IP address"


def test_a_zone_index_does_not_hide_a_link_local_address() -> None:
    assert not is_public_address("fe80::1%eth0")


def test_the_longest_prefix_decides() -> None:
    mapped = special_range(ipaddress.ip_address("::ffff:1.1.1.1"))  # inside ::/8
    assert mapped is not None
    assert mapped.embeds_ipv4
    teredo = special_range(ipaddress.ip_address("2001::1"))
    assert teredo is not None
    assert teredo.name == "Teredo"


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_is_judged_alike_when_mapped(ip: ipaddress.IPv4Address) -> None:
    mapped = ipaddress.ip_network(MAPPED)[int(ip)]
    assert is_public_address(str(mapped)) is is_public_address(str(ip))
    # NAT64, 6to4 and Teredo are refused whatever they embed
    assert not is_public_address(str(ipaddress.ip_network("64:ff9b::/96")[int(ip)]))
    assert not is_public_address(str(ipaddress.IPv6Address((0x2002 << 112) | (int(ip) << 80))))
    assert not is_public_address(str(ipaddress.IPv6Address((0x20010000 << 96) | int(ip))))
