"""brokerd's startup, its threads, and its clean stop.

I/O: everything brokerd touches, wired together here. The order at startup:

    0. the secrets of `[secrets.<name>]`, read before anything else, so that one
       that cannot be read stops brokerd at once (exit 1, one line naming it);
    1. the soft descriptor limit raised to the hard one (at most 65,536) and the
       connection caps sized to it (`descriptors`);
    2. the audit lock and the audit startup check (which may recover a torn tail
       or, with --accept-break, accept a chain failure, and refuses a log below
       its checkpoint);
    3. the stop signals blocked, then broker.sock and admin.sock bound and served
       (`boxmaker.ipc.shell`: each socket's directory made if missing, its modes
       set either way, a stale socket file removed; one thread per connection,
       up to each socket's cap, `boxmaker.ipc.serving`);
    4. the expiry thread; with `[gateway] socket` not "none", the gateway link,
       which starts a thread for each ask (`gateway_link`); with `[audit]
       checkpoint_every_s` not 0, the checkpoint thread (`audit_checkpoint`).

SIGTERM or SIGINT stops accepting, ends the gateway link's threads (waiting at
most GATEWAY_JOIN_S), lets the ledger step in progress finish, removes the
socket files and wipes the secrets. The lock is released when the process exits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

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
from boxmaker.core.home.layout import Home
from boxmaker.core.home.links import LOOP_BROKER, OWNER_BROKER, Link, Role
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.broker_admin import CheckpointReply
from boxmaker.core.wire.common import Error, StatusReport
from boxmaker.core.wire.envelope import Message
from boxmaker.ipc.connection import Handlers
from boxmaker.ipc.role import EXIT_OK
from boxmaker.ipc.secrets import load_secrets
from boxmaker.ipc.shell import Endpoint, RoleSockets, now, serve_daemon
from boxmaker.sandbox.runner import Runtime

log = logging.getLogger(__name__)

GATEWAY_JOIN_S = 2.0


class Brokerd:
    """brokerd's sockets and threads around a started audit writer: what `serve` runs
    (`ipc.shell.serve_daemon`), and what tests start in their own process
    (`boxmaker.testing.daemons`), with their own writer, runtime, clock and grants.
    """

    def __init__(
        self,
        config: BrokerdConfig,
        writer: AuditSink,
        runtime: Runtime,
        clock: Callable[[], str] = now,
        caps: ConnectionCaps = DEFAULT_CAPS,
        grants: Callable[[Path, list[tuple[str, str]]], GrantsDir] = GrantsDir,
    ) -> None:
        """`grants` makes the grants directory from `[paths] grants` and brokerd's own
        places, which no grant may cover (tests: one with a hook)."""
        self.config = config
        self.caps = caps
        self.writer = writer
        self.states = SessionStore(config.home)
        self.ledger = Ledger(writer, self.states, clock)
        self.grants = grants(config.grants_dir, own_places(config.home, config.sockets_used()))
        self.table = PendingTable()
        endpoints = (
            Endpoint(LOOP_BROKER, config.broker_socket, caps.broker),
            Endpoint(OWNER_BROKER, config.admin_socket, caps.admin),
        )
        self.sockets = RoleSockets(Role.BROKERD, endpoints, config.sockets.group_access, clock)
        self.stopping = self.sockets.stopping
        self.gateway: GatewayLink | None = None
        self._clock = clock
        self._runtime = runtime
        self.checkpointer = Checkpointer(Home(config.home).audit, writer.durable_head, clock)

    def start(self) -> None:
        self.gateway = self._gateway_link()
        self.sockets.start(self.handlers())
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

    def handlers(self) -> dict[Link, Handlers]:
        """What each of brokerd's sockets serves: a handler for each kind its link accepts."""
        broker = BrokerHandler(
            self.ledger,
            self.grants,
            self._runtime,
            self.table,
            self._clock,
            self.config.approvals.ttl_ms,
            self._memory_link(),
            self.gateway,
        )
        admin = AdminHandler(
            self.ledger, self.grants, self.table, self.status, self.checkpoint, self.states
        )
        return {LOOP_BROKER: {ToolRequest: broker}, OWNER_BROKER: admin.handlers()}

    def _memory_link(self) -> MemoryLink | None:
        path = self.config.memory_socket
        return None if path is None else MemoryLink(path, self.config.memory.timeout_ms)

    def _gateway_link(self) -> GatewayLink | None:
        path = self.config.gateway_socket
        if path is None:
            return None
        return GatewayLink(
            path,
            self.config.gateway.timeout_ms,
            self.table,
            self.ledger,
            self.grants,
            self._clock,
            self.stopping,
        )

    def status(self) -> StatusReport:
        """What `status` on admin.sock answers: the audit head and what waits."""
        position = self.writer.position
        audit = f"audit: next seq {position.next_seq}, head {position.prev}"
        pending = len(self.table.items())
        runner = self.config.runner.backend
        return self.sockets.status(f"{audit}; {pending} approvals pending; runner {runner}")

    def checkpoint(self) -> Message:
        """What `checkpoint` on admin.sock answers: a checkpoint taken now, or why not."""
        try:
            taken = self.checkpointer.take()
        except CheckpointUnavailableError as exc:
            return Error(code=ErrorCode.UNAVAILABLE, message=f"no checkpoint: {exc}")
        assert taken.time is not None
        return CheckpointReply(seq=taken.seq, head=taken.head, time=taken.time)

    def stop(self) -> int:
        """Stop accepting, end the gateway link's threads (at most GATEWAY_JOIN_S), let
        the ledger step in progress finish, remove the sockets, close the writer."""
        self.sockets.stop(self._finish)
        self.writer.close()
        return EXIT_OK

    def _finish(self) -> None:
        if self.gateway is not None:
            self.gateway.join(GATEWAY_JOIN_S)
        self.ledger.close()


def serve(config: BrokerdConfig, *, accept_break: bool = False) -> int:
    """Run brokerd until SIGTERM; the exit status."""
    # brokerd uses no secret yet: any configured are read so that a bad one stops
    # it now, before anything else, and are held until serve returns, wiped then
    secrets = load_secrets(config.secrets)
    try:
        return _serve(config, accept_break)
    finally:
        secrets.wipe()


def _serve(config: BrokerdConfig, accept_break: bool) -> int:
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
    daemon = Brokerd(config, started.writer, runtime, caps=caps)
    serving = (
        f"broker={config.broker_socket} admin={config.admin_socket}"
        f" grants={config.grants_dir} runner={config.runner.backend}"
    )
    return serve_daemon(daemon, serving)
