"""bxctl's entry point: builds the parser from each command module and runs one command.

Each command module has `add_parser(subparsers)`, which registers its commands
with a `handler(args) -> int`. This is the one place that maps errors to exit
statuses: `CliError` prints its line, anything else is a bug and says so.

A closed pipe (the reader of standard output or error went away) ends any command
quietly with `EXIT_CLOSED_PIPE`. Both streams are flushed here, inside the handling,
so that a closed pipe shows up where it is handled rather than at the interpreter's
final flush; then, as Python's documentation recommends for SIGPIPE, a stream that
still cannot be flushed has its descriptor pointed at /dev/null (`os.dup2`), so that
final flush cannot fail again (it would print "Exception ignored" and exit 120).
argparse's own printing (`--help`, `--version`) would hide a failed write; `Parser`
lets it through to here, so every command line ends a closed pipe the same way.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from boxmaker import __version__
from boxmaker.bxctl.cli import EXIT_CLOSED_PIPE, EXIT_INTERRUPTED, CliError, Parser, err

# Each command module, by the commands it registers. Only the module a command
# line names is imported (some import pydantic and the wire models, which a
# quick `bxctl audit verify` does not need); help and mistakes import them all.
COMMAND_MODULES = {
    "grants": "grants_cmd",
    "approvals": "approvals_cmd",
    "approve": "approvals_cmd",
    "refuse": "approvals_cmd",
    "chat": "chat_cmd",
    "sessions": "sessions_cmd",
    "audit": "audit_cmd",
    "status": "status_cmd",
    "install": "install_cmd",
    "sanitize": "sanitize_cmd",
    "memory": "memory_cmd",
    "model": "model_cmd",
}


def _modules(argv: Sequence[str]) -> list[ModuleType]:
    names = dict.fromkeys(COMMAND_MODULES.values())  # in order, once each
    first = next((a for a in argv if not a.startswith("-")), None)
    if first in COMMAND_MODULES:
        names = {COMMAND_MODULES[first]: None}
    return [importlib.import_module(f"boxmaker.bxctl.{name}") for name in names]


def build_parser(argv: Sequence[str] = ()) -> Parser:
    """The parser; with `argv`, only for the command it names (when it names one)."""
    parser = Parser(prog="bxctl", description="The owner's command line for boxmaker.")
    parser.add_argument("--version", action="version", version=f"bxctl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for module in _modules(argv):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _run(argv)
        finally:  # also after --help's SystemExit
            sys.stdout.flush()
            sys.stderr.flush()
    except BrokenPipeError:
        _quiet_closed_pipe()
        return EXIT_CLOSED_PIPE


def _run(argv: Sequence[str] | None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
        handler: Callable[..., int] = args.handler
        return handler(args)
    except CliError as exc:
        err(f"bxctl: {exc.message}")
        return exc.status
    except KeyboardInterrupt:
        err("bxctl: interrupted")
        return EXIT_INTERRUPTED


def _quiet_closed_pipe() -> None:
    """Point each stream that still cannot be flushed at /dev/null; print nothing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            try:
                fd = stream.fileno()
            except (OSError, ValueError):  # not a real file: nothing flushes it at exit
                continue
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
