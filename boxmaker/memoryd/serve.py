"""memoryd's three sockets: one request per connection, answered from the memory files.

I/O: the listening sockets, bound and served by `boxmaker.ipc.shell` (each link's
modes, at most a cap of connections each, the request by its deadline). Each
socket accepts only its own link's kinds (`core.home.links`: LOOP_MEMORY for loopd,
BROKER_MEMORY for brokerd, OWNER_MEMORY for the owner), and answers any other
kind `forbidden`. What each kind is answered is `boxmaker.memoryd.handlers`'.
`Memoryd` is what `memoryd serve` runs, and what tests start in their own
process (`boxmaker.testing.daemons`).
"""

from __future__ import annotations

from collections.abc import Callable

from boxmaker.core.home.links import BROKER_MEMORY, LOOP_MEMORY, OWNER_MEMORY, Link, Role
from boxmaker.core.wire.common import Status
from boxmaker.core.wire.memory import (
    MemoryBlock,
    MemoryCall,
    MemoryLog,
    Reindex,
    Reindexed,
    SessionUpdated,
)
from boxmaker.ipc.connection import Handlers, answering
from boxmaker.ipc.role import EXIT_OK
from boxmaker.ipc.shell import Endpoint, RoleSockets, now
from boxmaker.memoryd.config import MemorydConfig
from boxmaker.memoryd.handlers import MemoryHandlers

BACKLOG = 16
LOOP_CAP = 16
BROKER_CAP = 16
OWNER_CAP = 4


class Memoryd:
    """memoryd's three sockets of `config`, served with `handlers`: `start`, `stop`."""

    def __init__(
        self, config: MemorydConfig, handlers: MemoryHandlers, clock: Callable[[], str] = now
    ) -> None:
        """`clock` says when it started, in `status`."""
        self._handlers = handlers
        endpoints = (
            Endpoint(LOOP_MEMORY, config.loop_socket, LOOP_CAP, BACKLOG),
            Endpoint(BROKER_MEMORY, config.broker_socket, BROKER_CAP, BACKLOG),
            Endpoint(OWNER_MEMORY, config.owner_socket, OWNER_CAP, BACKLOG),
        )
        self.sockets = RoleSockets(Role.MEMORYD, endpoints, config.sockets.group_access, clock)

    def serving(self) -> str:
        """The fields of its `event=serving` line."""
        loop, broker, owner = (endpoint.path for endpoint in self.sockets.endpoints)
        return f"loop={loop} broker={broker} owner={owner}"

    def start(self) -> None:
        self.sockets.start(self.handlers())

    def stop(self) -> int:
        self.sockets.stop()
        return EXIT_OK

    def handlers(self) -> dict[Link, Handlers]:
        """What each socket serves: a handler for each kind its link accepts, each
        answering once."""
        handlers = self._handlers
        status = self.sockets.status_handler(self._detail)
        return {
            LOOP_MEMORY: {
                MemoryBlock: answering(handlers.memory_block),
                SessionUpdated: answering(handlers.session_updated),
                Status: status,
            },
            BROKER_MEMORY: {MemoryCall: answering(handlers.memory_call), Status: status},
            OWNER_MEMORY: {
                Reindex: answering(self._reindex),
                MemoryLog: answering(handlers.memory_log),
                Status: status,
            },
        }

    def _detail(self) -> str:
        return f"{len(self._handlers.recall)} entries indexed"

    def _reindex(self, _: Reindex) -> Reindexed:
        return self._handlers.reindex()
