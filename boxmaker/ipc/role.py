"""Running a role's process: its command line, its logging, its configuration, its stop
signals, its exit status.

I/O: the command line, standard error (the log, one line per event, as
supervisord collects it) and the process's signal mask. A role's `main` is a
`CommandLine` (`<role> COMMAND --config PATH`, each command's own options) whose
`run` parses it and calls `run_role`:

    0  a clean stop
    1  it cannot start: a `StartupError` (or an OSError nobody caught), logged as
       its one line, with its runbook pointer, and no traceback
    2  a configuration error (`ConfigError`), logged as its one line

Stop signals (SIGTERM, SIGINT) are taken synchronously: `block_stop_signals`
before any thread starts (threads inherit the mask), then `wait_for_stop` in the
main thread (`boxmaker.ipc.shell.serve_daemon` does both). A Python-level
handler waiting on an Event is not reliably woken, and a role must always stop
on SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
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


class CommandLine:
    """A role's console script: `<role> COMMAND --config PATH`, and each command's options."""

    def __init__(self, role: str, description: str) -> None:
        self.role = role
        self.parser = argparse.ArgumentParser(prog=role, description=description)
        self._commands = self.parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND"
        )

    def command(
        self, name: str, help: str, *, config_required: bool = False
    ) -> argparse.ArgumentParser:
        """Add command `name` with its `--config PATH` (the role's TOML file, every default
        when not given unless `config_required`); its parser, for options of its own."""
        parser = self._commands.add_parser(name, help=help)
        config = (
            f"{self.role}.toml" if config_required else f"{self.role}.toml (default: every default)"
        )
        parser.add_argument("--config", type=Path, required=config_required, help=config)
        return parser

    def run(
        self,
        argv: Sequence[str] | None,
        load: Callable[[Path | None, Mapping[str, str]], C],
        body: Callable[[argparse.Namespace, C], int],
    ) -> int:
        """Parse `argv` (None: the process's), then `run_role`: the configuration at
        `--config`, loaded with the environment, and `body` with the arguments and it."""
        args = self.parser.parse_args(argv)
        return run_role(self.role, lambda: load(args.config, os.environ), partial(body, args))


def block_stop_signals() -> None:
    """Hold SIGTERM and SIGINT for `wait_for_stop`; call before starting any thread."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def wait_for_stop() -> str:
    """Wait for SIGTERM or SIGINT; its name."""
    return signal.Signals(signal.sigwait(STOP_SIGNALS)).name
