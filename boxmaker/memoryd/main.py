"""memoryd's console script: `memoryd serve --config PATH`.

`serve` opens the memory store on `<home>/memory/`, rebuilds the recall index
from its files (a damaged file stops it: it never serves over a file it cannot
read), binds its three sockets (`boxmaker.memoryd.serve`) and serves them in the
foreground until SIGTERM or SIGINT. Exit statuses (`boxmaker.ipc.role`): 0 after
a clean stop, 1 when it cannot start (the log says why), 2 for a configuration
error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from boxmaker import __version__
from boxmaker.core.errors import StartupError
from boxmaker.core.layout import link_modes
from boxmaker.core.messages import StatusReport
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.role import block_stop_signals, run_role, wait_for_stop
from boxmaker.ipc.server import bind_socket
from boxmaker.memoryd.config import MemorydConfig, load_config
from boxmaker.memoryd.files import MemoryFileDamagedError
from boxmaker.memoryd.handlers import MemoryHandlers
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.serve import Listeners, MemoryServer
from boxmaker.memoryd.store import MemoryStore

log = logging.getLogger("memoryd")


def _now() -> datetime:
    return datetime.now(UTC)


def open_memory(config: MemorydConfig) -> MemoryHandlers:
    """The store and its rebuilt recall index; StartupError if a file is damaged."""
    store = MemoryStore(config.memory_directory, _now)
    recall = RecallIndex(config.memory_directory)
    try:
        entries = recall.rebuild()
    except MemoryFileDamagedError as exc:
        raise StartupError(f"cannot build the recall index: {exc}") from exc
    log.info("event=indexed entries=%d directory=%s", entries, config.memory_directory)
    return MemoryHandlers(store, recall)


def serve(config: MemorydConfig) -> int:
    """Serve the three sockets until SIGTERM or SIGINT."""
    block_stop_signals()  # before any thread starts: see boxmaker.ipc.role
    handlers = open_memory(config)
    modes = link_modes(config.sockets.group_access)
    paths = (config.loop_socket, config.broker_socket, config.owner_socket)
    bound = []
    try:
        for path in paths:
            bound.append(bind_socket(path, modes, backlog=16))
    except StartupError:
        for sock in bound:
            sock.close()
        raise
    listeners = Listeners(*bound)
    started = format_timestamp(_now())

    def status() -> StatusReport:
        detail = f"{len(handlers.recall)} entries indexed"
        return StatusReport(role="memoryd", version=__version__, started=started, detail=detail)

    server = MemoryServer(handlers, listeners, status)
    server.start()
    log.info("event=serving loop=%s broker=%s owner=%s", *paths)
    log.info("event=stopping signal=%s", wait_for_stop())
    server.stopping.set()
    listeners.close()
    for path in paths:
        path.unlink(missing_ok=True)
    log.info("event=stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memoryd", description="boxmaker's long-term memory")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("serve", help="serve memoryd's three sockets in the foreground")
    run.add_argument("--config", type=Path, help="memoryd.toml (default: every default)")
    args = parser.parse_args(argv)
    return run_role("memoryd", lambda: load_config(args.config, os.environ), serve)


if __name__ == "__main__":
    sys.exit(main())
