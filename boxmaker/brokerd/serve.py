"""brokerd's startup, its threads, and its clean stop.

I/O: everything brokerd touches, wired together here. The order at startup:

    0. the secrets of `[secrets.<name>]`, read before anything else, so that one
       that cannot be read stops brokerd at once (exit 1, one line naming it);
    1. the soft descriptor limit raised to the hard one (at most 65,536) and the
       connection caps sized to it (`descriptors`);
    2. the audit lock and the audit startup check (which may recover a torn tail
       or, with --accept-break, accept a chain failure, and refuses a log below
       its checkpoint);
    3. the socket directories (made if missing, modes set either way), stale
       socket files removed, bind, socket modes;
    4. the threads of each socket (one thread per connection, up to each
       socket's cap; see `boxmaker.ipc.server`) and the expiry thread; with
       `[gateway] socket` not "none", the gateway link, which starts a thread
       for each ask (`gateway_link`); with `[audit] checkpoint_every_s` not 0,
       the checkpoint thread (`audit_checkpoint`).

SIGTERM or SIGINT stops accepting, ends the gateway link's threads (waiting at
most GATEWAY_JOIN_S), lets the ledger step in progress finish, and removes the
socket files. The lock is released when the process exits.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from boxmaker import __version__
from boxmaker.brokerd.admin import AdminHandler, expire_loop
from boxmaker.brokerd.approvals import PendingTable
from boxmaker.brokerd.audit_checkpoint import (
    Checkpointer,
    CheckpointUnavailableError,
    checkpoint_loop,
)
from boxmaker.brokerd.audit_startup import Refused, start_audit
from boxmaker.brokerd.broker import BrokerHandler
from boxmaker.brokerd.config import BrokerdConfig
from boxmaker.brokerd.descriptors import (
    DEFAULT_CAPS,
    ConnectionCaps,
    connection_caps,
    raise_descriptor_limit,
)
from boxmaker.brokerd.gateway_link import GatewayLink
from boxmaker.brokerd.grants_dir import GrantsDir, own_places
from boxmaker.brokerd.ledger import AuditSink, Ledger
from boxmaker.brokerd.memory_link import MemoryLink
from boxmaker.brokerd.runtimes import make_runtime
from boxmaker.brokerd.session_state import SessionStore
from boxmaker.core.errors import ErrorCode, StartupError
from boxmaker.core.layout import Home, link_modes
from boxmaker.core.messages import CheckpointReply, Error, Message, StatusReport
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.role import block_stop_signals, wait_for_stop
from boxmaker.ipc.secrets import load_secrets
from boxmaker.ipc.server import SocketRules, bind_socket, serve_forever
from boxmaker.sandbox.runner import Runtime

log = logging.getLogger(__name__)

BUSY_POINTER = Runbook.BROKER_BUSY.pointer
BROKER_ACCEPTS = ("tool_request",)
ADMIN_ACCEPTS = (
    "approvals",
    "check_grants",
    "status",
    "approve",
    "refuse",
    "checkpoint",
    "session_states",
)
GATEWAY_JOIN_S = 2.0


def now() -> str:
    return format_timestamp(datetime.now(UTC))


class Brokerd:
    """brokerd's sockets and threads around a started audit writer; `serve` drives it.

    Tests build one directly with their own writer, runtime and clock: the same
    handlers and sockets as the daemon, in one process.
    """

    def __init__(
        self,
        config: BrokerdConfig,
        writer: AuditSink,
        runtime: Runtime,
        clock: Callable[[], str] = now,
        caps: ConnectionCaps = DEFAULT_CAPS,
    ) -> None:
        self.config = config
        self.caps = caps
        self.writer = writer
        self.states = SessionStore(config.home)
        self.ledger = Ledger(writer, self.states, clock)
        sockets = [config.broker_socket, config.admin_socket]
        if config.memory_socket is not None:
            sockets.append(config.memory_socket)
        if config.gateway_socket is not None:
            sockets.append(config.gateway_socket)
        self.grants = GrantsDir(config.grants_dir, own_places(config.home, sockets))
        self.table = PendingTable()
        self.stopping = threading.Event()
        self.gateway: GatewayLink | None = None
        self._clock = clock
        self._runtime = runtime
        self._sockets: list[socket.socket] = []
        self._started = clock()
        self.checkpointer = Checkpointer(Home(config.home).audit, writer.durable_head, clock)

    def start(self) -> None:
        modes = link_modes(self.config.sockets.group_access)
        broker_sock = bind_socket(self.config.broker_socket, modes)
        self._sockets.append(broker_sock)
        admin_sock = bind_socket(self.config.admin_socket, modes)
        self._sockets.append(admin_sock)
        broker = BrokerHandler(
            self.ledger,
            self.grants,
            self._runtime,
            self.table,
            self._clock,
            self.config.approvals.ttl_ms,
            self._memory_link(),
            self._gateway_link(),
        )
        admin = AdminHandler(
            self.ledger, self.grants, self.table, self.status, self.checkpoint, self.states
        )
        broker_rules = SocketRules(
            "broker.sock", "brokerd", BROKER_ACCEPTS, self.caps.broker, BUSY_POINTER
        )
        admin_rules = SocketRules(
            "admin.sock", "brokerd", ADMIN_ACCEPTS, self.caps.admin, BUSY_POINTER
        )
        serve_forever(broker_sock, broker_rules, broker, self.stopping)
        serve_forever(admin_sock, admin_rules, admin, self.stopping)
        threading.Thread(
            target=expire_loop,
            args=(self.table, self.ledger, self.grants, self._clock, self.stopping),
            name="expiry",
            daemon=True,
        ).start()
        every_s = self.config.audit.checkpoint_every_s
        if every_s > 0:
            threading.Thread(
                target=checkpoint_loop,
                args=(self.checkpointer, every_s, self.stopping),
                name="checkpoint",
                daemon=True,
            ).start()
        self.grants.load()  # report an invalid grant set now, not only at the first call

    def _memory_link(self) -> MemoryLink | None:
        path = self.config.memory_socket
        return None if path is None else MemoryLink(path, self.config.memory.timeout_ms)

    def _gateway_link(self) -> GatewayLink | None:
        path = self.config.gateway_socket
        if path is not None:
            self.gateway = GatewayLink(
                path,
                self.config.gateway.timeout_ms,
                self.table,
                self.ledger,
                self.grants,
                self._clock,
                self.stopping,
            )
        return self.gateway

    def status(self) -> StatusReport:
        """What `status` on admin.sock answers: the audit head and what waits."""
        position = self.writer.position
        audit = f"audit: next seq {position.next_seq}, head {position.prev}"
        pending = len(self.table.items())
        return StatusReport(
            role="brokerd",
            version=__version__,
            started=self._started,
            detail=f"{audit}; {pending} approvals pending; runner {self.config.runner.backend}",
        )

    def checkpoint(self) -> Message:
        """What `checkpoint` on admin.sock answers: a checkpoint taken now, or why not."""
        try:
            taken = self.checkpointer.take()
        except CheckpointUnavailableError as exc:
            return Error(code=ErrorCode.UNAVAILABLE, message=f"no checkpoint: {exc}")
        assert taken.time is not None
        return CheckpointReply(seq=taken.seq, head=taken.head, time=taken.time)

    def stop(self) -> None:
        """Stop accepting, let the ledger step in progress finish, remove the sockets."""
        self.stopping.set()
        for sock in self._sockets:
            sock.close()
        if self.gateway is not None:
            self.gateway.join(GATEWAY_JOIN_S)
        self.ledger.close()
        for path in (self.config.broker_socket, self.config.admin_socket):
            path.unlink(missing_ok=True)
        self.writer.close()


def serve(config: BrokerdConfig, *, accept_break: bool = False) -> int:
    """Run brokerd until SIGTERM; the exit status."""
    # brokerd uses no secret yet: any configured are read so that a bad one stops
    # it now, before anything else, and are held until serve returns, wiped then
    secrets = load_secrets(config.secrets)
    limit = raise_descriptor_limit()
    caps = connection_caps(limit)
    log.info(
        "event=descriptors limit=%d broker_cap=%d admin_cap=%d", limit, caps.broker, caps.admin
    )
    runtime = make_runtime(config)
    audit_dir = Home(config.home).audit
    try:
        audit_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create {audit_dir}: {exc}") from exc
    started = start_audit(audit_dir, now(), accept_break=accept_break)
    if isinstance(started, Refused):
        for line in started.lines:
            log.error("%s", line)
        return started.status
    for line in started.lines:
        log.warning("%s", line)

    block_stop_signals()  # before any thread starts: see boxmaker.ipc.role
    daemon = Brokerd(config, started.writer, runtime, caps=caps)
    daemon.start()
    log.info(
        "event=serving broker=%s admin=%s grants=%s runner=%s",
        config.broker_socket,
        config.admin_socket,
        config.grants_dir,
        config.runner.backend,
    )
    log.info("event=signal %s", wait_for_stop())
    log.info("event=stopping")
    daemon.stop()
    secrets.wipe()
    log.info("event=stopped")
    return 0
