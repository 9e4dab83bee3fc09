"""Every role's life around its sockets: bind, serve, `status`, the stop signal, stop.

I/O: a role's listening sockets (bound and served through `boxmaker.ipc.serving`,
closed, their files removed), the process's stop signals (`boxmaker.ipc.role`)
and standard error (one line a step). Each role's daemon (`brokerd.serve.Brokerd`,
`loopd.serve.Loopd`, `memoryd.serve.Memoryd`, `gatewayd.serve.Gatewayd`) keeps
its sockets in a `RoleSockets`, and its `serve` runs it with `serve_daemon`;
tests start and stop the same daemon in their own process
(`boxmaker.testing.daemons`), without the signals.

The rules, in order:

    1. What a role does before it serves (brokerd's secrets and audit check,
       loopd's probe and model load, memoryd's recall index, gatewayd's token)
       is done before `serve_daemon`, with the stop signals as they were.
    2. `serve_daemon` blocks the stop signals before the daemon starts any
       thread: threads inherit the mask, and the main thread takes the signal
       (`role.wait_for_stop`).
    3. `RoleSockets.start`: every endpoint's handlers are checked against its
       link first (`server.check_handlers`: a StartupError, and nothing bound);
       then each endpoint is bound at its link's modes (`server.bind_socket`).
       When one cannot be, those bound already are closed and their files
       removed, and the StartupError stands. Only then is each one served
       (`server.serve_forever`), with the peers its link's kept kinds are
       told by (`ipc.peers.peers_for`: dev mode's, or the owner's uid; before
       anything is bound, a StartupError for an owner that cannot be one). A
       root install that serves such a link and names no owner logs
       `event=no_owner` once, with the pointer.
    4. `status`, on the links that accept it, is answered by `status_handler`:
       the role, boxmaker's version, when its sockets were set up, and the
       role's detail.
    5. Once the daemon has started (its sockets served, its own threads
       running): `event=serving` with the role's fields. At SIGTERM or SIGINT:
       `event=stopping signal=<name>`, then the daemon's `stop`.
    6. `RoleSockets.stop`, once: the stop event is set, the listeners are
       closed (each accept loop ends within `serving.ACCEPT_POLL_S`), the role's
       own `join` runs (its threads, and what must end while its sockets still
       have their names), then the socket files are removed.
    7. The daemon's `stop` gives the exit status: 0, logged `event=stopped`; or
       the role's own (gatewayd whose chat failed: 1, the line its own).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from boxmaker import __version__
from boxmaker.core.errors import StartupError
from boxmaker.core.home.links import Link, Role
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.common import Status, StatusReport
from boxmaker.ipc.connection import Handler, Handlers, SocketRules, answering
from boxmaker.ipc.peers import peers_for
from boxmaker.ipc.role import EXIT_OK, block_stop_signals, wait_for_stop
from boxmaker.ipc.serving import Serving, bind_socket, check_handlers, serve_forever

log = logging.getLogger(__name__)


def now() -> str:
    """The wall clock, as a wire timestamp."""
    return format_timestamp(datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One socket a role serves: its link's row, where it is bound, how it is served."""

    link: Link
    path: Path
    cap: int  # connections served at once
    backlog: int = 64  # connections the kernel holds before one is accepted


class RoleSockets:
    """One role's listening sockets, from binding them to removing their files
    (rules 3, 4 and 6)."""

    def __init__(
        self,
        role: Role,
        endpoints: Sequence[Endpoint],
        group_access: bool,
        clock: Callable[[], str] = now,
        *,
        owner: str = "",
    ) -> None:
        """`owner`: a root install's owner's user, the one peer that may send the owner's
        kept kinds (`core.home.links` rule 5); "" names none."""
        self.role = role
        self.endpoints = tuple(endpoints)
        self.group_access = group_access  # a root install's modes (`core.home.links`), else dev's
        self.owner = owner
        self.stopping = threading.Event()
        self.started = clock()
        self._listening: list[socket.socket] = []
        self._serving: list[Serving] = []
        self._stopped = False

    def status(self, detail: str) -> StatusReport:
        """What `status` answers (rule 4)."""
        return StatusReport(
            role=str(self.role), version=__version__, started=self.started, detail=detail
        )

    def status_handler(self, detail: Callable[[], str]) -> Handler:
        """The handler of `status`: `status(detail())`, answered once."""

        def report(_: Status) -> StatusReport:
            return self.status(detail())

        return answering(report)

    def start(self, handlers: Mapping[Link, Handlers]) -> None:
        """Bind every endpoint and serve each with its link's `handlers` (rule 3);
        StartupError, with nothing left bound, if that cannot be."""
        served = {endpoint.link for endpoint in self.endpoints}
        if stray := [link.socket for link in handlers if link not in served]:
            raise StartupError(f"{self.role} serves no {', '.join(stray)}")
        for endpoint in self.endpoints:
            check_handlers(endpoint.link, handlers.get(endpoint.link, {}))
        peers = peers_for(self.group_access, self.owner)
        for link in (endpoint.link for endpoint in self.endpoints):
            if link.senders and not peers.knows_owner:
                log.warning(
                    "event=no_owner socket=%s kinds=%s refused to every peer: [sockets] owner_user"
                    " names no user; %s",
                    link.socket,
                    ",".join(kind for kind, _ in link.senders),
                    Runbook.SOCKET_OWNER_ONLY.pointer,
                )
        for endpoint in self.endpoints:
            modes = endpoint.link.modes(self.group_access)
            try:
                self._listening.append(bind_socket(endpoint.path, modes, endpoint.backlog))
            except StartupError:
                self._close()
                self._unlink()
                raise
        for endpoint, listening in zip(self.endpoints, self._listening, strict=True):
            rules = SocketRules(endpoint.link, endpoint.cap, peers=peers)
            self._serving.append(
                serve_forever(listening, rules, handlers[endpoint.link], self.stopping)
            )

    def stop(self, join: Callable[[], None] = lambda: None) -> None:
        """Stop accepting, close the listeners, run `join`, remove the socket files
        (rule 6); once: a second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        self.stopping.set()
        self._close()
        join()
        self._unlink()

    def _close(self) -> None:
        for listening in self._listening:
            listening.close()

    def _unlink(self) -> None:
        for endpoint in self.endpoints[: len(self._listening)]:
            endpoint.path.unlink(missing_ok=True)


class Daemon(Protocol):
    """A role's daemon, as `serve_daemon` runs it (and tests, in their own process)."""

    def start(self) -> None:
        """Serve its sockets and start its own threads; StartupError if it cannot."""

    def stop(self) -> int:
        """Stop serving, end its own threads, remove its sockets; the exit status."""


def serve_daemon(daemon: Daemon, serving: str) -> int:
    """Run `daemon` until SIGTERM or SIGINT (rules 2, 5 and 7); the exit status.
    `serving` is the role's fields of the `event=serving` line."""
    block_stop_signals()  # before any thread starts: see boxmaker.ipc.role
    daemon.start()
    log.info("event=serving %s", serving)
    log.info("event=stopping signal=%s", wait_for_stop())
    status = daemon.stop()
    if status == EXIT_OK:
        log.info("event=stopped")
    return status
