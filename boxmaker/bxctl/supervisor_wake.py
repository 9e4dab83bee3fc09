"""supervisord's first turn without its one-second wait, as an rpcinterface factory.

I/O: opens /dev/null once, inside supervisord.

supervisord's main loop waits in `poll` (one second at most) before it looks at
its programs, and at its start nothing ends that first wait: every program of the
tree started a second after supervisord (docs/performance.md, "Tree start").
boxmaker's supervisord.conf names `make_wake` as an rpcinterface factory, the one
documented way to run code inside supervisord; supervisord calls it as it opens
its control socket, before its loop. It puts a dispatcher in supervisord's socket
map for a descriptor that is always ready for writing (/dev/null): the first
`poll` returns at once, the loop goes on to start the programs, and the
dispatcher, on its one write event, leaves the map and closes its descriptor.
Its RPC namespace has no method. If supervisord's internals are not what this
expects, it does nothing: the programs then start after the one-second wait, as
without it.
"""

from __future__ import annotations

import os
from typing import Any


class Wake:
    """An asyncore-style dispatcher, writable once, that supervisord's poll sees at once."""

    def __init__(self, fd: int, socket_map: dict[int, Any]) -> None:
        self.fd = fd
        self._map = socket_map
        self.done = False

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return not self.done

    def handle_write_event(self) -> None:
        self._end()

    def handle_read_event(self) -> None:
        self._end()

    def handle_error(self) -> None:
        self._end()

    def _end(self) -> None:
        # supervisord unregisters the descriptor from its poller right after this
        # event, by number: closing it first is safe (poll forgets a number alone)
        if self.done:
            return
        self.done = True
        self._map.pop(self.fd, None)
        os.close(self.fd)


class NoMethods:
    """The RPC namespace supervisord wants from a factory: this one offers nothing."""


def make_wake(supervisord: Any, **config: str) -> NoMethods:
    """supervisord's rpcinterface factory: wake its first poll (see the module docstring)."""
    try:
        socket_map = supervisord.options.get_socket_map()
    except AttributeError:
        return NoMethods()
    if not isinstance(socket_map, dict):
        return NoMethods()
    fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    socket_map[fd] = Wake(fd, socket_map)
    return NoMethods()
