"""The one socket server of every role: binding, accepting, and one connection's I/O.

I/O: the file system (a link's directory and socket modes) and Unix sockets. The
rules of a connection (one request, answers, final) are `boxmaker.core.connection`'s;
this module moves bytes and keeps time. The rules, per listening socket:

    1. Each accepted connection runs in a thread of its own, and at most `cap`
       connections of one socket are served at once (each socket its own cap, so a
       full broker.sock never keeps the owner out of admin.sock). The threads are
       a pool (`Workers`): one that finished a connection waits for the next for
       IDLE_WORKER_S before it ends, so a busy socket starts no thread per
       connection; idle or busy, the pool holds about as many threads as the
       connections served at once, never many more.
    2. A connection over the cap is refused by the accept thread at once, without a
       thread and without waiting: if its request is already in the socket (as it
       is when the connection waited in the backlog, since a client sends on
       connecting) it is answered `unavailable` with one line and the busy pointer;
       otherwise it is closed, which a client reads as `unavailable` too. It is not
       left in the backlog, where its client would wait out its whole timeout.
    3. When accept fails (EMFILE, ENFILE or anything else), the accept thread waits
       before trying again, from 10 ms doubling to at most 1 s, starting over after
       the next success. Such failures and refusals are one warning line (no
       traceback) at most every LOG_EVERY_S seconds, with how many there were.
    4. The request must be complete within the request deadline (`timeout_s` from
       accepting), however its bytes trickle in. Its kind must be one the socket
       accepts (`accepts`), else it is answered `forbidden` and logged with the
       socket-forbidden pointer.
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

import errno
import logging
import os
import queue
import socket
import stat
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from boxmaker.core.connection import ServerConnection
from boxmaker.core.errors import ErrorCode, ProtocolError, StartupError
from boxmaker.core.frames import MAX_FRAME, PREFIX
from boxmaker.core.layout import PRIVATE, LinkModes
from boxmaker.core.messages import Envelope, Error, Message
from boxmaker.core.runbook import Runbook

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
LOG_EVERY_S = 5.0
FIRST_BACKOFF_S = 0.01
MAX_BACKOFF_S = 1.0
IDLE_WORKER_S = 30.0
FORBIDDEN_POINTER = Runbook.SOCKET_FORBIDDEN.pointer


def bind_socket(path: Path, modes: LinkModes = PRIVATE, backlog: int = 64) -> socket.socket:
    """A listening socket at `path`, its directory and itself at `modes`; StartupError if not.

    The directory is made if missing and its mode set whether made or found. A
    stale socket file is removed: the caller has made sure no other server of
    its kind is running (brokerd holds the audit lock).
    """
    directory = path.parent
    try:
        directory.mkdir(mode=modes.directory, parents=True, exist_ok=True)
        # only when it differs: a chmod by a user outside the directory's group
        # clears its set-group-id bit, and the socket would lose the link's group
        if stat.S_IMODE(directory.stat().st_mode) != modes.directory:
            os.chmod(directory, modes.directory)
    except OSError as exc:
        raise StartupError(f"cannot prepare the socket directory {directory}: {exc}") from exc
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot remove the stale socket {path}: {exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o777 & ~modes.socket)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, modes.socket)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {path}: {exc}") from exc
    return sock


@dataclass(frozen=True, slots=True)
class SocketRules:
    """What one listening socket serves, and how."""

    name: str  # "broker.sock": in log lines and answers
    role: str  # "brokerd": who failed, in an `internal` answer
    accepts: Collection[str]  # the message kinds a request may have
    cap: int  # connections served at once
    busy_pointer: str  # the runbook pointer of a refusal over the cap
    timeout_s: float = REQUEST_TIMEOUT_S
    unknown_id: str = "unknown"  # the id of an error answered before a request was read


class PeerClosedError(ConnectionError):
    """The client closed its side before its request was complete."""


class Connection:
    """One accepted connection: its request read by a deadline, its answers sent."""

    def __init__(self, sock: socket.socket, rules: SocketRules) -> None:
        self.sock = sock
        self.rules = rules
        self.name = rules.name
        self.protocol = ServerConnection()
        self.gone = False  # the client stopped taking answers (send_soon)
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def read_request(self) -> Envelope:
        """The request; ProtocolError if it is bad or of a kind not accepted here,
        TimeoutError if it is not complete in time, PeerClosedError (or another
        OSError) if the client goes first."""
        deadline = time.monotonic() + self.rules.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete request within {self.rules.timeout_s:g} s")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise PeerClosedError("the client closed before its request was complete")
            envelope = self.protocol.receive(data)
            if envelope is None:
                continue
            kind = envelope.message.kind
            if kind not in self.rules.accepts:
                log.error(
                    "event=forbidden kind=%s socket=%s %s", kind, self.name, FORBIDDEN_POINTER
                )
                raise ProtocolError(ErrorCode.FORBIDDEN, f"{kind} is not accepted on {self.name}")
            return envelope

    def send(self, message: Message, *, final: bool) -> None:
        """Send one answer, waiting at most the socket's timeout for the client to take it."""
        data = self.protocol.answer(message, final=final)
        self.sock.settimeout(self.rules.timeout_s)
        self.sock.sendall(data)

    def send_soon(self, message: Message, *, final: bool) -> None:
        """Send one answer without waiting (see the module docstring); never raises for
        the client's sake: a client that is gone is skipped."""
        if self.gone:
            return
        data = self.protocol.answer(message, final=final)
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
            data = self.protocol.answer(message, final=True, request_id=self.rules.unknown_id)
            if self._writer is not None:
                self._outbox.put(data)
                return
            self.sock.settimeout(self.rules.timeout_s)
            self.sock.sendall(data)
        except (OSError, ProtocolError):
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

    def close(self) -> None:
        """Send what is queued (while the client takes it), then close."""
        if self._writer is not None:
            self._outbox.put(None)
            self._writer.join()
        try:
            self.sock.close()
        except OSError:
            log.debug("closing %s failed", self.name)


