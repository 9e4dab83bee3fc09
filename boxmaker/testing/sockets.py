"""Test clients and scripted servers on real Unix sockets.

I/O: Unix sockets and threads. No role imports this module.

    exchange        one request through boxmaker.ipc.client, every answer back;
                    a failure raised as the OSError or ProtocolError behind it
    exchange_raw    one frame of any bytes, the answer frames' bytes back
    accepts         whether a socket accepts a connection now
    OpenCall        a request whose connection the test holds: read its answers
                    as they come, or drop it
    ScriptedServer  a tiny server: it reads one request per connection and hands
                    it, as a `Peer`, to a script the test chose (the scripts of a
                    fake brokerd and a fake loopd are in `peer_scripts`)

exchange_raw, OpenCall and ScriptedServer work below boxmaker.ipc on purpose: they
send what the real client and server never would (any bytes, answers under any
id), or hold a connection open while the test acts.

Nothing here sleeps to wait: waits poll a condition with a deadline (`wait_until`)
or block on an event that the test or the server's stop sets.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from boxmaker.core.errors import ProtocolError, RequestError
from boxmaker.core.timestamps import parse_timestamp
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.connection import ClientConnection, ServerConnection
from boxmaker.core.wire.envelope import Envelope, Message, encode_envelope
from boxmaker.core.wire.frames import FrameDecoder, encode_frame
from boxmaker.ipc.client import Request
from boxmaker.ipc.serving import bind_socket
from boxmaker.testing.waiting import wait_until

STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 10.0  # a scripted server's wait for a connection's request

# --- clients ----------------------------------------------------------------------


def exchange(
    path: Path, message: Message, request_id: str = "t1", timeout_s: float = 10.0
) -> list[Envelope]:
    """Send `message` on the socket at `path`; every answer envelope, the final one last.

    Each answer must come within `timeout_s` of the one before (of sending, for
    the first). The request goes through `boxmaker.ipc.client`; a failure is raised
    as what caused it (FileNotFoundError, ConnectionRefusedError, TimeoutError, a
    ProtocolError...), as tests catch it, not as the client's RequestError.
    """
    try:
        request = Request(path, message, request_id, timeout_s)
        answers: list[Envelope] = []
        for answer in request.answers():
            answers.append(answer)
            request.wait(timeout_s)
        return answers
    except RequestError as exc:
        cause = exc.__cause__
        if not isinstance(cause, OSError | ProtocolError):
            raise
    raise cause


def _connect(path: Path, timeout_s: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def exchange_raw(path: Path, payload: bytes, timeout_s: float = 10.0) -> tuple[list[bytes], bool]:
    """Send `payload` as one frame; the answer frames' bytes, and whether the server
    then closed the connection (read to end of stream)."""
    decoder = FrameDecoder()
    frames: list[bytes] = []
    with _connect(path, timeout_s) as sock:
        sock.sendall(len(payload).to_bytes(4, "big") + payload)
        while True:
            data = sock.recv(65536)
            if not data:
                return frames, True
            frames.extend(decoder.feed(data))


def accepts(path: Path) -> bool:
    """True if a connection to the socket at `path` is accepted now."""
    try:
        with _connect(path, 1.0):
            return True
    except OSError:
        return False


class OpenCall:
    """A tool_request whose connection the test holds: read answers as they come, or drop it."""

    def __init__(self, path: Path, request: ToolRequest, timeout_s: float = 10.0) -> None:
        self.request = request
        self.answers: list[Envelope] = []
        self._conn = ClientConnection(request.call)
        self._sock: socket.socket | None = _connect(path, timeout_s)
        self._sock.sendall(self._conn.request(request))

    @property
    def done(self) -> bool:
        return self._conn.done

    def _read_once(self) -> None:
        if self._sock is None:
            raise RuntimeError("the call was dropped")
        self.answers.extend(self._conn.receive(self._sock.recv(65536)))

    def first(self) -> Envelope:
        """The first answer (for an ask: the pending_approval frame)."""
        while not self.answers:
            self._read_once()
        return self.answers[0]

    def final(self, timeout_s: float = 10.0) -> Envelope:
        """Read to the final answer (waiting at most `timeout_s` for each read)."""
        if self._sock is None:
            raise RuntimeError("the call was dropped")
        self._sock.settimeout(timeout_s)
        while not self._conn.done:
            self._read_once()
        return self.answers[-1]

    def drop(self) -> None:
        """Close the connection, as a requester that went away."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> OpenCall:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()


# --- scripted servers ----------------------------------------------------------------


class Peer:
    """One accepted connection, as a script sees it: the request and ways to answer."""

    def __init__(self, sock: socket.socket, request: Envelope, stopping: threading.Event) -> None:
        self.sock = sock
        self.request = request
        self._stopping = stopping

    def send(self, message: Message, *, final: bool, request_id: str | None = None) -> None:
        """One answer frame, carrying the request's id unless `request_id` says otherwise."""
        ident = self.request.id if request_id is None else request_id
        envelope = Envelope(id=ident, final=final, message=message)
        self.sock.sendall(encode_frame(encode_envelope(envelope)))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def hold(self, timeout_s: float = 60.0) -> None:
        """Answer nothing until the server stops (or the peer goes away)."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(0.05)
        while not self._stopping.is_set() and time.monotonic() < deadline:
            try:
                if not self.sock.recv(1):
                    return  # the client went away
            except TimeoutError:
                continue
            except OSError:
                return

    def wait_past(self, moment: str, extra_ms: int = 0, timeout_s: float = 30.0) -> None:
        """Return once the wall clock is past the timestamp `moment` plus `extra_ms`."""
        target = (parse_timestamp(moment) + timedelta(milliseconds=extra_ms)).timestamp()
        wait_until(lambda: time.time() > target, timeout_s, f"the clock past {moment}")


Script = Callable[[Peer], None]


class ScriptedServer:
    """A listening Unix socket; each connection's request is read, then `script` answers it.

    `requests` holds every request read, in order; `connections` counts the
    connections accepted (a request that never came still counts).
    """

    def __init__(self, path: Path, script: Script) -> None:
        self.path = path
        self.script = script
        self.requests: list[Envelope] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._listening = bind_socket(path, backlog=16)
        self._listening.settimeout(0.05)
        self._accepting = threading.Thread(target=self._accept, name="scripted-accept")
        self._accepting.start()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listening.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
            worker = threading.Thread(target=self._serve, args=(sock,), name="scripted-conn")
            with self._lock:
                self._threads.append(worker)
            worker.start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            try:
                request = self._read_request(sock)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                sock.settimeout(None)
                self.script(Peer(sock, request, self._stopping))
            except OSError:
                pass  # the client went away: what a script does next is moot
            except BaseException as exc:  # a broken script must fail the test, not vanish
                with self._lock:
                    self.errors.append(exc)

    def _read_request(self, sock: socket.socket) -> Envelope | None:
        conn = ServerConnection()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while not self._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sock.settimeout(min(left, 0.05))
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return None
            envelope = conn.receive(data)
            if envelope is not None:
                return envelope
        return None

    def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> None:
        def enough() -> bool:
            with self._lock:
                return len(self.requests) >= count

        wait_until(enough, timeout_s, f"{count} requests")

    def stop(self) -> None:
        self._stopping.set()
        self._accepting.join(STOP_TIMEOUT_S)
        self._listening.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(STOP_TIMEOUT_S)
        self.path.unlink(missing_ok=True)
        if self.errors:
            raise RuntimeError(f"a scripted server's script failed: {self.errors[0]!r}")

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
