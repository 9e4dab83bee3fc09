"""`bxctl audit verify`: checks the whole audit log, reading its files itself.

I/O: reads `<home>/audit/YYYY-MM-DD.jsonl` in name order (no daemon is asked)
and prints the report. It writes nothing: a torn final line is reported, and the
next brokerd start recovers it. The lines it prints (docs/audit.md, "The audit log"):

    audit: ok, <n> records, head <hex>          (head none when there is no record)
    audit: recovered torn line at <file>:<line>
    audit: accepted break at <file>:<line>
    audit: approval pending or abandoned: decision <seq>
    audit: call running or unfinished: decision <seq>
    audit: clock went backwards at <file>:<line>
    audit: torn final line at <file>:<line> (<n> bytes), recovered at the next brokerd start

exit 0; or, on stdout, `<file>:<line>: <what>` and, on stderr,
`see runbook.md#audit-chain-broken`, exit 1.

Checkpoints (core.audit.checkpoints; docs/audit-checkpoints.md): `--expect-head SEQ:HASH`
(repeatable) and `--checkpoints FILE` (repeatable; `--public-key PUBFILE` checks
every line's signature too) name records the log must hold. The verifier watches
their seqs, so the check costs nothing more than the plain pass. With
`--checkpoints`, the remembered head (audit_head; `--head-file FILE`) is read too:
its record must be in the log, and the newest checkpoint of the files (the
highest seq) must not be older than it nor than any `--expect-head`. When the
chain holds but a checkpoint does not, it prints one `<where>: <what>` line per
problem, where is `FILE:LINE`, `--expect-head N` (the Nth) or the head file, in
this order: each file's problems in line order (a line that is not a checkpoint,
a missing or bad signature, a break in the chain of sealed lines), a rollback,
then the checkpoints the log does not hold; then on stderr the runbook pointer of
each kind found (`see runbook.md#audit-checkpoints-broken` for a break or a
rollback, `see runbook.md#audit-below-checkpoint` for the rest), and exits 1.
When all hold, with `--checkpoints`, it remembers the newest and adds `audit: head
remembered in <file>: seq <seq>`; then it adds `audit: checkpoints hold: <n>, the
latest at seq <seq>` (n: the checkpoints checked, from the files and
--expect-head) as the report's last line. `bxctl audit checkpoint` and `bxctl audit keygen` are in
audit_checkpoint_cmd.
"""

from __future__ import annotations

