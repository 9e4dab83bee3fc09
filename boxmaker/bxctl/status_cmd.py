"""`bxctl status`: whether each role answers, and brokerd's audit head.

I/O: one `status` request on each role's socket (admin.sock for brokerd,
owner-memory/admin.sock for memoryd, loop.sock for loopd). Exit 0 when every
role answers, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser, out
from boxmaker.bxctl.client import (
    BROKERD,
    LOOPD,
    MEMORYD,
    default_admin_socket,
    default_loop_socket,
    default_memory_socket,
    stream,
)
from boxmaker.core.wire.common import Status, StatusReport


def add_parser(commands: Any) -> None:
    status: Parser = commands.add_parser(
        "status", help="does each role answer? (and the audit head)"
    )
    status.add_argument("--admin-socket", type=Path, help="brokerd's admin socket")
    status.add_argument("--memory-socket", type=Path, help="memoryd's owner socket")
    status.add_argument("--socket", type=Path, help="loopd's socket")
    status.set_defaults(handler=cmd_status)


def ask(path: Path, server: tuple[str, str]) -> StatusReport | str:
    """The role's report, or one line saying why it did not answer."""
    try:
        answers = list(stream(path, Status(), f"bxctl-{os.getpid()}", server=server, timeout_s=5.0))
    except CliError as exc:
        return exc.message
    final = answers[-1].message
    if isinstance(final, StatusReport):
        return final
    return f"{server[0]} answered {final.kind} to status"


def cmd_status(args: argparse.Namespace) -> int:
    roles = (
        (args.admin_socket or default_admin_socket(), BROKERD),
        (args.memory_socket or default_memory_socket(), MEMORYD),
        (args.socket or default_loop_socket(), LOOPD),
    )
    failed = False
    for path, server in roles:
        report = ask(path, server)
        if isinstance(report, StatusReport):
            since = f"{report.version}, up since {report.started}"
            out(f"{server[0]}: answers, {since}; {report.detail}")
        else:
            failed = True
            out(f"{server[0]}: {report}")
    return EXIT_PROBLEM if failed else EXIT_OK
