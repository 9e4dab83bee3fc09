"""brokerd's sockets: making the link directory, binding, accepting, and one connection's I/O.

I/O: the file system (directory and socket modes) and Unix sockets. The rules of
a connection (one request, answers, final) are `boxmaker.core.connection`'s; this
module only moves bytes. The rules of accepting, per listening socket:

    1. Each accepted connection runs in its own thread, and at most `cap`
       connections of one socket are served at once (`descriptors.ConnectionCaps`:
       broker.sock and admin.sock each have their own, so a full broker.sock
       never keeps the owner out of admin.sock).
    2. A connection over the cap is accepted and refused at once by the accept
       thread, without a thread of its own and without waiting: if its request
       is already in the socket (as it is when the connection waited in the
       backlog, since a client sends on connecting) it is answered error
       `unavailable` with a one-line message and the request's id; otherwise it
       is closed, which a client reads as `unavailable` too (closed before the
       final answer). It is not left in the backlog: there it would wait unseen,
       its client would wait out its whole timeout instead of failing at once,
       and the backlog would fill for everyone. Refusing never waits on a client,
       so a flood of idle connections costs brokerd one descriptor at a time.
    3. When accept fails (EMFILE, ENFILE or anything else), the accept thread
       waits before trying again, the wait doubling from 10 ms to at most 1 s
       and starting again after the next success. Such failures, and refusals
       over the cap, are logged as one warning line (no traceback) at most once
       every LOG_EVERY_S seconds, with how many there were since the last line.
    4. A request must be complete within the request deadline (REQUEST_TIMEOUT_S
       from accepting). A client that sends nothing in that time, or that closes
       or resets its connection early, is one `info` line (`event=idle_timeout`
       or `event=peer_closed`) and a closed connection; only brokerd's own
       failures are logged with their traceback and answered `internal`.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from boxmaker.core.connection import ServerConnection
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.frames import MAX_FRAME, PREFIX
from boxmaker.core.messages import Envelope, Error, Message

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
LOG_EVERY_S = 5.0
FIRST_BACKOFF_S = 0.01
MAX_BACKOFF_S = 1.0
BUSY_POINTER = "see runbook.md#broker-busy"


class StartupError(Exception):
    """brokerd cannot start; the message is one line saying what to do."""


def bind_socket(path: Path, dir_mode: int = 0o700, socket_mode: int = 0o600) -> socket.socket:
    """A listening socket at `path`, its directory at `dir_mode`, itself at `socket_mode`.

    The directory is created if missing and its mode set whether made or found. A
    stale socket file is removed: the caller holds the audit lock, which proves no
    other brokerd is serving it.
    """
    directory = path.parent
    try:
        directory.mkdir(mode=dir_mode, parents=True, exist_ok=True)
        # only when it differs: a chmod by a user outside the directory's group
        # clears its set-group-id bit, and the socket would lose the link's group
        if stat.S_IMODE(directory.stat().st_mode) != dir_mode:
            os.chmod(directory, dir_mode)
    except OSError as exc:
        raise StartupError(f"cannot prepare the socket directory {directory}: {exc}") from exc
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot remove the stale socket {path}: {exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o777 & ~socket_mode)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        os.chmod(path, socket_mode)
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {path}: {exc}") from exc
    return sock


class PeerClosedError(ConnectionError):
    """The client closed its side before its request was complete."""


class Connection:
    """One accepted connection: read its request, send answers, notice the peer leaving."""

    def __init__(
        self, sock: socket.socket, name: str, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> None:
        self.sock = sock
        self.name = name
        self.timeout_s = timeout_s
        self.protocol = ServerConnection()

    def read_request(self) -> Envelope:
        """The request; ProtocolError if it is bad, TimeoutError if it does not come in
        time, PeerClosedError (or another OSError) if the client goes first."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete request within {self.timeout_s:g} s")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise PeerClosedError("the client closed before its request was complete")
            envelope = self.protocol.receive(data)
            if envelope is not None:
                return envelope

    def send(self, message: Message, *, final: bool) -> None:
        self.sock.settimeout(self.timeout_s)
        self.sock.sendall(self.protocol.answer(message, final=final))

    def send_error(self, error: ProtocolError, request_id: str = "unknown") -> None:
        """Answer with an error, as far as the connection still allows; never raises."""
        message = Error(code=error.code, message=error.message)
        try:
            self.sock.settimeout(self.timeout_s)
            self.sock.sendall(self.protocol.answer(message, final=True, request_id=request_id))
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
        try:
            self.sock.close()
        except OSError:
            log.debug("closing %s failed", self.name)


class Listening(Protocol):
    """What the accept loop needs of a listening socket (a `socket.socket`)."""

    def settimeout(self, value: float | None, /) -> None: ...

    def accept(self) -> tuple[socket.socket, object]: ...


class _Throttled:
    """A warning logged at most once every LOG_EVERY_S seconds, counting the rest."""

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
    name: str,
    handle: Callable[[Connection], None],
    stopping: threading.Event,
    *,
    cap: int,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> threading.Thread:
    """Accept connections on `listening` in a thread, by the rules above."""
    slots = threading.BoundedSemaphore(cap)
    failures = _Throttled()
    refusals = _Throttled()

    def accept_loop() -> None:
        listening.settimeout(0.2)
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
                failures.warn("event=accept_failed socket=%s error=%s wait_s=%g", name, code, delay)
                stopping.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
                continue
            delay = FIRST_BACKOFF_S
            if not slots.acquire(blocking=False):
                refusals.warn("event=connections_full socket=%s cap=%d %s", name, cap, BUSY_POINTER)
                _refuse(sock, name, cap)
                continue
            conn = Connection(sock, name, timeout_s)
            try:
                threading.Thread(target=_run, args=(handle, conn, slots), daemon=True).start()
            except RuntimeError:  # no thread could be started
                slots.release()
                failures.warn("event=thread_failed socket=%s", name)
                _refuse(sock, name, cap)

    thread = threading.Thread(target=accept_loop, name=f"accept-{name}", daemon=True)
    thread.start()
    return thread


def _refuse(sock: socket.socket, name: str, cap: int) -> None:
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
            message=f"brokerd is serving its limit of {cap} connections on {name};"
            f" try again later, {BUSY_POINTER}",
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
        conn.send_error(ProtocolError(ErrorCode.INTERNAL, "brokerd failed; see its log"))
    finally:
        conn.close()
        slots.release()
