"""`bxctl approvals`, `bxctl approve ID`, `bxctl refuse ID`: the owner answers waiting calls.

Everything shown comes from brokerd over admin.sock, and the arguments are
printed as data (`boxmaker.core.display.escape`): nothing the model wrote can move the
cursor, change colours or reorder what is displayed. brokerd may send the list
in pages (approval_list frames with `final: false`, then a final one): their
items are joined in order.
"""

from __future__ import annotations

import argparse
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser, out
from boxmaker.bxctl.client import default_admin_socket, request
from boxmaker.bxctl.stats_cmd import add_stats_options
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.display.untrusted_origin import untrusted_since
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.policy import DIGEST_SHORT
from boxmaker.core.timestamps import format_timestamp, parse_timestamp
from boxmaker.core.wire.broker_admin import (
    ApprovalList,
    Approvals,
    Approve,
    ApproveResult,
    PendingApproval,
    Refuse,
)
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Message

SESSION_WIDTH = 16


def add_parser(commands: Any) -> None:
    listing: Parser = commands.add_parser("approvals", help="list the calls waiting for approval")
    _admin_socket_option(listing)
    add_stats_options(listing, cmd_approvals)  # --stats: bxctl/stats_cmd.py

    approve: Parser = commands.add_parser("approve", help="approve a waiting call")
    approve.add_argument("approval", type=_approval_id, help="the approval id")
    approve.add_argument(
        "--digest",
        type=_digest,
        help="approve only if the approval's digest starts with this (12 to 64 hex, as listed)",
    )
    _admin_socket_option(approve)
    approve.set_defaults(handler=cmd_approve)

    refuse: Parser = commands.add_parser("refuse", help="refuse a waiting call")
    refuse.add_argument("approval", type=_approval_id, help="the approval id")
    refuse.add_argument("--reason", help="why, recorded in the audit log")
    _admin_socket_option(refuse)
    refuse.set_defaults(handler=cmd_refuse)


def _admin_socket_option(parser: Parser) -> None:
    parser.add_argument(
        "--admin-socket",
        type=Path,
        default=None,
        help="brokerd's admin socket (default: $BOXMAKER_HOME/run/owner-broker/admin.sock)",
    )


def _approval_id(text: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) >= 2**64:
        raise argparse.ArgumentTypeError(f"{text!r} is not an approval id (a number)")
    return int(text)


def _digest(text: str) -> str:
    if re.fullmatch(r"[0-9a-f]{12,64}", text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a digest (12 to 64 lowercase hex characters, as listed)"
        )
    return text


def _ask(admin_socket: Path, message: Message) -> Message:
    return request(admin_socket, message, f"bxctl-{os.getpid()}")[-1].message


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


def pending_items(path: Path) -> tuple[PendingApproval, ...]:
    """Every call waiting on brokerd's admin socket `path`: the items of every page, in order."""
    answers = request(path, Approvals(), f"bxctl-{os.getpid()}")
    items: list[PendingApproval] = []
    for answer in answers:
        page = answer.message
        if not isinstance(page, ApprovalList):
            raise CliError(f"brokerd answered {page.kind} to approvals")
        items.extend(page.items)
    return tuple(items)


def cmd_approvals(args: argparse.Namespace) -> int:
    items = pending_items(args.admin_socket or default_admin_socket())
    if not items:
        out("no approvals pending")
    now = _now()
    for item in items:
        for line in block(item, now):
            out(line)
    return EXIT_OK


def block(item: PendingApproval, now: str) -> list[str]:
    """The lines that show one waiting call, as approvals and chat print them.

    Two lines, and a third when the session is untrusted, naming the call whose
    result made it so (and the flag rule its content matched, if that did). The
    digest is shown short (`bxctl approve N --digest D`).
    """
    session = item.session
    if len(session) > SESSION_WIDTH:
        session = session[:SESSION_WIDTH] + "…"
    head = (
        f"{item.approval}  {_ago(item.created, now)}  expires {_until(item.expires, now)}"
        f"  session {session}  grant {item.grant}  taint {item.taint}"
        f"  digest {item.digest[:DIGEST_SHORT]}"
    )
    lines = [head, f"    {escape_arguments(item.tool)} {escape_arguments(item.arguments)}"]
    if item.untrusted_by is not None:
        lines.append(f"    untrusted {untrusted_since(item.untrusted_by)}")
    return lines


def write_block(stream: TextIO, item: PendingApproval, now: str) -> None:
    for line in block(item, now):
        stream.write(line + "\n")


def _span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _ago(then: str, now: str) -> str:
    return _span((parse_timestamp(now) - parse_timestamp(then)).total_seconds()) + " ago"


def _until(then: str, now: str) -> str:
    left = (parse_timestamp(then) - parse_timestamp(now)).total_seconds()
    return "now" if left <= 0 else f"in {_span(left)}"


def _say(stream: TextIO | None, line: str) -> None:
    if stream is None:
        out(line)
    else:
        stream.write(line + "\n")


def _no_such(approval: int, stream: TextIO | None) -> int:
    _say(stream, f"{approval}: no such approval (already answered or expired)")
    return EXIT_PROBLEM


def approve(
    admin_socket: Path, approval: int, stream: TextIO | None = None, digest: str | None = None
) -> int:
    """Approve `approval` at brokerd's `admin_socket`; its line goes to `stream` (or stdout).

    With `digest`, brokerd approves only if the approval's digest starts with it;
    otherwise it answers `digest_mismatch`, which `client.request` makes one line
    on stderr and exit 1, and the approval stays pending.
    """
    answer = _ask(admin_socket, Approve(approval=approval, digest=digest))
    if isinstance(answer, Error):
        return _no_such(approval, stream)
    if not isinstance(answer, ApproveResult):
        raise CliError(f"brokerd answered {answer.kind} to approve")
    if isinstance(answer.outcome, DeniedRecord):
        line = f"approved {approval}: denied ({answer.outcome.reason})"
        if answer.outcome.reason is DenyReason.APPROVAL_STALE:
            line += ": its grant or the session's taint changed since it was asked"
        _say(stream, line)
        return EXIT_PROBLEM
    _say(stream, f"approved {approval}: runs")
    return EXIT_OK


def refuse(
    admin_socket: Path, approval: int, reason: str | None = None, stream: TextIO | None = None
) -> int:
    """Refuse `approval` at brokerd's `admin_socket`; its line goes to `stream` (or stdout)."""
    answer = _ask(admin_socket, Refuse(approval=approval, reason=reason))
    if isinstance(answer, Error):
        return _no_such(approval, stream)
    if not isinstance(answer, Ok):
        raise CliError(f"brokerd answered {answer.kind} to refuse")
    _say(stream, f"refused {approval}")
    return EXIT_OK


def cmd_approve(args: argparse.Namespace) -> int:
    return approve(args.admin_socket or default_admin_socket(), args.approval, digest=args.digest)


def cmd_refuse(args: argparse.Namespace) -> int:
    return refuse(args.admin_socket or default_admin_socket(), args.approval, args.reason)
