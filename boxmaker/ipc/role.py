"""Running a role's process: its logging, its configuration, its stop signals, its exit status.

I/O: standard error (the log, one line per event, as supervisord collects it)
and the process's signal mask. `run_role` is every role's `main` after argument
parsing:

    0  a clean stop
    1  it cannot start: a `StartupError` (or an OSError nobody caught), logged as
       its one line, with its runbook pointer, and no traceback
    2  a configuration error (`ConfigError`), logged as its one line

Stop signals (SIGTERM, SIGINT) are taken synchronously: `block_stop_signals`
before any thread starts (threads inherit the mask), then `wait_for_stop` in the
main thread. A Python-level handler waiting on an Event is not reliably woken,
and a role must always stop on SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

from boxmaker.core.errors import ConfigError, StartupError

C = TypeVar("C")

EXIT_OK = 0
EXIT_CANNOT_START = 1
EXIT_CONFIG = 2
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def run_role(role: str, load: Callable[[], C], body: Callable[[C], int]) -> int:
    """Configure logging for `role`, load its configuration, run `body`; the exit status."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"{role} %(levelname)s %(message)s"
    )
    log = logging.getLogger(role)
    try:
        config = load()
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG
    try:
        return body(config)
    except (StartupError, OSError) as exc:
        log.error("%s", exc)
        return EXIT_CANNOT_START


def block_stop_signals() -> None:
    """Hold SIGTERM and SIGINT for `wait_for_stop`; call before starting any thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def wait_for_stop() -> str:
    """Wait for SIGTERM or SIGINT; its name."""
    return signal.Signals(signal.sigwait(STOP_SIGNALS)).name
