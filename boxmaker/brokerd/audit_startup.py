"""brokerd's audit startup: lock, check the chain, recover a torn tail, open the writer.

I/O: reads the files of `<home>/audit/`, takes the lock, and may append one
Recovery or AcceptedBreak record (after ending a torn line with its newline).
Prints nothing and never exits: `start_audit` returns `Started` (with the writer
and the lines to print) or `Refused` (the lines and the exit status serve uses).

    1. Take the lock; if held: "brokerd is already running", status 1.
    2. Plain start: verify the latest file, resumed from the last line of the file
       before it; if there is no such line, or it does not parse, or lacks its
       newline, verify the whole log. With accept_break: verify the whole log.
    3. A failure: plain start refuses with `<file>:<line>: <what>` and the
       audit-chain-broken pointer, status 1, writing nothing. accept_break ends a
       torn final line, appends the AcceptedBreak the report describes, and starts.
    4. No failure but a torn tail: end it with a newline if it has none, append its
       Recovery, say so with the audit-recovered pointer, and start.
    5. accept_break and no failure: "nothing to accept", status 2, writing nothing.

Before anything is written (and after a plain start's chain failure), the log
must not be below its checkpoint, `<home>/audit/checkpoint.json` (brokerd's
last, `audit_checkpoint`): the checkpoint's seq must be a record of the log, and
that record's line must hash to the checkpoint's head. If not (the log was cut
or rewritten after the checkpoint), or checkpoint.json cannot be read, refuse
with one line and the audit-below-checkpoint pointer, status 1, writing nothing:
a new record would reuse a seq the owner may hold a checkpoint of. The record is
found by the check's own verifier when it is in the files checked; in an older
file (a plain start reads only the latest), it is found by its seq and hashed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

from boxmaker.brokerd.audit_checkpoint import checkpoint_path, read_checkpoint
from boxmaker.brokerd.audit_writer import (
    AuditFiles,
    AuditLock,
    AuditLockedError,
    AuditUnavailableError,
    AuditWriter,
    Position,
)
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport
from boxmaker.core.audit.checkpoints import Checkpoint, problem
from boxmaker.core.audit.names import is_audit_file_name
from boxmaker.core.audit.records import (
    AcceptedBreakEvent,
    RecordError,
    RecoveryEvent,
    decode_record,
)
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.runbook import Runbook

RECOVERED = "audit: recovered a torn final line"
NOTHING_TO_ACCEPT = "nothing to accept"

EXIT_FAILED = 1
EXIT_NOTHING_TO_ACCEPT = 2
_BELOW = Runbook.AUDIT_BELOW_CHECKPOINT.pointer


@dataclass(frozen=True)
class Started:
    """The log is sound (or was made so): append through `writer`; print `lines`."""

    writer: AuditWriter
    lines: tuple[str, ...] = ()
    report: ChainReport | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Refused:
    """brokerd must not serve: print `lines` to stderr and exit with `status`."""

    status: int
    lines: tuple[str, ...]


def audit_files(audit_dir: Path) -> list[str]:
    """The log's file names in `audit_dir`, in name (and so date) order."""
    return sorted(
        name for name in (p.name for p in audit_dir.iterdir()) if is_audit_file_name(name)
    )


def verify_files(audit_dir: Path, names: list[str], verifier: ChainVerifier) -> ChainReport:
    """Feed each named file to `verifier` in order and report."""
    for name in names:
        verifier.feed(name, (audit_dir / name).read_bytes())
    return verifier.finish()


def start_audit(
    audit_dir: Path, now: str, *, accept_break: bool = False, files: AuditFiles | None = None
) -> Started | Refused:
    """Startup as the module docstring lists; `now` is the time of any record written."""
    try:
        lock = AuditLock.acquire(audit_dir)
    except AuditLockedError as exc:
        return Refused(EXIT_FAILED, exc.lines())
    except OSError as exc:
        return Refused(
            EXIT_FAILED,
            (f"audit: cannot lock {audit_dir}: {exc}", Runbook.AUDIT_UNAVAILABLE.pointer),
        )
    try:
        outcome = _check_and_open(audit_dir, now, accept_break, lock, files)
    except OSError as exc:
        outcome = Refused(
            EXIT_FAILED,
            (f"audit: cannot read {audit_dir}: {exc}", Runbook.AUDIT_UNAVAILABLE.pointer),
        )
    except AuditUnavailableError as exc:
        outcome = Refused(EXIT_FAILED, exc.lines())
    if isinstance(outcome, Refused):
        lock.release()
    return outcome


