"""memoryd's three sockets: one request per connection, answered from the memory files.

I/O: the listening sockets, served by `boxmaker.ipc.server` (their directories
0700 and the sockets 0600 in dev mode, 2750 and 0660 in a root install; at most
a cap of connections each; the request by its deadline). Each socket accepts
only its own kinds, and answers any other kind `forbidden`:

    socket                              client   accepts
    run/loop-memory/memory.sock         loopd    memory_block, session_updated, status
    run/broker-memory/memory.sock       brokerd  memory_call, status
    run/owner-memory/admin.sock         owner    reindex, memory_log, status

What each kind is answered is `boxmaker.memoryd.handlers`'.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.core.messages import (
    MemoryBlock,
    MemoryCall,
    MemoryLog,
    Message,
    Reindex,
    SessionUpdated,
    Status,
    StatusReport,
)
from boxmaker.core.runbook import Runbook
from boxmaker.ipc.server import Connection, Serving, SocketRules, serve_forever
from boxmaker.memoryd.handlers import MemoryHandlers

BUSY_POINTER = Runbook.MEMORYD_BUSY.pointer
LOOP_RULES = SocketRules(
    "memory.sock", "memoryd", ("memory_block", "session_updated", "status"), 16, BUSY_POINTER
)
BROKER_RULES = SocketRules("memory.sock", "memoryd", ("memory_call", "status"), 16, BUSY_POINTER)
OWNER_RULES = SocketRules(
    "admin.sock", "memoryd", ("reindex", "memory_log", "status"), 4, BUSY_POINTER
)


@dataclass(frozen=True)
class Listeners:
    """memoryd's three listening sockets."""

    loop: socket.socket
    broker: socket.socket
    owner: socket.socket

    def close(self) -> None:
        for sock in (self.loop, self.broker, self.owner):
            sock.close()


class MemoryServer:
    """Serves the three sockets of `listeners` with `handlers` until `stopping` is set."""

    def __init__(
        self,
        handlers: MemoryHandlers,
        listeners: Listeners,
        status: Callable[[], StatusReport],
    ) -> None:
        self._handlers = handlers
        self._listeners = listeners
        self._status = status
        self.stopping = threading.Event()

    def start(self) -> list[Serving]:
        """Start accepting on every socket; what serves each."""
        return [
            serve_forever(self._listeners.loop, LOOP_RULES, self.handle, self.stopping),
            serve_forever(self._listeners.broker, BROKER_RULES, self.handle, self.stopping),
            serve_forever(self._listeners.owner, OWNER_RULES, self.handle, self.stopping),
        ]

    def handle(self, conn: Connection) -> None:
        """One connection: its request (of a kind its socket accepts), then one answer."""
        conn.send(self.answer(conn.read_request().message), final=True)

    def answer(self, message: Message) -> Message:
        handlers = self._handlers
        if isinstance(message, Status):
            return self._status()
        if isinstance(message, MemoryBlock):
            return handlers.memory_block(message)
        if isinstance(message, SessionUpdated):
            return handlers.session_updated(message)
        if isinstance(message, MemoryCall):
            return handlers.memory_call(message)
        if isinstance(message, Reindex):
            return handlers.reindex()
        assert isinstance(message, MemoryLog)  # the rules accept nothing else
        return handlers.memory_log(message)
