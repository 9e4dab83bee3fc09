"""Name resolution for the egress proxy, and which addresses it may dial.

I/O: `PublicResolver` asks the system's resolver (`socket.getaddrinfo`).
`MappedResolver` does no I/O: it exists for tests, which point a name at a local
HTTPS server; no configuration key selects it, so production always dials
public addresses only.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Protocol

from boxmaker.core.addresses import is_public_address

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

    Public means in no IANA special-purpose range: `boxmaker.core.addresses` holds
    the one table and its rule.
    """

    port = ALLOWED_PORT

    def resolve(self, host: str) -> list[str]:
        """Every address `getaddrinfo` gives for `host`, in its order, without repeats."""
        infos = socket.getaddrinfo(host, ALLOWED_PORT, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def allows(self, address: str) -> bool:
        """Only addresses in no special-purpose range (`core.addresses.is_public_address`)."""
        return is_public_address(address)


class MappedResolver:
    """For tests only: resolves exactly the mapped names, and allows their addresses.

    A name not in `mapping` does not resolve (OSError). `port` is the port dialled,
    so a test can point an allowed name at a local HTTPS server on a free port.
    """

    def __init__(self, mapping: Mapping[str, str], port: int = ALLOWED_PORT) -> None:
        self._mapping = dict(mapping)
        self._addresses = frozenset(self._mapping.values())
        self.port = port

    def resolve(self, host: str) -> list[str]:
        """The one mapped address of `host`; OSError if it is not mapped."""
        if host not in self._mapping:
            raise OSError(f"{host!r} is not in the test address map")
        return [self._mapping[host]]

    def allows(self, address: str) -> bool:
        """Only the addresses named in the map."""
        return address in self._addresses
