"""The egress proxy: the only way out of the sandbox for `http_fetch`.

A SOCKS5 server (RFC 1928) on a per-call Unix socket under `<home>/run/egress/`,
bind-mounted into the sandbox, run in brokerd's process on threads and closed when
its call ends. It speaks the "no authentication" method and CONNECT only, takes
domain names only (never IPv4 or IPv6 address types), port 443 only, names that
are valid host names (`boxmaker.core.grants.hosts.host_problem`) and match one of the
grant's host patterns (`host_matches`), and connects only when every address the
name resolves to is allowed: by default, addresses in none of the IANA
special-purpose ranges of `boxmaker.core.wire.addresses` (one such address among many
refuses the name). It then relays bytes both ways, with an idle timeout and a cap
on the bytes of a relay.

The handshake's rules are `boxmaker.core.wire.socks5` (sans I/O); this module feeds it
the client's bytes under the handshake deadline, sends what it answers, and judges
the name and port it yields (`_admit`). Bytes a client sends past its request,
before the reply, are sent upstream first once connected, and count against the
relay's cap.

I/O: binds, listens on and removes one Unix socket file; resolves names (DNS
through `socket.getaddrinfo` by default, or the `Resolver` passed in: tests pass
`boxmaker.testing.resolvers.MappedResolver` to point a name at a local HTTPS
server; no configuration key selects one); opens TCP connections to the addresses
it allowed; logs one line per verdict.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from boxmaker.core.errors import BoxmakerError
from boxmaker.core.grants.hosts import host_matches, host_problem
from boxmaker.core.wire.socks5 import (
    REPLY_CONNECTION_REFUSED,
    REPLY_HOST_UNREACHABLE,
    REPLY_NOT_ALLOWED,
    REPLY_SUCCEEDED,
    Connect,
    Handshake,
    NeedData,
    Refuse,
    Reply,
    refusal,
    reply_bytes,
)
from boxmaker.sandbox.resolvers import ALLOWED_PORT, PublicResolver, Resolver

logger = logging.getLogger(__name__)

_CHUNK = 65536


class Verdict(StrEnum):
    """What became of one SOCKS request."""

    allowed = "allowed"
    refused = "refused"


@dataclass(frozen=True, slots=True)
class EgressEvent:
    """One verdict of the proxy, for logs and tests (host is "" when none was read)."""

    host: str
    port: int
    verdict: Verdict
    reason: str


class _HangUpError(BoxmakerError):
    """The proxy is closing, or the peer went away: end this client quietly."""


class _RefusedError(BoxmakerError):
    """A request the proxy refuses: the refusal (why, and the bytes to answer)."""

    def __init__(self, refused: Refuse) -> None:
        super().__init__(refused.reason)
        self.refusal = refused


class EgressProxy:
    """A SOCKS5 proxy on a Unix socket that admits only the grant's host patterns."""

    def __init__(
        self,
        socket_path: Path,
        patterns: tuple[str, ...],
        resolver: Resolver | None = None,
        *,
        handshake_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        idle_timeout: float = 30.0,
        max_relay_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.socket_path = socket_path
        self.patterns = patterns
        self._resolver: Resolver = resolver if resolver is not None else PublicResolver()
        self._handshake_timeout = handshake_timeout
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._max_relay_bytes = max_relay_bytes
        self._lock = threading.Lock()
        self._events: list[EgressEvent] = []
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None  # made by start()
        self._started = False
        self._closed = False

    @property
    def events(self) -> list[EgressEvent]:
        """A copy of the verdicts so far, oldest first."""
        with self._lock:
            return list(self._events)

    def start(self) -> None:
        """Bind the socket (mode 0666: its directory is the access control) and serve."""
        with self._lock:
            if self._started or self._closed:
                raise RuntimeError("an EgressProxy starts once")
            self._started = True
            self._wake = socket.socketpair()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.socket_path))
        except BaseException:
            listener.close()
            self.close()
            raise
        self._listener = listener  # close() now removes the file
        try:
            os.chmod(self.socket_path, 0o666)  # noqa: S103 - the directory guards it
            listener.listen(16)
            listener.setblocking(False)
            self._spawn(self._accept_loop, "accept")
        except BaseException:
            self.close()
            raise
        logger.info("egress proxy listening path=%s patterns=%s", self.socket_path, self.patterns)

    def close(self) -> None:
        """Stop accepting, end every relay, remove the socket file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True  # from now on no thread starts and no socket is tracked
            sockets = list(self._sockets)
            threads = [t for t in self._threads if t is not threading.current_thread()]
        if self._wake is None:
            return  # never started
        self._wake[1].send(b"x")  # never drained: every wait sees it from now on
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = sum(thread.is_alive() for thread in threads)
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        if stuck:
            logger.warning(
                "egress proxy threads still running path=%s count=%d", self.socket_path, stuck
            )
        else:
            self._wake[0].close()
            self._wake[1].close()
        logger.info("egress proxy closed path=%s", self.socket_path)

    def __enter__(self) -> EgressProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- threads and sockets ---------------------------------------------------

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(
            target=self._run, args=(target, *args), name=f"egress-{name}", daemon=True
        )
        with self._lock:  # close() joins every thread started before it
            if self._closed:
                raise _HangUpError
            self._threads.append(thread)
            thread.start()

    def _run(self, target: Callable[..., None], *args: object) -> None:
        try:
            target(*args)
        except _HangUpError:
            pass
        except Exception:
            logger.exception("egress proxy thread failed path=%s", self.socket_path)

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            if self._closed:
                sock.close()
                raise _HangUpError
            self._sockets.add(sock)

    def _untrack_and_close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _wait(self, socks: list[socket.socket], events: int, timeout: float) -> list[int]:
        """File numbers of `socks` ready for `events`; [] on timeout; _HangUpError if closing."""
        assert self._wake is not None
        wake = self._wake[0].fileno()
        poller = select.poll()
        poller.register(wake, select.POLLIN)
        for sock in socks:
            poller.register(sock, events)
        ready = poller.poll(max(0, int(timeout * 1000)))
        if any(fd == wake for fd, _ in ready):
            raise _HangUpError
        return [fd for fd, _ in ready]

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while True:
            self._wait([self._listener], select.POLLIN, 3600.0)
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            client.setblocking(True)
            self._track(client)
            try:
                self._spawn(self._serve, "client", client)
            except _HangUpError:
                self._untrack_and_close(client)
                raise

    # -- one client ------------------------------------------------------------

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        host = ""
        try:
            client.settimeout(self._handshake_timeout)
            request, early = self._handshake(client, time.monotonic() + self._handshake_timeout)
            host, port = request.host, request.port
            upstream, address = self._admit(host, port)
            self._record(host, port, Verdict.allowed, f"connected to {address}")
            client.sendall(reply_bytes(REPLY_SUCCEEDED))
            client.settimeout(self._idle_timeout)
            upstream.settimeout(self._idle_timeout)
            self._relay(client, upstream, host, early)
        except _RefusedError as error:
            refused = error.refusal
            self._record(refused.host, refused.port, Verdict.refused, refused.reason)
            with contextlib.suppress(OSError):
                client.sendall(refused.answer)
        except (_HangUpError, OSError):
            pass
        finally:
            if upstream is not None:
                self._untrack_and_close(upstream)
            self._untrack_and_close(client)

    def _handshake(self, client: socket.socket, deadline: float) -> tuple[Connect, bytes]:
        """The client's CONNECT request and the bytes it sent past it (`core.wire.socks5`).

        _RefusedError on the parser's refusal; _HangUpError on a hang-up or the deadline.
        """
        handshake = Handshake()
        while True:
            event = handshake.next_event()
            if isinstance(event, NeedData):
                if not self._wait([client], select.POLLIN, deadline - time.monotonic()):
                    raise _HangUpError  # the handshake took too long
                data = client.recv(_CHUNK)
                if not data:
                    raise _HangUpError
                handshake.receive(data)
            elif isinstance(event, Reply):
                client.sendall(event.data)
            elif isinstance(event, Refuse):
                raise _RefusedError(event)
            else:
                return event, handshake.trailing_data

    def _admit(self, host: str, port: int) -> tuple[socket.socket, str]:
        """Judge a request and connect: the upstream socket and its address."""

        def refuse(code: int, reason: str) -> _RefusedError:
            return _RefusedError(refusal(code, reason, host, port))

        if port != ALLOWED_PORT:
            raise refuse(REPLY_NOT_ALLOWED, f"port {port} is not {ALLOWED_PORT}")
        problem = host_problem(host)
        if problem is not None:
            raise refuse(REPLY_NOT_ALLOWED, f"not a host name: {problem}")
        if not any(host_matches(pattern, host) for pattern in self.patterns):
            raise refuse(REPLY_NOT_ALLOWED, "not on the grant's hosts")
        try:
            addresses = self._resolver.resolve(host)
        except (OSError, UnicodeError, ValueError) as exc:
            raise refuse(REPLY_HOST_UNREACHABLE, f"does not resolve: {exc}") from exc
        if not addresses:
            raise refuse(REPLY_HOST_UNREACHABLE, "resolves to no address")
        barred = [address for address in addresses if not self._resolver.allows(address)]
        if barred:  # every address is judged: one barred address refuses the name
            raise refuse(REPLY_NOT_ALLOWED, f"resolves to a non-public address {', '.join(barred)}")
        failure = refuse(REPLY_HOST_UNREACHABLE, "no address")
        for address in addresses:
            try:
                return self._connect(address, self._resolver.port), address
            except ConnectionRefusedError:
                failure = refuse(REPLY_CONNECTION_REFUSED, f"{address} refused the connection")
            except (OSError, ValueError) as exc:
                failure = refuse(REPLY_HOST_UNREACHABLE, f"{address} unreachable: {exc}")
        raise failure

    def _connect(self, address: str, port: int) -> socket.socket:
        """A TCP connection to `address`, or OSError; ends early when the proxy closes."""
        family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        self._track(sock)
        try:
            sock.setblocking(False)
            error = sock.connect_ex((address, port))
            if error not in (0, errno.EINPROGRESS):
                raise OSError(error, os.strerror(error))
            if not self._wait([sock], select.POLLOUT, self._connect_timeout):
                raise TimeoutError("connect timed out")
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error == errno.ECONNREFUSED:
                raise ConnectionRefusedError(error, os.strerror(error))
            if error:
                raise OSError(error, os.strerror(error))
            sock.setblocking(True)
        except BaseException:
            self._untrack_and_close(sock)
            raise
        return sock

    def _relay(
        self, client: socket.socket, upstream: socket.socket, host: str, early: bytes
    ) -> None:
        """Copy bytes both ways until a side closes, the relay idles, or the cap is hit.

        `early` (bytes the client sent past its request) goes upstream first and counts.
        """
        ends = {client.fileno(): (client, upstream), upstream.fileno(): (upstream, client)}
        total = len(early)
        if total > self._max_relay_bytes:
            logger.warning("egress relay over its byte cap host=%s", host)
            return
        if early:
            upstream.sendall(early)
        while True:
            ready = self._wait([client, upstream], select.POLLIN, self._idle_timeout)
            if not ready:
                logger.info("egress relay idle host=%s bytes=%d", host, total)
                return
            for fd in ready:
                source, sink = ends[fd]
                data = source.recv(_CHUNK)
                if not data:
                    logger.info("egress relay ended host=%s bytes=%d", host, total)
                    return
                total += len(data)
                if total > self._max_relay_bytes:
                    logger.warning("egress relay over its byte cap host=%s", host)
                    return
                sink.sendall(data)

    def _record(self, host: str, port: int, verdict: Verdict, reason: str) -> None:
        with self._lock:
            self._events.append(EgressEvent(host, port, verdict, reason))
        logger.info("egress %s host=%s port=%d reason=%s", verdict, host, port, reason)
