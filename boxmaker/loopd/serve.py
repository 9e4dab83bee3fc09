"""loop.sock: one turn per connection, its events streamed as they happen.

I/O: the listening socket (its directory 0700, itself 0600 in dev mode), one
thread per connection. The request is `turn {session, text, resume}`; the
answers are `turn_event` frames (not final) and one `turn_done`, or one `error`.
`status` is answered with a `status_report` (the model and the chat format).
A client that goes away mid-turn does not stop the turn: it finishes and is
logged, and a resumed session sees it. Nor does a client that stops reading: an
answer the socket cannot take at once is queued for a writer thread of its
connection, so content sent while the model writes never waits on the socket
with the model held.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import stat
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from boxmaker import __version__
from boxmaker.core.connection import ServerConnection
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.messages import Error, Event, Message, Status, StatusReport, Turn, TurnEvent
from boxmaker.core.timestamps import format_timestamp
from boxmaker.loopd.session_log import SessionLogDamagedError
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0
FORBIDDEN_POINTER = "see runbook.md#socket-forbidden"


def bind(path: Path, dir_mode: int = 0o700, socket_mode: int = 0o600) -> socket.socket:
    """A listening socket at `path`; its directory made if missing, both modes set."""
    path.parent.mkdir(mode=dir_mode, parents=True, exist_ok=True)
    if stat.S_IMODE(path.parent.stat().st_mode) != dir_mode:  # a chmod would drop setgid
        os.chmod(path.parent, dir_mode)
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o777 & ~socket_mode)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, socket_mode)
    sock.listen(16)
    return sock


class _Client:
    """One connection. Answers go straight to the socket while it takes them at once;
    from the first that would wait, they are queued, in order, for a writer thread
    of the connection's own. So a client that reads slowly, or not at all, holds up
    neither its turn nor the model that every session's turns share (content is sent
    while the model writes), and a client that keeps up gets each answer with no
    hand-over. Sending stops quietly at the first failure; the turn goes on. Only
    the connection's own thread calls `send`, `error` and `close`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.protocol = ServerConnection()
        self.gone = False
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    def read_request(self) -> Turn | Status:
        self.sock.settimeout(REQUEST_TIMEOUT_S)
        while True:
            envelope = self.protocol.receive(self.sock.recv(65536))
            if envelope is None:
                continue
            if not isinstance(envelope.message, Turn | Status):
                log.error(
                    "event=forbidden kind=%s socket=loop.sock %s",
                    envelope.message.kind,
                    FORBIDDEN_POINTER,
                )
                raise ProtocolError(
                    ErrorCode.FORBIDDEN, f"{envelope.message.kind} is not accepted on loop.sock"
                )
            return envelope.message

    def send(self, message: Message, *, final: bool, request_id: str | None = None) -> None:
        if self.gone:
            return
        data = self.protocol.answer(message, final=final, request_id=request_id)
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
            self._writer = threading.Thread(target=self._write, name="loop-answers", daemon=True)
            self._writer.start()
        self._outbox.put(data)

    def _write(self) -> None:
        while (data := self._outbox.get()) is not None:
            if self.gone:
                continue
            try:
                self.sock.sendall(data)
            except OSError:
                self._lost()

    def _lost(self) -> None:
        self.gone = True
        log.info("event=client_gone")

    def error(self, code: ErrorCode, text: str) -> None:
        try:
            self.send(Error(code=code, message=text), final=True, request_id="turn")
        except ProtocolError:
            self.gone = True

    def close(self) -> None:
        """Send what is queued (as long as the client takes it), then close."""
        if self._writer is not None:
            self._outbox.put(None)
            self._writer.join()
        self.sock.close()


class LoopServer:
    def __init__(
        self,
        turns: TurnLoop,
        listening: socket.socket,
        status: Callable[[], StatusReport] | None = None,
    ) -> None:
        self._turns = turns
        self._listening = listening
        started = format_timestamp(datetime.now(UTC))
        self._status = status or (
            lambda: StatusReport(
                role="loopd", version=__version__, started=started, detail="serving"
            )
        )
        self.stopping = threading.Event()

    def serve(self) -> None:
        """Accept until `stopping` is set; each connection in its own thread."""
        self._listening.settimeout(0.2)
        while not self.stopping.is_set():
            try:
                sock, _ = self._listening.accept()
            except TimeoutError:
                continue
            except OSError:
                if self.stopping.is_set():
                    return
                raise
            threading.Thread(target=self._handle, args=(sock,), daemon=True).start()

    def _handle(self, sock: socket.socket) -> None:
        client = _Client(sock)
        try:
            turn = client.read_request()
            if isinstance(turn, Status):
                client.send(self._status(), final=True)
                return
            sock.settimeout(None)

            def emit(event: Event) -> None:
                client.send(TurnEvent(event=event), final=False)

            done = self._turns.run(turn.session, turn.text, turn.resume, emit)
            client.send(done, final=True)
        except ProtocolError as exc:
            client.error(exc.code, exc.message)
        except (TimeoutError, ConnectionError):
            log.info("event=request_incomplete")
        except TurnRefusedError as exc:
            client.error(ErrorCode.MALFORMED, str(exc))
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            client.error(ErrorCode.UNAVAILABLE, str(exc))
        except Exception:
            log.exception("event=turn_failed")
            client.error(ErrorCode.INTERNAL, "loopd failed; see its log")
        finally:
            client.close()
