"""brokerd's startup, its threads, and its clean stop.

I/O: everything brokerd touches, wired together here. The order at startup:

    1. the audit lock and the audit startup check (which may recover a torn tail
       or, with --accept-break, accept a chain failure);
    2. the socket directories (made if missing, modes set either way), stale
       socket files removed, bind, socket modes;
    3. one accept thread per socket (one thread per connection) and the expiry
       thread.

SIGTERM or SIGINT stops accepting, lets the ledger step in progress finish, and
removes the socket files. The lock is released when the process exits.
"""

from __future__ import annotations

import logging
import signal
import threading
from datetime import UTC, datetime
from types import FrameType

from boxmaker.brokerd.admin import AdminHandler, expire_loop
from boxmaker.brokerd.approvals import PendingTable
from boxmaker.brokerd.audit_startup import Refused, start_audit
from boxmaker.brokerd.broker import BrokerHandler
from boxmaker.brokerd.config import BrokerdConfig
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.listener import StartupError, bind_socket, serve_forever
from boxmaker.brokerd.runner import RefusingRuntime, Runtime
from boxmaker.brokerd.session_state import SessionStore
from boxmaker.core.timestamps import format_timestamp

log = logging.getLogger(__name__)


def now() -> str:
    return format_timestamp(datetime.now(UTC))


def make_runtime(config: BrokerdConfig) -> Runtime:
    if config.runner.backend == "refusing":
        return RefusingRuntime()
    raise StartupError(
        f'runner backend "{config.runner.backend}" is not part of this build; '
        'set [runner] backend = "refusing"'
    )


def serve(config: BrokerdConfig, *, accept_break: bool = False) -> int:
    """Run brokerd until SIGTERM; the exit status."""
    runtime = make_runtime(config)
    audit_dir = config.home / "audit"
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

    ledger = Ledger(started.writer, SessionStore(config.home))
    grants = GrantsDir(config.grants_dir)
    table = PendingTable()
    stopping = threading.Event()
    sockets = [
        (bind_socket(config.broker_socket), "broker.sock"),
        (bind_socket(config.admin_socket), "admin.sock"),
    ]
    broker = BrokerHandler(ledger, grants, runtime, table, now, config.approvals.ttl_ms)
    admin = AdminHandler(ledger, grants, table, now)
    serve_forever(sockets[0][0], sockets[0][1], broker, stopping)
    serve_forever(sockets[1][0], sockets[1][1], admin, stopping)
    threading.Thread(
        target=expire_loop, args=(table, ledger, grants, now, stopping), daemon=True
    ).start()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    grants.load()  # report an invalid grant set at startup, not only at the first call
    log.info(
        "event=serving broker=%s admin=%s grants=%s runner=%s",
        config.broker_socket,
        config.admin_socket,
        config.grants_dir,
        config.runner.backend,
    )
    stopping.wait()
    log.info("event=stopping")
    for sock, _ in sockets:
        sock.close()
    ledger.close()
    for path in (config.broker_socket, config.admin_socket):
        path.unlink(missing_ok=True)
    started.writer.close()
    log.info("event=stopped")
    return 0
