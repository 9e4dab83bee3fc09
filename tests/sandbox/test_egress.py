"""The egress proxy through real sockets: a SOCKS5 client on a Unix socket, TLS to a
local HTTPS server on 127.0.0.1 with a throwaway CA made by `openssl` at test time.

No test sends traffic to any address but loopback: public addresses appear only in
the table given to `PublicResolver.allows`, which does no I/O, and beside a
special-purpose address of the same name, which refuses the name before any dial.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.skips import skip_or_fail

from boxmaker.core.wire.addresses import is_public_address
from boxmaker.sandbox.egress import EgressProxy, Verdict
from boxmaker.sandbox.resolvers import PublicResolver, Resolver
from boxmaker.testing.resolvers import MappedResolver
from boxmaker.testing.tls import LocalHttps, OpensslMissingError, make_test_certs

NAMES = ("allowed.test", "other.test", "a.allowed.test")
TIMEOUT = 10.0

# ---------------------------------------------------------------------------
# a throwaway CA and a local HTTPS server


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA (ca.pem) and a server certificate for NAMES and *.allowed.test."""
    try:
        return make_test_certs(tmp_path_factory.mktemp("certs"), (*NAMES, "*.allowed.test"))
    except OpensslMissingError as exc:
        skip_or_fail(f"{exc}: the egress tests did NOT run")


@pytest.fixture(scope="module")
def https(certs: Path) -> Iterator[LocalHttps]:
    """An HTTPS server on 127.0.0.1 that answers `hello from <Host>`."""
    with LocalHttps(certs) as server:
        yield server


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A short directory for the socket (a Unix socket path has at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="egress-") as folder:
        yield Path(folder)


@pytest.fixture
def proxy_for(run_dir: Path, https: LocalHttps) -> Iterator[Callable[..., EgressProxy]]:
    """Start proxies for the test (patterns, optional resolver and limits); close them."""
    proxies: list[EgressProxy] = []

    def make(
        patterns: tuple[str, ...], resolver: Resolver | None = None, **limits: Any
    ) -> EgressProxy:
        if resolver is None:
            resolver = MappedResolver(dict.fromkeys(NAMES, "127.0.0.1"), port=https.port)
        path = run_dir / f"p{len(proxies)}.sock"
        proxy = EgressProxy(path, patterns, resolver, **limits)
        proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


# ---------------------------------------------------------------------------
# a small SOCKS5 client


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def _recv_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _open(proxy: EgressProxy) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT)
    sock.connect(str(proxy.socket_path))
    return sock


def _request(atyp: int, address: bytes, port: int, command: int = 1) -> bytes:
    return bytes([5, command, 0, atyp]) + address + port.to_bytes(2, "big")


def _reply(code: int) -> bytes:
    return bytes([5, code, 0, 1]) + bytes(6)


METHOD_OK = b"\x05\x00"


def _domain(host: str) -> bytes:
    return bytes([len(host.encode())]) + host.encode()


def socks_connect(proxy: EgressProxy, request: bytes) -> tuple[socket.socket, int]:
    """Greet, send `request`, read the 10-byte reply: the socket and the reply code."""
    sock = _open(proxy)
    sock.sendall(b"\x05\x01\x00")
    assert _recv_exact(sock, 2) == b"\x05\x00"
    sock.sendall(request)
    reply = _recv_exact(sock, 10)
    assert reply[0] == 5
    assert reply[2:] == b"\x00\x01\x00\x00\x00\x00\x00\x00"
    return sock, reply[1]


def connect_name(proxy: EgressProxy, host: str, port: int = 443) -> tuple[socket.socket, int]:
    return socks_connect(proxy, _request(3, _domain(host), port))


def fetch(proxy: EgressProxy, host: str, ca: Path) -> str:
    """GET https://host/ through the proxy; the body."""
    sock, code = connect_name(proxy, host)
    with sock:
        assert code == 0
        context = ssl.create_default_context(cafile=str(ca))
        with context.wrap_socket(sock, server_hostname=host) as tls:
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            response = _recv_all(tls).decode()
    assert response.startswith("HTTP/1.0 200"), response
    return response.split("\r\n\r\n", 1)[1]


def refused(proxy: EgressProxy, request: bytes) -> int:
    """The reply code for `request`, checking the proxy then hangs up."""
    sock, code = socks_connect(proxy, request)
    with sock:
        assert sock.recv(1) == b""
    return code


# ---------------------------------------------------------------------------
# tests


