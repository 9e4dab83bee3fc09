"""loop.sock: one turn per connection, its events streamed as they happen; and the
owner's view of the sessions.

I/O: the listening socket, bound and served by `boxmaker.ipc.shell` (its link's
modes; at most CAP connections at once; the request by its deadline; only the
kinds of `core.home.links.LOOP`, each by its handler), the session logs, and the
ports to brokerd and memoryd. `Loopd` is what `loopd serve` and `loopd demo` run
and what tests start in their own process (`boxmaker.testing.daemons`): from
`loopd.toml`, the tool port to brokerd (`[broker] socket`; "none": every broker
tool fails, logged at start), the memory port to memoryd (`[memory] socket`;
"none": no memory block, logged at start; the demo has none), the session logs
under `[paths] home`, and the turn loop over the model, neutralising what
`markers_of` lists. The requests and their answers:

    turn {session, text, resume}   turn_event frames (not final), then turn_done;
    compact {session}              or one `error` (a turn refused: `malformed`, or
                                   `unavailable` when memoryd gives a new session no
                                   memory block, or the session's log is damaged)
    sessions {}                    session_list pages (`session_view`): every page
                                   but the last not final; bxctl joins their items
    session_show {session, start}  one session_entries page; `malformed` for a
                                   session with no log, `unavailable` for a damaged one
    status {}                      status_report (the model and the chat format)
    cancel {session}               cancelled {session, running}: the session's running
                                   turn stops at its next token, and ends with its own
                                   turn_done; a turn whose client closes its connection
                                   stops the same way (issue 42)

Who may send what (`core.home.links` rule 5): `compact`, `cancel`, `sessions` and
`session_show` are the owner's alone, by the peer's uid (`[sockets] owner_user` in a root install;
every peer in dev mode, `ipc.peers`); any other peer, gatewayd's user among them,
is answered `forbidden` for them before a handler runs. `turn` and `status` are
open to every peer the socket's group admits.

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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.home.links import LOOP, Link, Role
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Status
from boxmaker.core.wire.loop import (
    Cancel,
    Cancelled,
    Compact,
    Event,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    Turn,
    TurnDone,
    TurnEvent,
)
from boxmaker.ipc.connection import Connection, Handler, Handlers
from boxmaker.ipc.role import EXIT_OK
from boxmaker.ipc.shell import Endpoint, RoleSockets
from boxmaker.loopd.broker_port import NOT_CONFIGURED, BrokerPort
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.memory_port import MemoryPort
from boxmaker.loopd.model import Model
from boxmaker.loopd.session_log import SessionLogDamagedError, SessionLogs
from boxmaker.loopd.session_view import NoSuchSessionError, SessionView, page_summaries
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError

log = logging.getLogger(__name__)

CAP = 64  # turns share one model: more at once would only wait
BACKLOG = 16


def markers_of(model: Model, dialect: Dialect) -> tuple[str, ...]:
    """What the turn loop neutralises besides the dialect's own tags: the loaded model's
    marker list (`loopd.markers`), or the chat format's markers for a model that has
    no list (the demo's, a test's scripted one), so that neutralising is never off."""
    if model.markers:
        return tuple(marker.text for marker in model.markers)
    return tuple(dialect.markers)


class Loopd:
    """loop.sock over a turn loop (the module docstring): `start` serves it, `stop` ends it."""

    def __init__(
        self,
        config: LoopdConfig,
        model: Model,
        dialect: Dialect,
        limits: TurnLimits,
        detail: str,
        *,
        socket_path: Path | None = None,
        memory: bool = True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`detail` is what `status` says of the model; `socket_path` (None: `[sockets]
        loop`) where it serves; `memory` false: no memory port, whatever `[memory]`
        says (the demo); `clock` the turn loop's."""
        self.dialect = dialect
        self.port = _broker_port(config)
        self.memory = _memory_port(config) if memory else None
        self.turns = TurnLoop(
            model,
            dialect,
            SessionLogs(config.home),
            self.port,
            limits,
            clock,
            markers=markers_of(model, dialect),
            memory=self.memory,
        )
        self.path = config.loop_socket if socket_path is None else socket_path
        endpoint = Endpoint(LOOP, self.path, CAP, BACKLOG)
        self.sockets = RoleSockets(
            Role.LOOPD, (endpoint,), config.sockets.group_access, owner=config.sockets.owner_user
        )
        self.server = LoopServer(self.turns, self.sockets.status_handler(lambda: detail))

    def serving(self) -> str:
        """The fields of its `event=serving` line."""
        port = None if self.port is None else self.port.path
        memory = None if self.memory is None else self.memory.path
        return f"loop={self.path} broker={port} memory={memory} format={self.dialect.name}"

    def start(self) -> None:
        self.sockets.start(self.server.handlers())

    def stop(self) -> int:
        self.sockets.stop()
        return EXIT_OK


