"""bxctl's entry point: builds the parser from each command module and runs one command.

Each command module has `add_parser(subparsers)`, which registers its commands
with a `handler(args) -> int`. This is the one place that maps errors to exit
statuses: `CliError` prints its line, anything else is a bug and says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from boxmaker import __version__
from boxmaker.bxctl import (
    approvals_cmd,
    audit_cmd,
    chat_cmd,
    grants_cmd,
    install_cmd,
    status_cmd,
)
from boxmaker.bxctl.cli import CliError, Parser, err

COMMAND_MODULES = (
    grants_cmd,
    approvals_cmd,
    chat_cmd,
    audit_cmd,
    status_cmd,
    install_cmd,
)


def build_parser() -> Parser:
    parser = Parser(prog="bxctl", description="The owner's command line for boxmaker.")
    parser.add_argument("--version", action="version", version=f"bxctl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for module in COMMAND_MODULES:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
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
