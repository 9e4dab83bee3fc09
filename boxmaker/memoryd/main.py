"""memoryd's console script: `memoryd serve --config PATH`.

`serve` opens the memory store on `<home>/memory/`, rebuilds the recall index
from its files (a damaged file stops it: it never serves over a file it cannot
read), then binds its three sockets and serves them in the foreground until
SIGTERM or SIGINT (`boxmaker.memoryd.serve.Memoryd`, run by `boxmaker.ipc.shell`).
Exit statuses (`boxmaker.ipc.role`): 0 after a clean stop, 1 when it cannot
start (the log says why), 2 for a configuration error.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from boxmaker.core.errors import StartupError
from boxmaker.ipc.role import CommandLine
from boxmaker.ipc.shell import serve_daemon
from boxmaker.memoryd.config import MemorydConfig, load_config
from boxmaker.memoryd.files import MemoryFileDamagedError
from boxmaker.memoryd.handlers import MemoryHandlers
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.serve import Memoryd
from boxmaker.memoryd.store import MemoryStore

log = logging.getLogger("memoryd")


def _now() -> datetime:
    return datetime.now(UTC)


def open_memory(config: MemorydConfig, clock: Callable[[], datetime] = _now) -> MemoryHandlers:
    """The store and its rebuilt recall index; StartupError if a file is damaged."""
    store = MemoryStore(config.memory_directory, clock)
    recall = RecallIndex(config.memory_directory)
    try:
        entries = recall.rebuild()
    except MemoryFileDamagedError as exc:
        raise StartupError(f"cannot build the recall index: {exc}") from exc
    log.info("event=indexed entries=%d directory=%s", entries, config.memory_directory)
    return MemoryHandlers(store, recall)


def serve(_: argparse.Namespace, config: MemorydConfig) -> int:
    """Serve the three sockets until SIGTERM or SIGINT."""
    daemon = Memoryd(config, open_memory(config))
    return serve_daemon(daemon, daemon.serving())


def main(argv: Sequence[str] | None = None) -> int:
    line = CommandLine("memoryd", "boxmaker's long-term memory")
    line.command("serve", "serve memoryd's three sockets in the foreground")
    return line.run(argv, load_config, serve)


if __name__ == "__main__":
    sys.exit(main())
