"""brokerd's sockets: making the link directory, binding, accepting, and one connection's I/O.

I/O: the file system (directory and socket modes) and Unix sockets. The rules of
a connection (one request, answers, final) are `boxmaker.core.connection`'s; this
module only moves bytes. Each accepted connection runs in its own thread.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from boxmaker.core.connection import ServerConnection
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.messages import Envelope, Error, Message

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0


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


class Connection:
    """One accepted connection: read its request, send answers, notice the peer leaving."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock = sock
        self.name = name
        self.protocol = ServerConnection()

    def read_request(self, timeout_s: float = REQUEST_TIMEOUT_S) -> Envelope:
        """The request; ProtocolError if it is bad, TimeoutError or OSError if it never comes."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no complete request in time")
            self.sock.settimeout(left)
            envelope = self.protocol.receive(self.sock.recv(65536))
            if envelope is not None:
                return envelope

    def send(self, message: Message, *, final: bool) -> None:
        self.sock.settimeout(REQUEST_TIMEOUT_S)
        self.sock.sendall(self.protocol.answer(message, final=final))

    def send_error(self, error: ProtocolError, request_id: str = "unknown") -> None:
        """Answer with an error, as far as the connection still allows; never raises."""
        message = Error(code=error.code, message=error.message)
        try:
            self.sock.settimeout(REQUEST_TIMEOUT_S)
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


def serve_forever(
    listening: socket.socket,
    name: str,
    handle: Callable[[Connection], None],
    stopping: threading.Event,
) -> threading.Thread:
    """Accept connections on `listening` in a thread; each runs `handle` in its own thread."""

    def accept_loop() -> None:
        listening.settimeout(0.2)
        while not stopping.is_set():
            try:
                sock, _ = listening.accept()
            except TimeoutError:
                continue
            except OSError:
                if stopping.is_set():
                    return
                log.exception("accept failed on %s", name)
                continue
            conn = Connection(sock, name)
            threading.Thread(target=_run, args=(handle, conn), daemon=True).start()

    thread = threading.Thread(target=accept_loop, name=f"accept-{name}", daemon=True)
    thread.start()
    return thread


def _run(handle: Callable[[Connection], None], conn: Connection) -> None:
    try:
        handle(conn)
    except ProtocolError as exc:
        conn.send_error(exc)
    except Exception:
        log.exception("event=connection_failed socket=%s", conn.name)
        conn.send_error(ProtocolError(ErrorCode.INTERNAL, "brokerd failed; see its log"))
    finally:
        conn.close()
