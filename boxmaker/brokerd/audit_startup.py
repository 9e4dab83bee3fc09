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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from boxmaker.brokerd.audit_writer import (
    AuditFiles,
    AuditLock,
    AuditLockedError,
    AuditUnavailableError,
    AuditWriter,
    Position,
)
from boxmaker.core.audit_names import is_audit_file_name
from boxmaker.core.audit_records import (
    AcceptedBreakEvent,
    RecordError,
    RecoveryEvent,
    decode_record,
)
from boxmaker.core.chain import ChainVerifier
from boxmaker.core.chain_report import ChainReport
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.runbook import Runbook

RECOVERED = "audit: recovered a torn final line"
NOTHING_TO_ACCEPT = "nothing to accept"

EXIT_FAILED = 1
EXIT_NOTHING_TO_ACCEPT = 2


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
    report = _long_check(audit_dir, names) if accept_break else _short_check(audit_dir, names)
    latest = names[-1] if names else None
    failure = report.failure
    if failure is not None:
        if not accept_break:
            return Refused(EXIT_FAILED, (failure.render(), Runbook.AUDIT_CHAIN_BROKEN.pointer))
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


def _long_check(audit_dir: Path, names: list[str]) -> ChainReport:
    return verify_files(audit_dir, names, ChainVerifier())


def _short_check(audit_dir: Path, names: list[str]) -> ChainReport:
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
        verifier = ChainVerifier.resume(record.seq + 1, hashlib.sha256(last).hexdigest())
        return verify_files(audit_dir, names[-1:], verifier)
    return _long_check(audit_dir, names)