import argparse
import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from boxmaker.bxctl import audit_checkpoint_cmd
from boxmaker.bxctl.audit_head import head_path, read_head, write_head
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError, Parser, err, out
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport
from boxmaker.core.audit.checkpoints import (
    Checkpoint,
    CheckpointLine,
    chain_problems,
    parse_head,
    parse_line,
    problem,
    rollback_problem,
)
from boxmaker.core.audit.names import is_audit_file_name
from boxmaker.core.home.layout import Home, home_from
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
    verify.add_argument(
        "--head-file",
        type=Path,
        metavar="FILE",
        help="with --checkpoints: where the newest checkpoint verified is remembered"
        " (default: $XDG_STATE_HOME/boxmaker/audit-head, else ~/.local/state/...)",
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


Problem = tuple[str, Runbook]  # a `<where>: <what>` line, and the entry it points to
_BELOW = Runbook.AUDIT_BELOW_CHECKPOINT
_BROKEN = Runbook.AUDIT_CHECKPOINTS_BROKEN


class Expected:
    """The checkpoints named, each with where it was named (`heads`: those of
    --expect-head, also in `named`); the problems found before the log is read (a
    line that is not a checkpoint, a missing or bad seal, a break in a file's chain,
    a rollback); and the newest line of the files (highest seq, the later on a tie)
    with where it is."""

    def __init__(self) -> None:
        self.named: list[tuple[str, Checkpoint]] = []
        self.heads: list[tuple[str, Checkpoint]] = []
        self.problems: list[Problem] = []
        self.newest: tuple[str, CheckpointLine] | None = None

    def refuse_rollback(self, seen: list[tuple[str, Checkpoint]]) -> None:
        """A problem for each head of `seen` (where, checkpoint) newer than the newest."""
        if self.newest is None:
            return
        where, newest = self.newest
        for source, checkpoint in seen:
            wrong = rollback_problem(newest.checkpoint, checkpoint, source)
            if wrong is not None:
                self.problems.append((f"{where}: {wrong}", _BROKEN))


def expected_checkpoints(heads: list[str], files: list[Path], public_key: Path | None) -> Expected:
    """What `--expect-head` and `--checkpoints` name (Expected)."""
    if public_key is not None and not files:
        raise CliError("--public-key checks the lines of --checkpoints FILE: name one", EXIT_USAGE)
    expected = Expected()
    for number, text in enumerate(heads, 1):
        try:
            expected.heads.append((f"--expect-head {number}", parse_head(text)))
        except ValueError as exc:
            raise CliError(f"--expect-head: {exc}", EXIT_USAGE) from exc
    expected.named += expected.heads
    check_seal = None
    if public_key is not None:
        # cryptography: imported only when a signature is checked
        from boxmaker.bxctl.seal import load_public, seal_problem

        key = load_public(public_key)

        def check_seal(line: CheckpointLine) -> str | None:
            return seal_problem(key, line)

    for path in files:
        _check_file(expected, path, check_seal)
    return expected


def _check_file(
    expected: Expected, path: Path, check_seal: Callable[[CheckpointLine], str | None] | None
) -> None:
    """Add the checkpoints of `path` to `expected`, and its problems in line order."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    lines: list[tuple[int, CheckpointLine]] = []
    found: list[tuple[int, str, Runbook]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        try:
            parsed = parse_line(raw)
        except ValueError as exc:
            found.append((number, str(exc), _BELOW))
            continue
        if parsed is None:
            continue
        lines.append((number, parsed))
        wrong = None if check_seal is None else check_seal(parsed)
        if wrong is not None:
            found.append((number, wrong, _BELOW))
    found += [(number, wrong, _BROKEN) for number, wrong in chain_problems(lines)]
    if not lines and not found:
        # a file cut to nothing (or to notes) must not pass for one that holds
        expected.problems.append(
            (
                f"{path}: holds no checkpoint: a checkpoint file has at least one line"
                " (`bxctl audit checkpoint` appends one)",
                _BELOW,
            )
        )
        return
    found.sort(key=lambda item: item[0])  # stable: a line's own problems keep their order
    expected.problems += [(f"{path}:{number}: {wrong}", entry) for number, wrong, entry in found]
    for number, parsed in lines:
        where = f"{path}:{number}"
        expected.named.append((where, parsed.checkpoint))
        newest = expected.newest
        if newest is None or parsed.checkpoint.seq >= newest[1].checkpoint.seq:
            expected.newest = (where, parsed)


def _head_file(args: argparse.Namespace, home: Path) -> Path | None:
    """Where the head is remembered: only with --checkpoints, never inside `home`."""
    if not args.checkpoints:
        if args.head_file is not None:
            raise CliError(
                "--head-file remembers the head of --checkpoints FILE: name one", EXIT_USAGE
            )
        return None
    path = head_path(args.head_file, os.environ)
    audit_checkpoint_cmd.refuse_inside_home(path, home, EXIT_USAGE)
    return path


def cmd_verify(args: argparse.Namespace) -> int:
    home: Path = args.home or home_from(os.environ)
    expected = expected_checkpoints(args.expect_head, args.checkpoints, args.public_key)
    named, problems = expected.named, expected.problems
    count = len(named)
    head_file = _head_file(args, home)
    remembered = None if head_file is None else read_head(head_file)
    seen = list(expected.heads)
    if remembered is not None:
        seen.append((str(head_file), remembered.checkpoint))
        named.append((str(head_file), remembered.checkpoint))  # the log must hold it too
    expected.refuse_rollback(seen)
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
            problems.append((f"{where}: {wrong}", _BELOW))
    if problems:
        for line, _ in problems:
            out(line)
        for entry in dict.fromkeys(entry for _, entry in problems):
            err(entry.pointer)
        return EXIT_PROBLEM
    if head_file is not None and expected.newest is not None:
        newest = expected.newest[1]
        if newest != remembered:
            write_head(head_file, newest)
    for line in report_lines(report):
        out(line)
    if head_file is not None and expected.newest is not None:
        out(f"audit: head remembered in {head_file}: seq {expected.newest[1].checkpoint.seq}")
    if count:
        latest = max(checkpoint.seq for _, checkpoint in named[:count])
        out(f"audit: checkpoints hold: {count}, the latest at seq {latest}")
    return EXIT_OK