class Listening(Protocol):
    """What the accept loop needs of a listening socket (a `socket.socket`)."""

    def settimeout(self, value: float | None, /) -> None: ...

    def accept(self) -> tuple[socket.socket, object]: ...


class Throttled:
    """A warning logged at most once every `every_s` seconds, counting the rest."""

    def __init__(self, every_s: float = LOG_EVERY_S) -> None:
        self._every_s = every_s
        self._last: float | None = None
        self._count = 0

    def warn(self, text: str, *args: object) -> None:
        self._count += 1
        now = time.monotonic()
        if self._last is not None and now - self._last < self._every_s:
            return
        log.warning(text + " times=%d", *args, self._count)
        self._last, self._count = now, 0


def serve_forever(
    listening: Listening,
    rules: SocketRules,
    handle: Callable[[Connection], None],
    stopping: threading.Event,
) -> threading.Thread:
    """Accept connections on `listening` in a thread, by the rules above."""
    slots = threading.BoundedSemaphore(rules.cap)
    workers = Workers(lambda conn: _run(handle, conn, slots), f"conn-{rules.name}")
    failures = Throttled()
    refusals = Throttled()

    def accept_loop() -> None:
        delay = FIRST_BACKOFF_S
        while not stopping.is_set():
            try:
                sock, _ = listening.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if stopping.is_set():
                    return
                code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
                failures.warn(
                    "event=accept_failed socket=%s error=%s wait_s=%g", rules.name, code, delay
                )
                stopping.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay = FIRST_BACKOFF_S
            if not slots.acquire(blocking=False):
                refusals.warn(
                    "event=connections_full socket=%s cap=%d %s",
                    rules.name,
                    rules.cap,
                    rules.busy_pointer,
                )
                refuse(sock, rules)
                continue
            conn = Connection(sock, rules)
            try:
                workers.run(conn)
            except RuntimeError:  # no thread could be started
                slots.release()
                failures.warn("event=thread_failed socket=%s", rules.name)
                refuse(sock, rules)

    # before the thread starts: a stop that closes the socket while the thread set
    # its timeout would make that call fail in the thread (EBADF)
    listening.settimeout(0.2)
    thread = threading.Thread(target=accept_loop, name=f"accept-{rules.name}", daemon=True)
    thread.start()
    return thread


class Workers:
    """Threads that each serve one connection at a time, kept for the next (rule 1).

    `run` hands a connection to an idle worker, or starts one; a worker waits
    IDLE_WORKER_S for its next connection, then ends. The caller's slots bound
    how many connections (so threads) there are at once. RuntimeError when no
    thread can be started.
    """

    def __init__(self, serve: Callable[[Connection], None], name: str) -> None:
        self._serve = serve
        self._name = name
        self._lock = threading.Lock()
        self._idle = 0
        self._work: queue.SimpleQueue[Connection] = queue.SimpleQueue()

    def run(self, conn: Connection) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._work.put(conn)
                return
        threading.Thread(target=self._loop, args=(conn,), name=self._name, daemon=True).start()

    def _loop(self, conn: Connection) -> None:
        while True:
            self._serve(conn)
            with self._lock:
                self._idle += 1
            try:
                conn = self._work.get(timeout=IDLE_WORKER_S)
            except queue.Empty:
                with self._lock:
                    if self._work.empty():  # nobody handed this worker a connection
                        self._idle -= 1
                        return
                conn = self._work.get()  # one was handed over as the wait ran out


def refuse(sock: socket.socket, rules: SocketRules) -> None:
    """Rule 2: answer `unavailable` if the request is already here, then close; never waits."""
    try:
        sock.setblocking(False)
        protocol = ServerConnection()
        envelope = None
        taken = 0
        while envelope is None and taken <= MAX_FRAME + PREFIX:
            data = sock.recv(65536)
            if not data:
                return
            taken += len(data)
            envelope = protocol.receive(data)
        if envelope is None:
            return
        message = Error(
            code=ErrorCode.UNAVAILABLE,
            message=f"{rules.role} is serving its limit of {rules.cap} connections on"
            f" {rules.name}; try again later, {rules.busy_pointer}",
        )
        sock.send(protocol.answer(message, final=True))
    except (OSError, ProtocolError):
        pass  # nothing (complete) to answer, or no room to answer it: closing says enough
    finally:
        sock.close()


def _run(
    handle: Callable[[Connection], None], conn: Connection, slots: threading.BoundedSemaphore
) -> None:
    try:
        handle(conn)
    except ProtocolError as exc:
        conn.send_error(exc)
    except TimeoutError as exc:
        log.info("event=idle_timeout socket=%s why=%s", conn.name, exc)
    except ConnectionError as exc:  # closed, reset or broken pipe: the client left
        log.info("event=peer_closed socket=%s why=%s", conn.name, exc)
    except Exception:
        log.exception("event=connection_failed socket=%s", conn.name)
        conn.send_error(ProtocolError(ErrorCode.INTERNAL, f"{conn.rules.role} failed; see its log"))
    finally:
        conn.close()
        slots.release()
