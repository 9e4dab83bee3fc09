"""loop.sock: one turn per connection, its events streamed as they happen; and the
owner's view of the sessions.

I/O: the listening socket, served by `boxmaker.ipc.server` (its directory 0700,
itself 0600 in dev mode; at most CAP connections at once; the request by its
deadline; only ACCEPTS accepted). The requests and their answers:

    turn {session, text, resume}   turn_event frames (not final), then turn_done;
    compact {session}              or one `error` (a turn refused: `malformed`, or
                                   `unavailable` when memoryd gives a new session no
                                   memory block, or the session's log is damaged)
    sessions {}                    session_list pages (`session_view`): every page
                                   but the last not final; bxctl joins their items
    session_show {session, start}  one session_entries page; `malformed` for a
                                   session with no log, `unavailable` for a damaged one
    status {}                      status_report (the model and the chat format)

`compact` is a turn of its own (`TurnLoop.compact`): it waits for the session's
turn lock, as a turn does. `sessions` and `session_show` only read the logs
(`loopd.session_view`): they take neither the session's lock nor the model's,
so they answer while a turn runs. A client that goes away mid-turn does not stop the
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
from boxmaker.core.messages import (
    Compact,
    Event,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    Status,
    StatusReport,
    Turn,
    TurnDone,
    TurnEvent,
)
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.server import Connection, SocketRules, serve_forever
from boxmaker.loopd.session_log import SessionLogDamagedError, SessionLogs
from boxmaker.loopd.session_view import NoSuchSessionError, SessionView, page_summaries
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError

log = logging.getLogger(__name__)

CAP = 64  # turns share one model: more at once would only wait
BUSY_POINTER = Runbook.LOOPD_BUSY.pointer
ACCEPTS = ("turn", "compact", "sessions", "session_show", "status")
RULES = SocketRules("loop.sock", "loopd", ACCEPTS, CAP, BUSY_POINTER, unknown_id="turn")


class LoopServer:
    def __init__(
        self,
        turns: TurnLoop,
        listening: socket.socket,
        status: Callable[[], StatusReport] | None = None,
        rules: SocketRules = RULES,
        logs: SessionLogs | None = None,
    ) -> None:
        self._turns = turns
        # the turn loop's own logs unless told otherwise: one home, read and written
        self._view = SessionView(logs if logs is not None else turns.logs)
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
        envelope = conn.read_request()
        message = envelope.message
        if isinstance(message, Status):
            conn.send_soon(self._status(), final=True)
        elif isinstance(message, Sessions):
            *pages, last = page_summaries(self._view.summaries(), envelope.id)
            for items in pages:
                conn.send_soon(SessionList(items=items), final=False)
            conn.send_soon(SessionList(items=last), final=True)
        elif isinstance(message, SessionShow):
            conn.send_soon(self._show(message, envelope.id), final=True)
        else:
            assert isinstance(message, Turn | Compact)  # the rules accept nothing else
            conn.send_soon(self._turn(conn, message), final=True)

    def _show(self, message: SessionShow, request_id: str) -> SessionEntries:
        try:
            return self._view.show(message.session, message.start, request_id)
        except NoSuchSessionError as exc:
            raise ProtocolError(ErrorCode.MALFORMED, str(exc)) from exc
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc

    def _turn(self, conn: Connection, message: Turn | Compact) -> TurnDone:
        """Run the turn (or the compaction), its events streamed; its turn_done."""

        def emit(event: Event) -> None:
            conn.send_soon(TurnEvent(event=event), final=False)

        try:
            if isinstance(message, Compact):
                return self._turns.compact(message.session, emit)
            return self._turns.run(message.session, message.text, message.resume, emit)
        except TurnRefusedError as exc:
            raise ProtocolError(exc.code, str(exc)) from exc
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
