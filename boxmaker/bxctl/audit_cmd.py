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

Checkpoints (core.checkpoints; docs/audit-checkpoints.md): `--expect-head SEQ:HASH`
(repeatable) and `--checkpoints FILE` (repeatable; `--public-key PUBFILE` checks
every line's signature too) name records the log must hold. The verifier watches
their seqs, so the check costs nothing more than the plain pass. When the chain
holds but a checkpoint does not (or a line of FILE is not a checkpoint, or its
signature is missing or bad), it prints one `<where>: <what>` line per problem,
where is `FILE:LINE` or `--expect-head N` (the Nth), then
`see runbook.md#audit-below-checkpoint` on stderr, and exits 1. When all hold it
adds `audit: checkpoints hold: <n>, the latest at seq <seq>` to the report.
`bxctl audit checkpoint` and `bxctl audit keygen` are in audit_checkpoint_cmd.
"""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import Any

from boxmaker.bxctl import audit_checkpoint_cmd
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError, Parser, err, out
from boxmaker.core.audit_names import is_audit_file_name
from boxmaker.core.chain import ChainVerifier
from boxmaker.core.chain_report import ChainReport
from boxmaker.core.checkpoints import Checkpoint, CheckpointLine, parse_head, parse_line, problem
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
    verify.add_argument(
        "--expect-head",
        action="append",
        default=[],
        metavar="SEQ:HASH",
        help="fail unless the record with this seq hashes to this (repeatable)",
    )
    verify.add_argument(
        "--checkpoints",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="fail unless the log holds every checkpoint in FILE (repeatable)",
    )
    verify.add_argument(
        "--public-key",
        type=Path,
        metavar="PUBFILE",
        help="with --checkpoints: fail unless every line is signed by this key",
    )
    verify.set_defaults(handler=cmd_verify)
    audit_checkpoint_cmd.add_parsers(sub)


_BLOCK = 8 << 20  # read in blocks of 8 MiB: a log of any size verifies in bounded memory


def verify_home(home: Path, watch: tuple[int, ...] = ()) -> ChainReport:
    """The report on every file of `<home>/audit/`, watching the seqs of `watch`
    (ChainVerifier.watch); CliError if it cannot be read."""
    audit_dir = Home(home).audit
    try:
        names = sorted(n for n in os.listdir(audit_dir) if is_audit_file_name(n))
    except OSError as exc:
        raise CliError(f"cannot read the audit log in {audit_dir}: {exc.strerror or exc}") from exc
    verifier = ChainVerifier()
    verifier.watch(watch)
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


def expected_checkpoints(
    heads: list[str], files: list[Path], public_key: Path | None
) -> tuple[list[tuple[str, Checkpoint]], list[str]]:
    """The checkpoints named, each with where it was named; and the problems found
    before the log is read (a line that is not a checkpoint, a missing or bad seal)."""
    if public_key is not None and not files:
        raise CliError("--public-key checks the lines of --checkpoints FILE: name one", EXIT_USAGE)
    named: list[tuple[str, Checkpoint]] = []
    problems: list[str] = []
    for number, text in enumerate(heads, 1):
        try:
            named.append((f"--expect-head {number}", parse_head(text)))
        except ValueError as exc:
            raise CliError(f"--expect-head: {exc}", EXIT_USAGE) from exc
    lines: list[tuple[str, CheckpointLine]] = []
    for path in files:
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
        found = len(lines)
        for number, raw in enumerate(text.splitlines(), 1):
            try:
                parsed = parse_line(raw)
            except ValueError as exc:
                problems.append(f"{path}:{number}: {exc}")
                continue
            if parsed is not None:
                lines.append((f"{path}:{number}", parsed))
        if len(lines) == found and not any(p.startswith(f"{path}:") for p in problems):
            # a file cut to nothing (or to notes) must not pass for one that holds
            problems.append(
                f"{path}: holds no checkpoint: a checkpoint file has at least one line"
                " (`bxctl audit checkpoint` appends one)"
            )
    if public_key is not None:
        # cryptography: imported only when a signature is checked
        from boxmaker.bxctl.seal import load_public, seal_problem

        key = load_public(public_key)
        for where, parsed in lines:
            wrong = seal_problem(key, parsed)
            if wrong is not None:
                problems.append(f"{where}: {wrong}")
    named += [(where, parsed.checkpoint) for where, parsed in lines]
    return named, problems


def cmd_verify(args: argparse.Namespace) -> int:
    home: Path = args.home or home_from(os.environ)
    named, problems = expected_checkpoints(args.expect_head, args.checkpoints, args.public_key)
    # The verifier makes many short-lived objects and no reference cycles: the
    # cycle collector would only add pauses (about a tenth of the time on a big log).
    gc.disable()
    report = verify_home(home, tuple(checkpoint.seq for _, checkpoint in named))
    if report.failure is not None:
        out(report.failure.render())
        err(Runbook.AUDIT_CHAIN_BROKEN.pointer)
        return EXIT_PROBLEM
    heads = report.head_of()
    for where, checkpoint in named:
        wrong = problem(checkpoint, heads, report.last_seq)
        if wrong is not None:
            problems.append(f"{where}: {wrong}")
    if problems:
        for line in problems:
            out(line)
        err(Runbook.AUDIT_BELOW_CHECKPOINT.pointer)
        return EXIT_PROBLEM
    for line in report_lines(report):
        out(line)
    if named:
        latest = max(checkpoint.seq for _, checkpoint in named)
        out(f"audit: checkpoints hold: {len(named)}, the latest at seq {latest}")
    return EXIT_OK
