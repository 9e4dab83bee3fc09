"""`bxctl audit verify`: checks the whole audit log, reading its files itself.

I/O: reads `<home>/audit/YYYY-MM-DD.jsonl` in name order (no daemon is asked)
and prints the report. It writes nothing: a torn final line is reported, and the
next brokerd start recovers it. The lines it prints (README.md, "The audit log"):

    audit: ok, <n> records, head <hex>          (head none when there is no record)
    audit: recovered torn line at <file>:<line>
    audit: accepted break at <file>:<line>
    audit: approval pending or abandoned: decision <seq>
    audit: call running or unfinished: decision <seq>
    audit: clock went backwards at <file>:<line>
    audit: torn final line at <file>:<line> (<n> bytes), recovered at the next brokerd start

exit 0; or, on stdout, `<file>:<line>: <what>` and, on stderr,
`see runbook.md#audit-chain-broken`, exit 1.
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser, err, out
from boxmaker.core.audit_names import is_audit_file_name
from boxmaker.core.chain import ChainVerifier
from boxmaker.core.chain_report import ChainReport
from boxmaker.core.layout import Home, home_from
from boxmaker.core.runbook import Runbook


def add_parser(commands: Any) -> None:
    audit: Parser = commands.add_parser("audit", help="check the audit log")
    sub = audit.add_subparsers(dest="audit_command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    verify = sub.add_parser("verify", help="verify the whole hash chain of the audit log")
    verify.add_argument(
        "--home",
        type=Path,
        default=None,
        help="boxmaker's home (default: $BOXMAKER_HOME, else /var/lib/boxmaker)",
    )
    verify.set_defaults(handler=cmd_verify)


_BLOCK = 8 << 20  # read in blocks of 8 MiB: a log of any size verifies in bounded memory


def verify_home(home: Path) -> ChainReport:
    """The report on every file of `<home>/audit/`; CliError if it cannot be read."""
    audit_dir = Home(home).audit
    try:
        names = sorted(n for n in os.listdir(audit_dir) if is_audit_file_name(n))
    except OSError as exc:
        raise CliError(f"cannot read the audit log in {audit_dir}: {exc.strerror or exc}") from exc
    verifier = ChainVerifier()
    for name in names:
        path = audit_dir / name
        try:
            _feed_file(verifier, name, path)
        except OSError as exc:
            raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return verifier.finish()


def _feed_file(verifier: ChainVerifier, name: str, path: Path) -> None:
    """Feed the lines of `path` block by block, as `verifier.feed` would take them whole."""
    verifier.file(name)
    rest = b""
    with path.open("rb", buffering=0) as file:
        while block := file.read(_BLOCK):
            lines = (rest + block).split(b"\n")
            rest = lines.pop()  # the start of a line the next block ends
            verifier.lines(lines)
    if rest:
        verifier.line(rest, False)


def report_lines(report: ChainReport) -> list[str]:
    """The lines printed for a report without a failure."""
    head = report.head if report.head is not None else "none"
    lines = [f"audit: ok, {report.records} records, head {head}"]
    lines += [f"audit: recovered torn line at {at}" for at in report.recoveries]
    lines += [f"audit: accepted break at {at}" for at in report.accepted_breaks]
    lines += [f"audit: approval pending or abandoned: decision {s}" for s in report.abandoned]
    lines += [f"audit: call running or unfinished: decision {s}" for s in report.unfinished]
    lines += [f"audit: clock went backwards at {at}" for at in report.clock_warnings]
    torn = report.torn_tail
    if torn is not None:
        lines.append(
            f"audit: torn final line at {torn.at} ({torn.bytes} bytes),"
            " recovered at the next brokerd start"
        )
    return lines


def cmd_verify(args: argparse.Namespace) -> int:
    home: Path = args.home or home_from(os.environ)
    # The verifier makes many short-lived objects and no reference cycles: the
    # cycle collector would only add pauses (about a tenth of the time on a big log).
    gc.disable()
    report = verify_home(home)
    if report.failure is not None:
        out(report.failure.render())
        err(Runbook.AUDIT_CHAIN_BROKEN.pointer)
        return EXIT_PROBLEM
    for line in report_lines(report):
        out(line)
    return EXIT_OK
