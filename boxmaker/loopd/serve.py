"""loop.sock: one turn per connection, its events streamed as they happen.

I/O: the listening socket, served by `boxmaker.ipc.server` (its directory 0700,
itself 0600 in dev mode; at most CAP connections at once; the request by its
deadline; only `turn` and `status` accepted). The request is `turn {session,
text, resume}`; the answers are `turn_event` frames (not final) and one
`turn_done`, or one `error` (a turn refused: `malformed`, or `unavailable`
when memoryd gives a new session no memory block). `status` is answered with a
`status_report` (the model and the chat format). A client that goes away mid-turn does not stop the
turn: it finishes and is logged, and a resumed session sees it. Nor does a
client that stops reading: answers go out with `send_soon`, so content sent
while the model writes never waits on the socket with the model held.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from boxmaker import __version__
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.messages import Event, Status, StatusReport, Turn, TurnEvent
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.server import Connection, SocketRules, serve_forever
from boxmaker.loopd.session_log import SessionLogDamagedError
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError

log = logging.getLogger(__name__)

CAP = 64  # turns share one model: more at once would only wait
BUSY_POINTER = Runbook.LOOPD_BUSY.pointer
RULES = SocketRules("loop.sock", "loopd", ("turn", "status"), CAP, BUSY_POINTER, unknown_id="turn")


class LoopServer:
    def __init__(
        self,
        turns: TurnLoop,
        listening: socket.socket,
        status: Callable[[], StatusReport] | None = None,
        rules: SocketRules = RULES,
    ) -> None:
        self._turns = turns
        self._listening = listening
        self._rules = rules
        started = format_timestamp(datetime.now(UTC))
        self._status = status or (
            lambda: StatusReport(
                role="loopd", version=__version__, started=started, detail="serving"
            )
        )
        self.stopping = threading.Event()

    def serve(self) -> None:
        """Accept until `stopping` is set; each connection in its own thread."""
        serve_forever(self._listening, self._rules, self.handle, self.stopping).join()

    def handle(self, conn: Connection) -> None:
        message = conn.read_request().message
        if isinstance(message, Status):
            conn.send_soon(self._status(), final=True)
            return
        assert isinstance(message, Turn)  # the rules accept nothing else

        def emit(event: Event) -> None:
            conn.send_soon(TurnEvent(event=event), final=False)

        try:
            done = self._turns.run(message.session, message.text, message.resume, emit)
        except TurnRefusedError as exc:
            raise ProtocolError(exc.code, str(exc)) from exc
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        conn.send_soon(done, final=True)