def _check_and_open(
    audit_dir: Path, now: str, accept_break: bool, lock: AuditLock, files: AuditFiles | None
) -> Started | Refused:
    names = audit_files(audit_dir)
    try:
        checkpoint = read_checkpoint(audit_dir)
    except ValueError as exc:
        return Refused(EXIT_FAILED, (f"audit: {checkpoint_path(audit_dir)}: {exc}", _BELOW))
    watch = () if checkpoint is None else (checkpoint.seq,)
    if accept_break:
        report = _long_check(audit_dir, names, watch)
    else:
        report = _short_check(audit_dir, names, watch)
    latest = names[-1] if names else None
    failure = report.failure
    if failure is not None and not accept_break:
        return Refused(EXIT_FAILED, (failure.render(), Runbook.AUDIT_CHAIN_BROKEN.pointer))
    if checkpoint is not None:
        below = _below(audit_dir, names, report, checkpoint)
        if below is not None:
            return Refused(EXIT_FAILED, (below, _BELOW))
    if failure is not None:
        writer = AuditWriter(
            audit_dir, lock, Position(latest, failure.break_seq, failure.break_prev), files
        )
        if failure.tail_torn:
            writer.end_torn_line()
        event = AcceptedBreakEvent(
            file=failure.file, line=failure.line, last_good=failure.last_good
        )
        writer.append_in_latest(event, now)
        accepted = f"audit: accepted the break at {failure.render()}"
        return Started(writer, (accepted,), report)
    if accept_break:
        return Refused(EXIT_NOTHING_TO_ACCEPT, (NOTHING_TO_ACCEPT,))
    torn = report.torn_tail
    if torn is not None:
        writer = AuditWriter(
            audit_dir, lock, Position(latest, torn.recovery_seq, torn.recovery_prev), files
        )
        if not torn.has_newline:
            writer.end_torn_line()
        writer.append_in_latest(RecoveryEvent(torn_bytes=torn.bytes, torn_sha256=torn.sha256), now)
        return Started(writer, (RECOVERED, Runbook.AUDIT_RECOVERED.pointer), report)
    head = report.head if report.head is not None else ZERO_HASH
    return Started(
        AuditWriter(audit_dir, lock, Position(latest, report.next_seq, head), files), (), report
    )


def _below(
    audit_dir: Path, names: list[str], report: ChainReport, checkpoint: Checkpoint
) -> str | None:
    """The line a start below `checkpoint` refuses with; None if the log holds it."""
    heads = dict(report.heads)
    last_seq = report.last_seq
    if checkpoint.seq not in heads and last_seq is not None and checkpoint.seq <= last_seq:
        found = _hash_of_seq(audit_dir, names, checkpoint.seq)
        if found is not None:
            heads[checkpoint.seq] = found
    wrong = problem(checkpoint, heads, last_seq)
    if wrong is None:
        return None
    return (
        f"audit: the log is below its checkpoint {checkpoint.seq} of {checkpoint.time}"
        f" ({checkpoint_path(audit_dir)}): {wrong}"
    )


def _hash_of_seq(audit_dir: Path, names: list[str], seq: int) -> str | None:
    """The hash of the last line with `seq` in the latest file that has one at or before it."""
    for name in reversed(names):
        lines = (audit_dir / name).read_bytes().split(b"\n")
        found: str | None = None
        first: int | None = None
        for line in lines:
            try:
                record = decode_record(line)
            except RecordError:
                continue
            first = record.seq if first is None else first
            if record.seq == seq:
                found = hashlib.sha256(line).hexdigest()
        if found is not None or (first is not None and first <= seq):
            return found
    return None


def _long_check(audit_dir: Path, names: list[str], watch: tuple[int, ...] = ()) -> ChainReport:
    verifier = ChainVerifier()
    verifier.watch(watch)
    return verify_files(audit_dir, names, verifier)


def _short_check(audit_dir: Path, names: list[str], watch: tuple[int, ...]) -> ChainReport:
    """The latest file, resumed from the last line before it; the whole log if that fails."""
    if not names:
        return ChainVerifier().finish()
    for earlier in reversed(names[:-1]):
        content = (audit_dir / earlier).read_bytes()
        if not content:
            continue
        if not content.endswith(b"\n"):
            break  # a torn line in an older file: there is no point to resume from
        last = content[:-1].rsplit(b"\n", 1)[-1]
        try:
            record = decode_record(last)
        except RecordError:
            break
        last_hash = hashlib.sha256(last).hexdigest()
        verifier = ChainVerifier.resume(record.seq + 1, last_hash)
        verifier.watch(watch)
        report = verify_files(audit_dir, names[-1:], verifier)
        if record.seq in watch:  # the point resumed from is the checkpoint itself
            heads = dict(report.heads)
            heads.setdefault(record.seq, last_hash)
            report = replace(report, heads=tuple(sorted(heads.items())))
        return report
    return _long_check(audit_dir, names, watch)
