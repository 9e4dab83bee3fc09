"""Which rpc-servers loopd may put layers on (`core.model.rpc_endpoints`): loopback, or
inside a tunnel the owner named; an address, never a name."""

from __future__ import annotations

import ipaddress
import re

import pytest

from boxmaker.core.model.rpc_endpoints import RpcEndpointError, check_endpoints, parse_endpoint

WG = {"wg0": [ipaddress.ip_network("10.8.0.0/24"), ipaddress.ip_network("fd00:8::/64")]}


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("127.0.0.1:50052", "127.0.0.1:50052"),
        ("localhost:50052", "127.0.0.1:50052"),
        ("[::1]:50052", "[::1]:50052"),
        ("127.0.0.2:1", "127.0.0.2:1"),
    ],
)
def test_loopback_is_taken(text: str, shown: str) -> None:
    (endpoint,) = check_endpoints([text], [], {})
    assert str(endpoint) == shown


@pytest.mark.parametrize("text", ["10.8.0.7:50052", "[fd00:8::7]:50052"])
def test_an_address_inside_a_named_tunnel_is_taken(text: str) -> None:
    (endpoint,) = check_endpoints([text], ["wg0"], WG)
    assert str(endpoint) == text


@pytest.mark.parametrize(
    ("text", "tunnels"),
    [
        ("203.0.113.5:50052", []),
        ("203.0.113.5:50052", ["wg0"]),
        ("10.8.0.7:50052", []),  # the tunnel's network, but the tunnel is not named
        ("192.168.1.20:50052", ["wg0"]),  # a private LAN is not a tunnel
        ("[2001:db8::1]:50052", ["wg0"]),
        ("0.0.0.0:50052", []),
    ],
)
def test_anything_else_is_refused_in_one_line(text: str, tunnels: list[str]) -> None:
    with pytest.raises(RpcEndpointError) as refused:
        check_endpoints([text], tunnels, WG)
    message = str(refused.value)
    assert "neither loopback nor inside a tunnel of [model] rpc_tunnels" in message
    assert message.endswith("see runbook.md#loopd-rpc-refused")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu-box:50052", "names a host; give its IP address"),
        ("127.0.0.1", "is not HOST:PORT"),
        ("127.0.0.1:0", "is not HOST:PORT"),
        ("127.0.0.1:70000", "is not HOST:PORT"),
        (":50052", "is not HOST:PORT"),
        ("127.0.0.1:5x", "is not HOST:PORT"),
    ],
)
def test_what_is_not_an_address_and_port_is_refused(text: str, why: str) -> None:
    with pytest.raises(RpcEndpointError, match=why):
        parse_endpoint(text)


def test_a_named_tunnel_that_is_not_there_is_refused() -> None:
    with pytest.raises(RpcEndpointError, match="names 'wg1', which has no address"):
        check_endpoints(["127.0.0.1:50052"], ["wg1"], {"wg1": []})


def test_every_endpoint_is_checked() -> None:
    with pytest.raises(RpcEndpointError, match=re.escape("203.0.113.5:1 is neither")):
        check_endpoints(["127.0.0.1:50052", "203.0.113.5:1"], [], {})