def test_allowed_host_returns_the_page(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(("allowed.test",))
    assert fetch(proxy, "allowed.test", https.ca) == "hello from allowed.test"
    [event] = proxy.events
    assert (event.host, event.port, event.verdict) == ("allowed.test", 443, Verdict.allowed)


def test_host_not_on_the_list_is_refused_and_never_connected(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(("allowed.test",))
    before = https.accepted
    assert refused(proxy, _request(3, _domain("other.test"), 443)) == 0x02
    assert https.accepted == before
    [event] = proxy.events
    assert (event.host, event.verdict) == ("other.test", Verdict.refused)


@pytest.mark.parametrize(
    ("atyp", "address"),
    [(1, bytes([127, 0, 0, 1])), (4, bytes(15) + b"\x01")],
    ids=["ipv4", "ipv6"],
)
def test_ip_address_types_are_refused(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, atyp: int, address: bytes
) -> None:
    proxy = proxy_for(("allowed.test",), MappedResolver({"allowed.test": "127.0.0.1"}))
    before = https.accepted
    assert refused(proxy, _request(atyp, address, 443)) == 0x08
    assert https.accepted == before
    assert [e.verdict for e in proxy.events] == [Verdict.refused]


@pytest.mark.parametrize(
    "name", ["127.0.0.1", "::1", "[::1]", "2130706433", "0x7f.0.0.1", "Allowed.test", ""]
)
def test_domain_names_that_are_not_host_names_are_refused(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, name: str
) -> None:
    resolver = MappedResolver({name: "127.0.0.1", "allowed.test": "127.0.0.1"}, port=https.port)
    proxy = proxy_for(("allowed.test", "*.allowed.test"), resolver)
    assert refused(proxy, _request(3, _domain(name), 443)) == 0x02
    assert "not a host name" in proxy.events[0].reason


def test_a_non_ascii_name_is_refused(proxy_for: Callable[..., EgressProxy]) -> None:
    proxy = proxy_for(("allowed.test",))
    name = b"allowed.test\xff"
    assert refused(proxy, _request(3, bytes([len(name)]) + name, 443)) == 0x02


@pytest.mark.parametrize("port", [80, 8443, 0, 65535])
def test_ports_other_than_443_are_refused(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, port: int
) -> None:
    proxy = proxy_for(("allowed.test",))
    before = https.accepted
    assert refused(proxy, _request(3, _domain("allowed.test"), port)) == 0x02
    assert https.accepted == before


class _MappedButPublicOnly(MappedResolver):
    """The test map for names, the production rule for addresses."""

    def allows(self, address: str) -> bool:
        return PublicResolver().allows(address)


def test_a_name_resolving_to_loopback_is_refused_under_public_rules(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(
        ("allowed.test",), _MappedButPublicOnly({"allowed.test": "127.0.0.1"}, port=https.port)
    )
    before = https.accepted
    assert refused(proxy, _request(3, _domain("allowed.test"), 443)) == 0x02
    assert https.accepted == before
    assert "non-public address 127.0.0.1" in proxy.events[0].reason


class _ManyAddresses(MappedResolver):
    """Each name resolves to every address listed for it; the production rule judges them."""

    def __init__(self, mapping: dict[str, list[str]], port: int) -> None:
        super().__init__(dict.fromkeys(mapping, "127.0.0.1"), port)
        self._many = mapping

    def resolve(self, host: str) -> list[str]:
        super().resolve(host)  # OSError when not mapped
        return list(self._many[host])

    def allows(self, address: str) -> bool:
        return PublicResolver().allows(address)


@pytest.mark.parametrize(
    "addresses",
    [
        ["fec0::1"],
        ["93.184.216.34", "fec0::1"],
        ["2606:2800:220:1:248:1893:25c8:1946", "93.184.216.34", "10.0.0.1"],
        ["93.184.216.34", "::ffff:127.0.0.1", "2606:2800:220:1:248:1893:25c8:1946"],
    ],
    ids=["site-local-alone", "site-local-second", "private-last", "mapped-loopback-middle"],
)
def test_a_name_with_any_special_purpose_address_is_refused_and_never_dialled(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, addresses: list[str]
) -> None:
    proxy = proxy_for(("allowed.test",), _ManyAddresses({"allowed.test": addresses}, https.port))
    assert refused(proxy, _request(3, _domain("allowed.test"), 443)) == 0x02
    [event] = proxy.events
    assert event.verdict == Verdict.refused
    barred = [address for address in addresses if not is_public_address(address)]
    assert event.reason == f"resolves to a non-public address {', '.join(barred)}"


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.1.1", False),
        ("100.64.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("0.0.0.0", False),  # noqa: S104 - an address to judge, never bound
        ("::", False),
        ("224.0.0.1", False),
        ("ff02::1", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("::ffff:127.0.0.1", False),
        ("64:ff9b::7f00:1", False),
        ("2002:7f00:1::", False),
        ("fec0::1", False),  # site-local: Python 3.11 calls it global
        ("2001:db8::1", False),
        ("2001::5efe:7f00:1", False),  # Teredo
        ("64:ff9b::5db8:d822", False),  # NAT64 of 93.184.216.34
        ("::ffff:93.184.216.34", True),  # IPv4-mapped: judged as 93.184.216.34
        ("not an address", False),
        ("93.184.216.34", True),
        ("2606:2800:220:1:248:1893:25c8:1946", True),
    ],
)
def test_public_resolver_allows_only_public_addresses(address: str, allowed: bool) -> None:
    assert PublicResolver().allows(address) is allowed
    assert is_public_address(address) is allowed


def test_a_name_on_the_list_but_not_in_the_map_does_not_resolve(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(("allowed.test", "*.test"), MappedResolver({}, port=https.port))
    assert refused(proxy, _request(3, _domain("allowed.test"), 443)) == 0x04


def test_a_refused_connection_upstream_is_reported(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    proxy = proxy_for(("allowed.test",), MappedResolver({"allowed.test": "127.0.0.1"}, free))
    assert refused(proxy, _request(3, _domain("allowed.test"), 443)) == 0x05


@pytest.mark.parametrize(
    ("host", "expected"),
    [("a.allowed.test", 0x00), ("allowed.test", 0x02), ("a.other.test", 0x02)],
)
def test_wildcard_patterns_match_names_under_them_only(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, host: str, expected: int
) -> None:
    mapping = {"a.allowed.test": "127.0.0.1", "allowed.test": "127.0.0.1"}
    proxy = proxy_for(
        ("*.allowed.test",), MappedResolver(mapping | {host: "127.0.0.1"}, https.port)
    )
    if expected == 0:
        assert fetch(proxy, host, https.ca) == f"hello from {host}"
    else:
        assert refused(proxy, _request(3, _domain(host), 443)) == expected


def test_two_connections_are_judged_independently(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(("allowed.test",))
    first, code = connect_name(proxy, "allowed.test")
    with first:
        assert code == 0
        assert refused(proxy, _request(3, _domain("other.test"), 443)) == 0x02
        context = ssl.create_default_context(cafile=str(https.ca))
        with context.wrap_socket(first, server_hostname="allowed.test") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
            assert _recv_all(tls).endswith(b"hello from allowed.test")
    assert fetch(proxy, "allowed.test", https.ca) == "hello from allowed.test"
    verdicts = [(e.host, e.verdict) for e in proxy.events]
    assert verdicts == [
        ("allowed.test", Verdict.allowed),
        ("other.test", Verdict.refused),
        ("allowed.test", Verdict.allowed),
    ]


@pytest.mark.parametrize(
    ("payload", "answer"),
    [
        (b"", b""),
        (b"\x04\x01\x00", b""),
        (b"\x05", b""),
        (b"\x05\x01\x02", b"\x05\xff"),
        (b"\x05\x00", b"\x05\xff"),
        (b"\x05\x01\x00\x04\x01\x00\x01", METHOD_OK + _reply(0x01)),
        (b"\x05\x01\x00\x05\x01\x01\x03", METHOD_OK + _reply(0x01)),
        (b"\x05\x01\x00\x05\x02\x00\x03\x0callowed.test\x01\xbb", METHOD_OK + _reply(0x07)),
        (b"\x05\x01\x00\x05\x01\x00\x09\x01\xbb", METHOD_OK + _reply(0x08)),
        (b"\x05\x01\x00\x05\x01\x00\x03\x0callowed", METHOD_OK),
        (bytes(range(256)) * 4, b""),
    ],
    ids=[
        "empty",
        "socks4",
        "truncated-greeting",
        "no-acceptable-method",
        "no-methods",
        "request-version-4",
        "reserved-not-zero",
        "bind-command",
        "unknown-address-type",
        "truncated-name",
        "garbage",
    ],
)
def test_malformed_input_is_dropped_and_the_proxy_still_serves(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps, payload: bytes, answer: bytes
) -> None:
    proxy = proxy_for(("allowed.test",))
    with _open(proxy) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        got = b""
        with contextlib.suppress(ConnectionResetError):  # it hung up with bytes unread
            while chunk := sock.recv(65536):
                got += chunk
    assert got == answer
    assert fetch(proxy, "allowed.test", https.ca) == "hello from allowed.test"


class _Recorder:
    """A plain TCP server on 127.0.0.1: the bytes of its one connection, up to EOF."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(TIMEOUT)
        self.port: int = self._listener.getsockname()[1]
        self._got = b""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            conn.settimeout(TIMEOUT)
            while chunk := conn.recv(65536):
                self._got += chunk

    def received(self) -> bytes:
        """Everything the connection carried, once it has closed."""
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive()
        return self._got

    def close(self) -> None:
        self._listener.close()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("cap", "late", "upstream_gets"),
    [(None, b"and late", b"early and late"), (4, b"", b"")],
    ids=["relayed", "over-cap"],
)
def test_bytes_sent_past_the_request_go_upstream_first_and_count(
    proxy_for: Callable[..., EgressProxy],
    recorder: _Recorder,
    cap: int | None,
    late: bytes,
    upstream_gets: bytes,
) -> None:
    limits = {} if cap is None else {"max_relay_bytes": cap}
    resolver = MappedResolver({"allowed.test": "127.0.0.1"}, port=recorder.port)
    proxy = proxy_for(("allowed.test",), resolver, **limits)
    with _open(proxy) as sock:
        sock.sendall(b"\x05\x01\x00" + _request(3, _domain("allowed.test"), 443) + b"early ")
        assert _recv_exact(sock, 12) == METHOD_OK + _reply(0x00)
        if late:  # over the cap the proxy has hung up already
            sock.sendall(late)
            sock.shutdown(socket.SHUT_WR)  # which ends the relay
        assert sock.recv(1) == b""
    assert recorder.received() == upstream_gets
    assert [e.verdict for e in proxy.events] == [Verdict.allowed]


def test_a_slow_handshake_times_out(proxy_for: Callable[..., EgressProxy]) -> None:
    proxy = proxy_for(("allowed.test",), handshake_timeout=0.2)
    with _open(proxy) as sock:
        sock.sendall(b"\x05\x01")
        assert sock.recv(1) == b""


def test_an_idle_relay_is_closed(proxy_for: Callable[..., EgressProxy]) -> None:
    proxy = proxy_for(("allowed.test",), idle_timeout=0.2)
    sock, code = connect_name(proxy, "allowed.test")
    with sock:
        assert code == 0
        assert sock.recv(1) == b""


def test_a_relay_over_its_byte_cap_is_cut(
    proxy_for: Callable[..., EgressProxy], https: LocalHttps
) -> None:
    proxy = proxy_for(("allowed.test",), max_relay_bytes=200)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        fetch(proxy, "allowed.test", https.ca)


def test_close_ends_open_relays_and_removes_the_socket(run_dir: Path, https: LocalHttps) -> None:
    resolver = MappedResolver({"allowed.test": "127.0.0.1"}, port=https.port)
    proxy = EgressProxy(run_dir / "egress.sock", ("allowed.test",), resolver)
    with proxy:
        assert proxy.socket_path.is_socket()
        assert stat.S_IMODE(proxy.socket_path.stat().st_mode) == 0o666
        relay, code = connect_name(proxy, "allowed.test")
        idle = _open(proxy)  # greets, never sends a request
        with relay, idle:
            assert code == 0
            idle.sendall(b"\x05\x01\x00")
            assert _recv_exact(idle, 2) == b"\x05\x00"
            started = time.monotonic()
            proxy.close()
            assert relay.recv(1) == b""
            assert idle.recv(1) == b""
            assert time.monotonic() - started < 5.0
        assert not proxy.socket_path.exists()
        assert not [t for t in threading.enumerate() if t.name.startswith("egress-")]
        proxy.close()  # idempotent
    with pytest.raises(RuntimeError):
        proxy.start()


def test_close_before_start_and_a_taken_path(run_dir: Path) -> None:
    EgressProxy(run_dir / "never.sock", ("allowed.test",)).close()
    taken = run_dir / "taken.sock"
    taken.write_text("someone else's")
    proxy = EgressProxy(taken, ("allowed.test",))
    with pytest.raises(OSError, match="in use"):
        proxy.start()
    assert taken.read_text() == "someone else's"
    proxy.close()
