"""bxctl's entry point: builds the parser from each command module and runs one command.

Each command module has `add_parser(subparsers)`, which registers its commands
with a `handler(args) -> int`. This is the one place that maps errors to exit
statuses: `CliError` prints its line, anything else is a bug and says so.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

from boxmaker import __version__
from boxmaker.bxctl.cli import CliError, Parser, err

# Each command module, by the commands it registers. Only the module a command
# line names is imported (some import pydantic and the wire models, which a
# quick `bxctl audit verify` does not need); help and mistakes import them all.
COMMAND_MODULES = {
    "grants": "grants_cmd",
    "approvals": "approvals_cmd",
    "approve": "approvals_cmd",
    "refuse": "approvals_cmd",
    "chat": "chat_cmd",
    "audit": "audit_cmd",
    "status": "status_cmd",
    "install": "install_cmd",
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
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser(argv).parse_args(argv)
        handler: Callable[..., int] = args.handler
        return handler(args)
    except CliError as exc:
        err(f"bxctl: {exc.message}")
        return exc.status
    except KeyboardInterrupt:
        err("bxctl: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
