"""The audit writer on real files: chaining, day files, the lock, sync, and failure."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxmaker.brokerd.audit_startup import Started, audit_files, start_audit
from boxmaker.brokerd.audit_writer import (
    AuditFiles,
    AuditLock,
    AuditLockedError,
    AuditUnavailableError,
    AuditWriter,
    Position,
)
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport, Location
from boxmaker.core.audit.records import DecisionEvent, RecoveryEvent, decode_record
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import add_ms


def event(call: str = "c1") -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments='{"path":"/x"}',
        outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def verify(audit: Path) -> ChainReport:
    verifier = ChainVerifier()
    for name in audit_files(audit):
        verifier.feed(name, (audit / name).read_bytes())
    return verifier.finish()


def open_writer(audit: Path, now: str, files: AuditFiles | None = None) -> AuditWriter:
    started = start_audit(audit, now, files=files)
    assert isinstance(started, Started), started
    return started.writer


@pytest.mark.parametrize(
    "bad",
    [
        "2026-11-30T24:00:00.000Z",
        "2026-11-30T12:60:00.000Z",
        "2026-11-30T12:00:00Z",
        "2026-11-30T12:00:00.000Z ",
        "2026-11-31T12:00:00.000Z",
        "2026-11-30",
    ],
)
def test_a_time_that_is_not_a_timestamp_is_refused_before_anything_is_written(
    tmp_path: Path, bad: str
) -> None:
    audit = tmp_path / "audit"
    writer = open_writer(audit, "2026-11-30T12:00:00.000Z")
    writer.append(event("first"), "2026-11-30T12:00:00.000Z")  # the day is known now
    size = (audit / "2026-11-30.jsonl").stat().st_size
    with pytest.raises(ValueError, match=r"timestamp|real date"):
        writer.append(event("second"), bad)
    assert (audit / "2026-11-30.jsonl").stat().st_size == size
    writer.append(event("third"), "2026-11-30T12:00:01.000Z")  # a caller's mistake, not a failure
    assert verify(audit).records == 2


class Recording(AuditFiles):
    """Real file operations, logged; and one that fails on demand."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail_write: OSError | None = None
        self.short = False
        self.fail_fsync: OSError | None = None

    def create(self, path: Path) -> int:
        self.calls.append(f"create {path.name}")
        return super().create(path)

    def sync_dir(self, path: Path) -> None:
        self.calls.append("sync_dir")
        super().sync_dir(path)

    def write(self, fd: int, data: bytes) -> int:
        self.calls.append("write")
        if self.fail_write is not None:
            raise self.fail_write
        if self.short:
            return super().write(fd, data[: len(data) // 2])
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self.calls.append("fsync")
        if self.fail_fsync is not None:
            raise self.fail_fsync
        super().fsync(fd)


def test_records_chain_across_a_day_boundary_with_seq_across_files(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = Recording()
    writer = open_writer(audit, "2026-11-30T23:59:59.000Z", files)
    writer.append(event("a"), "2026-11-30T23:59:59.000Z")
    writer.append(event("b"), "2026-11-30T23:59:59.900Z")
    writer.append(event("c"), "2026-12-01T00:00:00.100Z")
    writer.close()
    assert audit_files(audit) == ["2026-11-30.jsonl", "2026-12-01.jsonl"]
    first = (audit / "2026-11-30.jsonl").read_bytes().splitlines()
    second = (audit / "2026-12-01.jsonl").read_bytes().splitlines()
    assert [decode_record(x).seq for x in first + second] == [0, 1, 2]
    report = verify(audit)
    assert report.ok
    assert report.records == 3
    for name in audit_files(audit):
        assert (audit / name).stat().st_mode & 0o777 == 0o600
    assert audit.stat().st_mode & 0o777 == 0o700
    # each file created then the directory synced; each record one write then a sync
    assert files.calls == [
        "create 2026-11-30.jsonl",
        "sync_dir",
        "write",
        "fsync",
        "write",
        "fsync",
        "create 2026-12-01.jsonl",
        "sync_dir",
        "write",
        "fsync",
    ]


def test_a_clock_stepped_back_writes_in_the_latest_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    writer = open_writer(audit, "2026-12-01T00:00:01.000Z")
    writer.append(event("a"), "2026-12-01T00:00:01.000Z")
    writer.append(event("b"), "2026-11-30T23:59:58.000Z")
    writer.close()
    assert audit_files(audit) == ["2026-12-01.jsonl"]
    report = verify(audit)
    assert report.ok
    assert report.clock_warnings == (Location("2026-12-01.jsonl", 2),)


def test_recovery_goes_in_the_latest_file_whatever_its_date(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    writer = open_writer(audit, "2026-11-30T10:00:00.000Z")
    writer.append(event(), "2026-11-30T10:00:00.000Z")
    writer.append(RecoveryEvent(torn_bytes=0, torn_sha256=ZERO_HASH), "2026-12-05T10:00:00.000Z")
    writer.close()
    assert audit_files(audit) == ["2026-11-30.jsonl"]


def test_the_lock_refuses_a_second_writer(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    writer = open_writer(audit, "2026-11-30T10:00:00.000Z")
    with pytest.raises(AuditLockedError):
        AuditLock.acquire(audit)
    code = (
        "import sys; from pathlib import Path;"
        "from boxmaker.brokerd.audit_writer import AuditLock, AuditLockedError\n"
        "try: AuditLock.acquire(Path(sys.argv[1]))\n"
        "except AuditLockedError: sys.exit(3)\n"
    )
    other = subprocess.run([sys.executable, "-c", code, str(audit)], check=False)
    assert other.returncode == 3
    writer.close()
    AuditLock.acquire(audit).release()


@pytest.mark.parametrize(
    "failure",
    [
        {"fail_write": OSError(errno.ENOSPC, "No space left on device")},
        {"fail_write": OSError(errno.EIO, "Input/output error")},
        {"short": True},
        {"fail_fsync": OSError(errno.EIO, "Input/output error")},
    ],
    ids=["enospc", "eio", "short-write", "fsync-eio"],
)
def test_a_failed_write_breaks_the_writer_for_good(
    tmp_path: Path, failure: dict[str, object]
) -> None:
    audit = tmp_path / "audit"
    files = Recording()
    writer = open_writer(audit, "2026-11-30T10:00:00.000Z", files)
    writer.append(event("ok"), "2026-11-30T10:00:00.000Z")
    for key, value in failure.items():
        setattr(files, key, value)
    with pytest.raises(AuditUnavailableError) as first:
        writer.append(event("fails"), "2026-11-30T10:00:01.000Z")
    # the disk is fine again, yet nothing more is written in this process
    files.fail_write = files.fail_fsync = None
    files.short = False
    writes = files.calls.count("write")
    for i in range(3):
        with pytest.raises(AuditUnavailableError) as later:
            writer.append(event(f"after{i}"), "2026-11-30T10:00:02.000Z")
        assert later.value is first.value
    assert files.calls.count("write") == writes
    assert first.value.lines()[1] == "see runbook.md#audit-unavailable"
    writer.close()
    # the next start recovers whatever was left, and the log verifies
    restarted = open_writer(audit, "2026-11-30T10:01:00.000Z")
    restarted.append(event("next"), "2026-11-30T10:01:00.000Z")
    restarted.close()
    assert verify(audit).ok


_CHILD = """
import sys
from pathlib import Path
from boxmaker.brokerd.audit_startup import start_audit
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import AllowedRecord
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import add_ms
started = start_audit(Path(sys.argv[1]), "2026-11-30T10:00:00.000Z")
writer = started.writer
now = "2026-11-30T23:59:00.000Z"
for i in range(100000):
    now = add_ms(now, 7)
    event = DecisionEvent(session="s", call=f"{sys.argv[2]}-{i}", tool="shell", arguments="x" * (i % 300),
        outcome=AllowedRecord(), taint=DataClass.PRIVATE, untrusted=False)
    record = writer.append(event, now)
    sys.stdout.write(f"{record.seq} {event.call}\\n")
    sys.stdout.flush()
"""


@pytest.mark.slow
@pytest.mark.parametrize("run", range(6))
def test_a_writer_killed_at_random_moments_loses_no_returned_record(
    tmp_path: Path, run: int
) -> None:
    audit = tmp_path / "audit"
    acknowledged: dict[str, int] = {}
    for kill in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(audit), f"run{kill}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        target = 5 + (run * 37 + kill * 53) % 120
        deadline = time.monotonic() + 60
        seen = 0
        while seen < target and time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            seq, call = line.split()
            acknowledged[call] = int(seq)
            seen += 1
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate()
        for line in rest.splitlines():  # written before the kill landed
            seq, call = line.split()
            acknowledged[call] = int(seq)
        assert seen == target, "the child stopped writing"
    check = start_audit(audit, "2026-12-02T00:00:00.000Z")
    assert isinstance(check, Started), check
    check.writer.close()
    report = verify(audit)
    assert report.ok, report.failure
    on_disk: dict[str, int] = {}
    for name in audit_files(audit):
        for raw in (audit / name).read_bytes().splitlines():
            try:
                record = decode_record(raw)
            except ValueError:
                continue
            if isinstance(record.event, DecisionEvent):
                on_disk[record.event.call] = record.seq
    for call, acked in acknowledged.items():
        assert on_disk.get(call) == acked, call


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 5)),
            st.tuples(st.just("next_day"), st.integers(1, 2)),
            st.tuples(st.just("step_back"), st.integers(1, 90_000_000)),
            st.tuples(st.just("tear"), st.integers(0, 400)),
            st.tuples(st.just("restart"), st.integers(0, 0)),
        ),
        max_size=25,
    )
)
def test_any_history_leaves_a_log_that_verifies(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    audit = tmp_path_factory.mktemp("h") / "audit"
    now = "2026-11-30T22:00:00.000Z"
    writer = open_writer(audit, now)
    for action, n in steps:
        if action == "append":
            for i in range(n + 1):
                now = add_ms(now, 1000)
                writer.append(event(f"c{i}"), now)
        elif action == "next_day":
            now = add_ms(now, n * 86_400_000)
        elif action == "step_back":
            now = add_ms(now, -n)
        elif action == "restart" or action == "tear":
            position = writer.position
            writer.close()
            if action == "tear" and position.latest is not None:
                # a crash in the middle of a write: part of a line, no newline
                line = b'{"seq":' + str(position.next_seq).encode() + b',"time":"' + b"x" * n
                with open(audit / position.latest, "ab") as f:
                    f.write(line[: max(1, n)])
            now = add_ms(now, 1)
            writer = open_writer(audit, now)
    writer.close()
    report = verify(audit)
    assert report.ok, report.failure
    assert report.torn_tail is None


def test_a_position_is_where_the_writer_goes_on(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    lock = AuditLock.acquire(audit)
    writer = AuditWriter(audit, lock, Position(None, 0, ZERO_HASH))
    record = writer.append(event(), "2026-11-30T10:00:00.000Z")
    assert (record.seq, record.prev) == (0, ZERO_HASH)
    assert writer.position.latest == "2026-11-30.jsonl"
    assert writer.position.next_seq == 1
    writer.close()
