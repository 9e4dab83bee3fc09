"""One accepted connection of a role's socket: its request read by a deadline and
checked against the socket's link, its answers sent.

I/O: one Unix socket. The rules of a connection (one request, answers, final) are
`boxmaker.core.wire.connection`'s; this module moves bytes and keeps time. The rules
numbered 1 to 3 (threads, the cap, accept failures) are `ipc.serving`'s; these two are
this module's, with the handler's outcome:

    4. The request must be complete within the request deadline (`timeout_s` from
       accepting), however its bytes trickle in. Its kind must be one the socket's
       link accepts (`core.home.links`), else it is answered `forbidden` and logged with
       the socket-forbidden pointer. A kind the link keeps for some client roles
       (`core.home.links` rule 5) must come from a peer of one of them: the peer's uid
       (`SO_PEERCRED`, read only for such a kind) is given its role by the socket's
       `Peers` (`ipc.peers`), and any other peer is answered `forbidden`, logged
       with its uid and the socket-owner-only pointer. Else the request goes to
       the handler of its kind. A socket is served only with a handler for each
       kind its link accepts and for no other kind (`ipc.serving.check_handlers`: else
       StartupError, before any thread starts).
    5. A client that sends nothing in time, or closes or resets its connection
       early, is one `info` line (`event=idle_timeout`, `event=peer_closed`) and a
       closed connection; the peer's protocol errors are answered with their code;
       only the role's own failures are logged with their traceback and answered
       `internal`.

Answers: `send` writes one answer and waits for the socket to take it, within
`timeout_s` (brokerd's calls answer once, at the end). `send_soon` never waits:
what the socket cannot take at once is queued, in order, for a writer thread of
the connection's own, so a client that reads slowly holds up neither the work nor
a model that every session shares; a client that takes nothing for `timeout_s` is
gone, and the work goes on without it. `close` sends what is queued (within the
same bound), then closes.
"""

from __future__ import annotations

import logging
import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from boxmaker.core.errors import BoxmakerError, ErrorCode, MisuseError, ProtocolError
from boxmaker.core.home.links import Link, Role, kind_of
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.connection import ServerConnection
from boxmaker.core.wire.envelope import Envelope, Message
from boxmaker.ipc.peers import NO_OWNER, Peers, peer_uid

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
FORBIDDEN_POINTER = Runbook.SOCKET_FORBIDDEN.pointer
OWNER_ONLY_POINTER = Runbook.SOCKET_OWNER_ONLY.pointer

T = TypeVar("T")
M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class SocketRules:
    """What one listening socket serves (its link's row), and how."""

    link: Link
    cap: int  # connections served at once
    timeout_s: float = REQUEST_TIMEOUT_S
    peers: Peers = NO_OWNER  # whose role a peer is, for the link's kept kinds (rule 4)

    @property
    def name(self) -> str:
        """The socket's file name ("broker.sock"), in log lines and answers."""
        return self.link.socket

    @property
    def role(self) -> str:
        """The serving role ("brokerd"): who failed, in an `internal` answer; who is busy,
        in a refusal."""
        return str(self.link.server)

    @property
    def busy_pointer(self) -> str:
        return self.link.busy.pointer

    @property
    def unknown_id(self) -> str:
        return self.link.unknown_id


class PeerClosedError(BoxmakerError, ConnectionError):
    """The client closed its side before its request was complete."""


