"""`bxctl grants check` and `bxctl grants explain`: reads a grants directory.

`check --dir` loads a directory with the same rules as brokerd and prints every
problem. `explain` answers what brokerd would decide for one call, through the
same `boxmaker.core.policy.decide`: there is no second implementation to drift.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

import boxmaker
from boxmaker.bxctl import suggest_cmd
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser, err, out
from boxmaker.bxctl.client import default_admin_socket, home_dir, request
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.loading import load_grant_dir
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.grants.reserved import install_places, reserved_places
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import UNTRUSTED, Ask, Decision, Denial, SessionState, decide
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp, parse_timestamp
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.broker_admin import CheckGrants, GrantsReport


def add_parser(commands: Any) -> None:
    grants: Parser = commands.add_parser("grants", help="check grant files and explain decisions")
    sub = grants.add_subparsers(dest="grants_command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    check = sub.add_parser("check", help="load every grant file and report each problem")
    check.add_argument(
        "--dir", type=Path, help="check this directory yourself (default: ask the running brokerd)"
    )
    check.add_argument(
        "--admin-socket",
        type=Path,
        default=None,
        help="brokerd's admin socket (default: $BOXMAKER_HOME/run/owner-broker/admin.sock)",
    )
    check.set_defaults(handler=cmd_check)

    explain = sub.add_parser("explain", help="what brokerd would decide for one tool call")
    explain.add_argument("--dir", required=True, type=Path, help="the grants directory")
    explain.add_argument(
        "--tool", required=True, help="read_file, write_file, shell, http_fetch or a memory tool"
    )
    explain.add_argument("--arguments", required=True, help="the call's arguments as JSON text")
    explain.add_argument(
        "--taint",
        default=DataClass.PRIVATE.value,
        choices=[c.value for c in DataClass],
        help="the session's taint (default: private)",
    )
    explain.add_argument(
        "--untrusted", action="store_true", help="the session has read untrusted content"
    )
    explain.add_argument(
        "--now", help="decide at this time (default: now), e.g. 2026-11-30T12:00:00.000Z"
    )
    explain.add_argument("--json", action="store_true", help="print one JSON object")
    explain.set_defaults(handler=cmd_explain)

    suggest_cmd.add_parser(sub)  # grants suggest: bxctl/suggest_cmd.py


def read_grant_dir(directory: Path) -> GrantSet:
    """The grant set in `directory`, read the way brokerd reads it.

    What no grant may reach is judged with `BOXMAKER_HOME` (its audit log and
    sockets lie under it), this directory and the install bxctl runs from.
    """
    home = str(home_dir())
    places = reserved_places(
        [
            ("home", home),
            ("grants", str(directory)),
            *install_places(sys.prefix, boxmaker.__file__),
        ],
        os.path.realpath,
    )
    return load_grant_dir(
        lambda: os.listdir(directory),
        lambda name: (directory / name).read_bytes(),
        str(directory),
        places,
    )


def cmd_check(args: argparse.Namespace) -> int:
    if args.dir is not None:
        problems = read_grant_dir(args.dir).problems
    else:
        path = args.admin_socket or default_admin_socket()
        answer = request(path, CheckGrants(), f"bxctl-{os.getpid()}")[-1].message
        if not isinstance(answer, GrantsReport):
            raise CliError(f"brokerd answered {answer.kind} to check_grants")
        problems = answer.problems
    if not problems:
        out("grants: ok")
        return EXIT_OK
    for problem in problems:
        out(problem.render())
    err(Runbook.GRANTS_INVALID.pointer)
    return EXIT_PROBLEM


def cmd_explain(args: argparse.Namespace) -> int:
    if args.now is None:
        now = format_timestamp(datetime.now(UTC))
    else:
        try:
            parse_timestamp(args.now)
        except ValueError as exc:
            raise CliError(f"--now: {exc}", 2) from exc
        now = args.now
    grants = read_grant_dir(args.dir)
    request = ToolRequest(
        session="explain", call="explain", tool=args.tool, arguments=args.arguments
    )
    state = SessionState(taint=DataClass(args.taint), untrusted=args.untrusted)
    outcome = decide(request, grants, state, now)
    if args.json:
        out(orjson.dumps(explanation(outcome)).decode())
    else:
        for line in describe(outcome):
            out(line)
        for problem in grants.problems:
            out(problem.render())
        if grants.problems:
            err(Runbook.GRANTS_INVALID.pointer)
    return EXIT_OK


def explanation(outcome: Decision | Ask | Denial) -> dict[str, Any]:
    """The `--json` object: outcome as on the wire, grant, matched, result label."""
    if isinstance(outcome, Denial):
        return {
            "outcome": outcome.record().model_dump(mode="json", exclude_none=True),
            "grant": outcome.grant,
            "matched": None,
            "result_class": None,
            "untrusted": None,
        }
    return {
        "outcome": outcome.record().model_dump(mode="json", exclude_none=True),
        "grant": outcome.grant.id,
        "matched": outcome.matched,
        "result_class": outcome.result_class.value,
        "untrusted": outcome.untrusted,
    }


def describe(outcome: Decision | Ask | Denial) -> list[str]:
    """The human form of the same answer."""
    if isinstance(outcome, Denial):
        line = f"denied: {outcome.reason}"
        if outcome.grant is not None:
            line += f" by grant {outcome.grant}"
        if outcome.reason is DenyReason.UNTRUSTED_SESSION:
            line += " (the session is untrusted: when_untrusted = deny)"
        if outcome.detail is not None:
            line += f": {outcome.detail}"
        return [line]
    head = "allowed" if isinstance(outcome, Decision) else "ask the owner"
    trust = "untrusted" if outcome.untrusted else "trusted"
    lines = [f"{head}: grant {outcome.grant.id}"]
    if outcome.why == UNTRUSTED:
        lines[0] += f" (the session is untrusted: when_untrusted = {outcome.grant.untrusted_mode})"
    if outcome.matched is not None:
        lines.append(f"  matched {outcome.matched}")
    lines.append(f"  result labelled {outcome.result_class}, {trust}")
    return lines
