"""The one socket client of every role: connect, send one request, read its answers by a deadline.

I/O: one Unix-socket connection per request. Waiting is bounded by a deadline, not
by a per-read timeout, so a peer that trickles bytes cannot hold the caller for
ever; the caller may move the deadline between answers (loopd's tool port waits
until an approval's expiry once brokerd says the call waits for the owner). A
request with no deadline (`bxctl chat`, whose turn may wait on the owner) still
connects within CONNECT_TIMEOUT_S. A request given `cancelled` checks it every
`poll_s` seconds while it waits for an answer, and once it is true stops reading:
`answers()` ends without a final answer and the connection is closed (brokerd's
gateway link, whose held request ends when the approval is settled elsewhere).

Every way a request can fail is one `RequestError` (boxmaker.core.errors) whose
text is the cause in a few words; the caller adds who it was talking to and the
runbook pointer:

    UnreachableError       no socket at the path, or nobody listening   the strerror
    NotAllowedError        the kernel refused (the socket's modes)       the strerror
    TimedOutError          the deadline passed                           LATE
    RequestTooLargeError   the request does not fit in a frame           nothing was sent
    BrokenError            any other failure, a protocol error included  what failed
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from boxmaker.core.errors import (
    BrokenError,
    FrameTooLargeError,
    NotAllowedError,
    ProtocolError,
    RequestTooLargeError,
    TimedOutError,
    UnreachableError,
)
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.envelope import Envelope, Message

CONNECT_TIMEOUT_S = 30.0
POLL_S = 0.25
LATE = "no answer before the deadline"


class Request:
    """One request on the socket at `path`; iterate `answers()` for its answers."""

    def __init__(
        self,
        path: Path,
        message: Message,
        request_id: str,
        timeout_s: float | None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        cancelled: Callable[[], bool] | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.path = path
        self._cancelled = cancelled
        self._poll_s = poll_s
        self._conn = ClientConnection(request_id)
        try:
            self._payload = self._conn.request(message)
        except FrameTooLargeError as exc:
            raise RequestTooLargeError(str(exc)) from exc
        self._monotonic = monotonic
        self.deadline: float | None = None
        self.wait(timeout_s)

    def wait(self, seconds: float | None) -> None:
        """Move the deadline to `seconds` from now (None: no deadline)."""
        self.deadline = None if seconds is None else self._monotonic() + seconds

    def _left(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - self._monotonic()
        if left <= 0:
            raise TimeoutError(LATE)
        return left

    def _receive(self, sock: socket.socket) -> bytes | None:
        """The next bytes from the server; None once `cancelled` says to stop."""
        if self._cancelled is None:
            sock.settimeout(self._left())
            return sock.recv(65536)
        while not self._cancelled():
            left = self._left()
            sock.settimeout(self._poll_s if left is None else min(left, self._poll_s))
            try:
                return sock.recv(65536)
            except TimeoutError:
                continue
        return None

    def answers(self) -> Iterator[Envelope]:
        """Each answer as it arrives, the final one last; a RequestError if that fails.

        With `cancelled`, the answers may end before the final one (it became true).
        """
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                left = self._left()
                sock.settimeout(CONNECT_TIMEOUT_S if left is None else min(left, CONNECT_TIMEOUT_S))
                sock.connect(str(self.path))
                sock.settimeout(self._left())
                sock.sendall(self._payload)
                while not self._conn.done:
                    data = self._receive(sock)
                    if data is None:
                        return
                    yield from self._conn.receive(data)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise UnreachableError(exc.strerror or str(exc)) from exc
        except PermissionError as exc:
            raise NotAllowedError(exc.strerror or str(exc)) from exc
        except TimeoutError as exc:
            raise TimedOutError(LATE) from exc
        except (OSError, ProtocolError) as exc:
            raise BrokenError(str(exc)) from exc


def answers(
    path: Path, message: Message, request_id: str, timeout_s: float | None
) -> Iterator[Envelope]:
    """Each answer to `message` sent on `path`, by a deadline `timeout_s` from now."""
    return Request(path, message, request_id, timeout_s).answers()
