"""Which llama.cpp RPC servers loopd may put the model's layers on. Pure; no I/O.

llama.cpp's RPC protocol has no authentication and no encryption: whoever reaches an
rpc-server can read and write the memory it holds, and whoever sits on the path
between loopd and it reads every activation (upstream calls it insecure on open
networks). So an endpoint of `[model] rpc_servers` is taken only when it is:

1. an IP address and a port (`127.0.0.1:50052`, `[::1]:50052`), or `localhost:PORT`;
   a host name is refused, since what it resolves to can change after the check;
2. loopback (another process on this box), or
3. inside the network of an interface the owner named in `[model] rpc_tunnels`: a
   WireGuard interface, or the tun device of an SSH tunnel (`ssh -w`); an SSH port
   forward is loopback already (rule 2).

A named tunnel that has no address on this machine is refused too: the owner
believes the traffic is inside a tunnel that is not there. Every refusal is one line
naming the key, with the runbook pointer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from boxmaker.core.errors import ConfigError
from boxmaker.core.runbook import Runbook

POINTER = Runbook.LOOPD_RPC_REFUSED.pointer
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class RpcEndpointError(ConfigError):
    """An endpoint of `[model] rpc_servers` that loopd will not use (one line)."""


@dataclass(frozen=True)
class Endpoint:
    address: Address
    port: int

    def __str__(self) -> str:
        """As llama.cpp's RPC backend takes it: `host:port`, an IPv6 host in brackets."""
        if isinstance(self.address, ipaddress.IPv6Address):
            return f"[{self.address}]:{self.port}"
        return f"{self.address}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """`HOST:PORT` with HOST an IP address (IPv6 in brackets) or `localhost`."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RpcEndpointError(
            f"[model] rpc_servers: {text!r} is not HOST:PORT (such as 127.0.0.1:50052); {POINTER}"
        )
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host == "localhost":
        host = "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise RpcEndpointError(
            f"[model] rpc_servers: {text!r} names a host; give its IP address (what a "
            f"name resolves to can change after loopd checks it); {POINTER}"
        ) from None
    return Endpoint(address, int(port_text))


def check_endpoints(
    texts: Sequence[str], tunnels: Sequence[str], networks: Mapping[str, Sequence[Network]]
) -> tuple[Endpoint, ...]:
    """The endpoints of `texts`, each loopback or inside the networks of a tunnel named
    in `tunnels` (`networks`: each named interface's networks, as this machine has
    them; a name it lacks has none); RpcEndpointError for the first that is not."""
    for name in tunnels:
        if not networks.get(name):
            raise RpcEndpointError(
                f"[model] rpc_tunnels names {name!r}, which has no address on this machine: "
                f"bring the tunnel up before loopd starts, or correct the name; {POINTER}"
            )
    endpoints = []
    for text in texts:
        endpoint = parse_endpoint(text)
        address = endpoint.address
        inside = [name for name in tunnels if any(address in network for network in networks[name])]
        if not address.is_loopback and not inside:
            named = ", ".join(tunnels) if tunnels else "none is named"
            raise RpcEndpointError(
                f"[model] rpc_servers: {endpoint} is neither loopback nor inside a tunnel of "
                f"[model] rpc_tunnels ({named}): llama.cpp's RPC has no authentication or "
                f"encryption, so reach that box over WireGuard or an SSH tunnel; {POINTER}"
            )
        endpoints.append(endpoint)
    return tuple(endpoints)
