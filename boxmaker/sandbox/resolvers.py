"""Name resolution for the egress proxy, and which addresses it may dial.

I/O: `PublicResolver` asks the system's resolver (`socket.getaddrinfo`). It is the
only resolver production has: brokerd passes none, so the proxy takes this one and
dials public addresses only. Tests pass their own
(`boxmaker.testing.resolvers.MappedResolver`).
"""

from __future__ import annotations

import socket
from typing import Protocol

from boxmaker.core.wire.addresses import is_public_address

ALLOWED_PORT = 443


class Resolver(Protocol):
    """Turns a host name into addresses, and says which addresses may be dialled.

    `resolve` raises OSError when the name does not resolve. `port` is the TCP port
    dialled for an allowed request: 443, but in tests where a local server listens.
    """

    @property
    def port(self) -> int: ...

    def resolve(self, host: str) -> list[str]: ...

    def allows(self, address: str) -> bool: ...


class PublicResolver:
    """The production resolver: the system's DNS, and public addresses only.

    Public means in no IANA special-purpose range: `boxmaker.core.wire.addresses` holds
    the one table and its rule.
    """

    port = ALLOWED_PORT

    def resolve(self, host: str) -> list[str]:
        """Every address `getaddrinfo` gives for `host`, in its order, without repeats."""
        infos = socket.getaddrinfo(host, ALLOWED_PORT, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def allows(self, address: str) -> bool:
        """Only addresses in no special-purpose range (`core.wire.addresses.is_public_address`)."""
        return is_public_address(address)
