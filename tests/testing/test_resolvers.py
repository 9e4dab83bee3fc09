"""The egress tests' resolver resolves only the names it maps, to their addresses."""

from __future__ import annotations

import pytest

from boxmaker.sandbox.resolvers import Resolver
from boxmaker.testing.resolvers import MappedResolver


def test_mapped_resolver_resolves_only_mapped_names() -> None:
    resolver: Resolver = MappedResolver({"allowed.test": "127.0.0.1"}, port=8443)
    assert resolver.resolve("allowed.test") == ["127.0.0.1"]
    assert resolver.port == 8443
    with pytest.raises(OSError, match="not in the test address map"):
        resolver.resolve("other.test")
    assert resolver.allows("127.0.0.1")
    assert not resolver.allows("127.0.0.2")


def test_the_port_is_443_unless_given() -> None:
    assert MappedResolver({}).port == 443