def _broker_port(config: LoopdConfig) -> BrokerPort | None:
    path = config.broker_socket
    if path is None:
        log.warning("event=no_broker %s; %s", NOT_CONFIGURED, Runbook.BROKER_UNAVAILABLE.pointer)
        return None
    return BrokerPort(path, config.broker.timeout_ms)


def _memory_port(config: LoopdConfig) -> MemoryPort | None:
    path = config.memory_socket
    if path is None:
        log.warning('event=no_memory the memory block is off ([memory] socket = "none")')
        return None
    return MemoryPort(path, config.memory.timeout_ms)


class LoopServer:
    """loop.sock's handlers over `turns`, and the session view of its logs (or `logs`)."""

    def __init__(self, turns: TurnLoop, status: Handler, logs: SessionLogs | None = None) -> None:
        self._turns = turns
        # the turn loop's own logs unless told otherwise: one home, read and written
        self._view = SessionView(logs if logs is not None else turns.logs)
        self._status = status

    def handlers(self) -> dict[Link, Handlers]:
        """loop.sock's handler of each kind its link accepts."""
        return {
            LOOP: {
                Turn: self._turn,
                Compact: self._compact,
                Cancel: self._cancel,
                Sessions: self._sessions,
                SessionShow: self._session_show,
                Status: self._status,
            }
        }

    def _sessions(self, conn: Connection, _: Sessions) -> None:
        *pages, last = page_summaries(self._view.summaries(), conn.request_id)
        for items in pages:
            conn.send_soon(SessionList(items=items), final=False)
        conn.send_soon(SessionList(items=last), final=True)

    def _session_show(self, conn: Connection, message: SessionShow) -> None:
        conn.send_soon(self._show(message, conn.request_id), final=True)

    def _show(self, message: SessionShow, request_id: str) -> SessionEntries:
        try:
            return self._view.show(message.session, message.start, request_id)
        except NoSuchSessionError as exc:
            raise ProtocolError(ErrorCode.MALFORMED, str(exc)) from exc
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc

    def _turn(self, conn: Connection, message: Turn) -> None:
        # a client that leaves mid-turn (killed, Ctrl-C) stops it at the next token
        self._stream(
            conn,
            lambda emit: self._turns.run(
                message.session, message.text, message.resume, emit, conn.client_left
            ),
        )

    def _cancel(self, conn: Connection, message: Cancel) -> None:
        running = self._turns.cancel(message.session)
        conn.send_soon(Cancelled(session=message.session, running=running), final=True)

    def _compact(self, conn: Connection, message: Compact) -> None:
        self._stream(conn, lambda emit: self._turns.compact(message.session, emit))

    def _stream(self, conn: Connection, run: Callable[[Callable[[Event], None]], TurnDone]) -> None:
        """Run the turn (or the compaction), its events streamed, then its turn_done."""

        def emit(event: Event) -> None:
            conn.send_soon(TurnEvent(event=event), final=False)

        try:
            done = run(emit)
        except TurnRefusedError as exc:
            raise ProtocolError(exc.code, str(exc)) from exc
        except SessionLogDamagedError as exc:
            log.error("event=session_log_damaged %s", exc)
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        conn.send_soon(done, final=True)
