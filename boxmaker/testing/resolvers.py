"""A resolver for the egress tests: names mapped to local addresses. No I/O.

`MappedResolver` implements `boxmaker.sandbox.resolvers.Resolver`, so a test can
point an allowed name at a local HTTPS server on a free port. Production never
uses it (no role imports testing): brokerd's runtimes get `PublicResolver`.
"""

from __future__ import annotations

from collections.abc import Mapping

from boxmaker.sandbox.resolvers import ALLOWED_PORT


class MappedResolver:
    """Resolves exactly the mapped names, and allows their addresses.

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