class Connection:
    """One accepted connection: its request read by a deadline, its answers sent."""

    def __init__(
        self,
        sock: socket.socket,
        rules: SocketRules,
        finishing: Callable[[], None] = lambda: None,
    ) -> None:
        self.sock = sock
        self.rules = rules
        self.name = rules.name
        self.protocol = ServerConnection()
        self.gone = False  # the client stopped taking answers (send_soon)
        self.finishing = False  # the final answer is being sent (rule 2's exception)
        self._on_finishing = finishing
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def read_request(self) -> Envelope:
        """The request; ProtocolError if it is bad or of a kind not accepted here,
        TimeoutError if it is not complete in time, PeerClosedError (or another
        OSError) if the client goes first."""
        deadline = time.monotonic() + self.rules.timeout_s
        data = self._now(self.sock.recv, 65536)
        while True:
            if data is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no complete request within {self.rules.timeout_s:g} s")
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
            if not data:
                raise PeerClosedError("the client closed before its request was complete")
            envelope = self.protocol.receive(data)
            data = None
            if envelope is None:
                continue
            kind = kind_of(type(envelope.message))
            if kind not in self.rules.link.accepts:
                log.error(
                    "event=forbidden kind=%s socket=%s %s", kind, self.name, FORBIDDEN_POINTER
                )
                raise ProtocolError(ErrorCode.FORBIDDEN, f"{kind} is not accepted on {self.name}")
            self._check_sender(kind)
            return envelope

    def _check_sender(self, kind: str) -> None:
        """ProtocolError `forbidden` unless the peer may send `kind` (rule 4, `core.home.links`
        rule 5); the peer's credentials are read only for a kind the link keeps."""
        roles = self.rules.link.senders_of(kind)
        if roles is None:
            return
        uid = peer_uid(self.sock)
        if self.rules.link.may_send(self.rules.peers.role_of(uid), kind):
            return
        log.error(
            "event=forbidden kind=%s socket=%s peer_uid=%d %s",
            kind,
            self.name,
            uid,
            OWNER_ONLY_POINTER,
        )
        whom = " or ".join("the owner" if role is Role.OWNER else str(role) for role in roles)
        raise ProtocolError(
            ErrorCode.FORBIDDEN,
            f"{kind} on {self.name} is for {whom} only, and this peer (uid {uid}) is not;"
            f" {OWNER_ONLY_POINTER}",
        )

    @property
    def request_id(self) -> str:
        """The id of the request read (what its answers carry); RuntimeError before one."""
        request = self.protocol.request
        if request is None:
            raise RuntimeError(f"no request has been read on {self.name}")
        return request.id

    def send(self, message: Message, *, final: bool) -> None:
        """Send one answer, waiting at most the socket's timeout for the client to take it."""
        data = self._answer(message, final=final)
        sent = self._now(self.sock.send, data)
        if sent is not None:
            data = data[sent:]
            if not data:
                return
        self.sock.settimeout(self.rules.timeout_s)
        self.sock.sendall(data)

    def _answer(self, message: Message, *, final: bool, request_id: str | None = None) -> bytes:
        """The answer's bytes; a final one marks the connection finishing first."""
        data = self.protocol.answer(message, final=final, request_id=request_id)
        if final and not self.finishing:
            self.finishing = True
            self._on_finishing()
        return data

    def _now(self, call: Callable[[Any, int], T], arg: Any) -> T | None:
        """`call(arg, MSG_DONTWAIT)` on a socket still in blocking mode; None if it would wait.

        A request is usually in the socket when it is accepted (a client sends on
        connecting), and a small answer fits in the socket's buffer: trying first
        spares the `poll` (and the mode switch) that every call of a socket with a
        timeout makes. A socket given a timeout already gets None: its calls poll.
        """
        if self.sock.gettimeout() is not None:
            return None
        try:
            return call(arg, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return None

    def send_soon(self, message: Message, *, final: bool) -> None:
        """Send one answer without waiting (see the module docstring); never raises for
        the client's sake: a client that is gone is skipped."""
        if self.gone:
            return
        data = self._answer(message, final=final)
        if self._writer is None:
            try:
                sent = self.sock.send(data, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._lost()
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._writer = threading.Thread(target=self._write, name="answers", daemon=True)
            self._writer.start()
        self._outbox.put(data)

    def _write(self) -> None:
        while (data := self._outbox.get()) is not None:
            if self.gone:
                continue
            try:
                self.sock.settimeout(self.rules.timeout_s)
                self.sock.sendall(data)
            except OSError:
                self._lost()

    def _lost(self) -> None:
        self.gone = True
        log.info("event=client_gone socket=%s", self.name)

    def send_error(self, error: ProtocolError) -> None:
        """Answer with an error, as far as the connection still allows; never raises."""
        message = Error(code=error.code, message=error.message)
        try:
            data = self._answer(message, final=True, request_id=self.rules.unknown_id)
            if self._writer is not None:
                self._outbox.put(data)
                return
            self.sock.settimeout(self.rules.timeout_s)
            self.sock.sendall(data)
        except (OSError, MisuseError):  # gone, or the final answer was sent already
            log.debug("could not send error %s on %s", error.code, self.name)

    def peer_gone(self) -> bool:
        """True if the client has closed its side (or sent bytes it must not send)."""
        try:
            self.sock.setblocking(False)  # a timeout would make recv wait for data first
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True  # b"" is a close; any byte after the request breaks the protocol

    def client_left(self) -> bool:
        """True once the client has closed its side (or sent what it must not): a poll
        of the socket that neither waits nor changes its mode, so a writer thread's
        send is undisturbed; cheap enough to ask between a model's tokens."""
        if self.gone:
            return True
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN | select.POLLRDHUP)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True

    def close(self) -> None:
        """Send what is queued (while the client takes it), then close."""
        if self._writer is not None:
            self._outbox.put(None)
            self._writer.join()
        try:
            self.sock.close()
        except OSError:
            log.debug("closing %s failed", self.name)


# One handler per accepted kind: called with the connection and the request's message
# (an instance of its key), after the request was read; it sends the answers.
Handler = Callable[[Connection, Any], None]
Handlers = Mapping[type[Any], Handler]


def answering(answer: Callable[[M], Message]) -> Callable[[Connection, M], None]:
    """The handler of a kind answered once: `answer(message)`, sent as the final answer."""

    def handle(conn: Connection, message: M) -> None:
        conn.send(answer(message), final=True)

    return handle
