"""Group commit: records staged while an fsync is in flight share the next one.

The writer runs on real files behind `WatchedFiles`, which keeps, for every
record, whether an fsync that covers it has returned (it notes which records were
written to a file before each fsync of it began), and can hold an fsync back
until the test lets it go, fail one, or make it slow. Every caller checks, as
soon as it gets its answer, that its own record was durable by then.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.audit_startup import Started, audit_files, start_audit
from boxmaker.brokerd.audit_writer import (
    Appended,
    AuditFiles,
    AuditUnavailableError,
    AuditWriter,
)
from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.session_state import SessionStore
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport
from boxmaker.core.audit.records import DecisionEvent, decode_record
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Denial
from boxmaker.core.timestamps import add_ms
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.testing.waiting import wait_until

NOW = "2026-11-30T12:00:00.000Z"
FOLLOWERS = 6
TIMEOUT_S = 10.0


def event(call: str) -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments='{"path":"/x"}',
        outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


class WatchedFiles(AuditFiles):
    """Real file operations; which records each fsync covered; gates and failures on demand.

    `log` holds, in order: `create NAME`, `sync_dir`, `write SEQ`, and `fsync N [SEQS]`
    when fsync number N (from 1) has returned, SEQS being the records written to
    that file before it began.
    """

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.log: list[str] = []
        self.writes = 0  # writes made
        self.attempts = 0  # writes tried, failed ones included
        self.fsyncs = 0  # fsyncs begun
        self.durable: set[int] = set()
        self.fail_write_at: int | None = None  # the attempt that fails
        self.fail_fsync_at: int | None = None  # the fsync that fails (after its gate)
        self.hold: dict[int, threading.Event] = {}  # fsync number: released when set
        self.delay: Callable[[], float] | None = None
        self._in_file: dict[int, list[int]] = {}  # fd: seqs written to its file

    def create(self, path: Path) -> int:
        fd = super().create(path)
        with self.cond:
            self._in_file[fd] = []
            self.log.append(f"create {path.name}")
        return fd

    def open_append(self, path: Path) -> int:
        fd = super().open_append(path)
        with self.cond:
            self._in_file[fd] = []
        return fd

    def sync_dir(self, path: Path) -> None:
        super().sync_dir(path)
        with self.cond:
            self.log.append("sync_dir")

    def write(self, fd: int, data: bytes) -> int:
        with self.cond:
            self.attempts += 1
            failing = self.attempts == self.fail_write_at
            self.cond.notify_all()
        if failing:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        written = super().write(fd, data)
        with self.cond:
            if data != b"\n":
                seq = orjson.loads(data)["seq"]
                self._in_file[fd].append(seq)
                self.log.append(f"write {seq}")
            self.writes += 1
            self.cond.notify_all()
        return written

    def fsync(self, fd: int) -> None:
        with self.cond:
            self.fsyncs += 1
            number = self.fsyncs
            covers = list(self._in_file[fd])  # written before this fsync began
            self.cond.notify_all()
        gate = self.hold.get(number)
        if gate is not None:
            assert gate.wait(TIMEOUT_S), f"fsync {number} was never let go"
        if number == self.fail_fsync_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if self.delay is not None:
            time.sleep(self.delay())  # a slow disk, not a wait for something
        super().fsync(fd)
        with self.cond:
            self.durable.update(covers)
            self.log.append(f"fsync {number} {covers}")

    def is_durable(self, seq: int) -> bool:
        with self.cond:
            return seq in self.durable

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(condition, TIMEOUT_S), f"timed out waiting for {what}"


class Caller(threading.Thread):
    """Appends one record on its own thread; checks its record was durable on return."""

    def __init__(self, writer: AuditWriter, files: WatchedFiles, call: str, now: str) -> None:
        super().__init__(name=call)
        self.writer, self.files, self.call, self.now = writer, files, call, now
        self.appended: Appended | None = None
        self.durable_on_return = False
        self.error: AuditUnavailableError | None = None

    def run(self) -> None:
        try:
            self.appended = self.writer.append(event(self.call), self.now)
        except AuditUnavailableError as exc:
            self.error = exc
        else:
            self.durable_on_return = self.files.is_durable(self.appended.seq)

    def finish(self) -> None:
        self.join(TIMEOUT_S)
        assert not self.is_alive(), f"{self.call} never returned"


def open_writer(audit: Path, files: WatchedFiles) -> AuditWriter:
    started = start_audit(audit, NOW, files=files)
    assert isinstance(started, Started), started
    return started.writer


def verify(audit: Path) -> ChainReport:
    verifier = ChainVerifier()
    for name in audit_files(audit):
        verifier.feed(name, (audit / name).read_bytes())
    return verifier.finish()


def seqs_by_file(audit: Path) -> dict[str, list[int]]:
    return {
        name: [decode_record(line).seq for line in (audit / name).read_bytes().splitlines()]
        for name in audit_files(audit)
    }


def leader_and_group(
    writer: AuditWriter, files: WatchedFiles, times: list[str]
) -> tuple[Caller, list[Caller]]:
    """The first caller's fsync held; the others staged and waiting behind it."""
    gate = files.hold[1] = threading.Event()
    leader = Caller(writer, files, "c0", times[0])
    leader.start()
    files.wait_for("the first fsync", lambda: files.fsyncs == 1)
    group = [Caller(writer, files, f"c{i}", now) for i, now in enumerate(times[1:], 1)]
    for caller in group:
        caller.start()
    files.wait_for("the group's writes", lambda: files.writes == len(times))
    wait_until(lambda: writer.stats.waiting == len(group), TIMEOUT_S, "the group to wait")
    assert leader.is_alive()  # held in its fsync: not answered yet
    gate.set()
    return leader, group


# --- the group ----------------------------------------------------------------------


def test_records_staged_during_an_fsync_share_the_next_one(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    writer = open_writer(audit, files)
    leader, group = leader_and_group(writer, files, [NOW] * (FOLLOWERS + 1))
    for caller in [leader, *group]:
        caller.finish()
        assert caller.error is None
        assert caller.durable_on_return, caller.call
    # the leader's fsync covered its own record; one more covered the whole group
    assert files.fsyncs == 2
    assert files.log[-1] == f"fsync 2 {list(range(FOLLOWERS + 1))}"
    assert f"fsync 1 {[0]}" in files.log
    assert writer.stats.fsyncs == 2
    assert writer.stats.records == FOLLOWERS + 1
    assert writer.stats.waiting == 0
    writer.close()
    assert files.fsyncs == 2  # nothing was left to sync
    # seq order is file order, and the log verifies
    written = [int(entry.split()[1]) for entry in files.log if entry.startswith("write")]
    assert seqs_by_file(audit) == {"2026-11-30.jsonl": written}
    assert sorted(written) == written == list(range(FOLLOWERS + 1))
    calls = {c.call: c.appended.seq for c in [leader, *group] if c.appended is not None}
    on_disk = {}
    for line in (audit / "2026-11-30.jsonl").read_bytes().splitlines():
        record = decode_record(line)
        assert isinstance(record.event, DecisionEvent)
        on_disk[record.event.call] = record.seq
    assert on_disk == calls
    report = verify(audit)
    assert report.ok, report.failure
    assert report.records == FOLLOWERS + 1


def test_a_single_caller_still_writes_then_syncs_each_record(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    writer = open_writer(audit, files)
    for i in range(3):
        appended = writer.append(event(f"c{i}"), NOW)
        assert files.is_durable(appended.seq)
    assert files.log == [
        "create 2026-11-30.jsonl",
        "sync_dir",
        "write 0",
        "fsync 1 [0]",
        "write 1",
        "fsync 2 [0, 1]",
        "write 2",
        "fsync 3 [0, 1, 2]",
    ]
    assert writer.stats.fsyncs == writer.stats.records == 3


def test_stage_then_wait_durable_is_append_in_two(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    writer = open_writer(audit, files)
    tickets = [writer.stage(event(f"c{i}"), NOW) for i in range(4)]
    assert [t.seq for t in tickets] == [0, 1, 2, 3]
    assert files.fsyncs == 0  # staged: written, nothing synced, nothing to act on yet
    writer.wait_durable(tickets[1])  # one fsync covers everything written before it
    assert files.durable == {0, 1, 2, 3}
    for ticket in tickets:
        writer.wait_durable(ticket)
    assert files.fsyncs == 1
    assert writer.position.next_seq == 4
    assert tickets[0].prev == ZERO_HASH
    assert len({t.prev for t in tickets}) == 4  # each chained from the one before
    writer.close()
    assert verify(audit).ok


def test_close_syncs_what_was_staged(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    writer = open_writer(audit, files)
    ticket = writer.stage(event("c0"), NOW)
    writer.close()
    assert files.durable == {0}
    writer.wait_durable(ticket)  # durable before the close: still answered
    with pytest.raises(AuditUnavailableError, match="closed"):
        writer.append(event("c1"), NOW)


# --- failures -----------------------------------------------------------------------


@pytest.mark.parametrize("failing", [1, 2], ids=["leader-fsync", "group-fsync"])
def test_a_failed_fsync_fails_every_caller_it_was_to_cover_and_every_later_one(
    tmp_path: Path, failing: int
) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    files.fail_fsync_at = failing
    writer = open_writer(audit, files)
    leader, group = leader_and_group(writer, files, [NOW] * (FOLLOWERS + 1))
    for caller in [leader, *group]:
        caller.finish()
    if failing == 1:  # the leader's own record was not durable either
        failed = [leader, *group]
    else:
        failed = group
        assert leader.error is None
        assert leader.durable_on_return
    first = failed[0].error
    assert first is not None
    assert all(caller.error is first for caller in failed)
    assert files.fsyncs == failing  # nobody tried again
    writes = files.attempts
    with pytest.raises(AuditUnavailableError) as later:
        writer.append(event("later"), NOW)
    assert later.value is first
    with pytest.raises(AuditUnavailableError):
        writer.stage(event("later"), NOW)
    assert files.attempts == writes
    assert files.fsyncs == failing
    writer.close()
    assert files.fsyncs == failing  # a broken writer syncs nothing at close
    # the records are on the page cache; the next start finds a chain that verifies
    restarted = start_audit(audit, NOW)
    assert isinstance(restarted, Started), restarted
    restarted.writer.close()
    assert verify(audit).ok


@pytest.mark.parametrize("fsync_fails", [False, True], ids=["fsync-returns", "fsync-fails-too"])
def test_a_failed_write_mid_group_fails_the_group_and_writes_nothing_after(
    tmp_path: Path, fsync_fails: bool
) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    files.fail_write_at = 3  # the third record's write
    if fsync_fails:  # the fsync in flight when the write failed
        files.fail_fsync_at = 1
    writer = open_writer(audit, files)
    gate = files.hold[1] = threading.Event()
    leader = Caller(writer, files, "c0", NOW)
    leader.start()
    files.wait_for("the first fsync", lambda: files.fsyncs == 1)
    staged = Caller(writer, files, "c1", NOW)
    staged.start()  # written, waits for the fsync in flight
    wait_until(lambda: writer.stats.waiting == 1, TIMEOUT_S, "c1 to wait")
    failing = Caller(writer, files, "c2", NOW)
    failing.start()
    failing.finish()  # its write failed: it is answered at once
    after = Caller(writer, files, "c3", NOW)
    after.start()
    after.finish()
    assert files.attempts == 3
    gate.set()
    leader.finish()
    staged.finish()
    assert failing.error is not None
    assert "cannot write" in failing.error.message
    if fsync_fails:  # the first failure is the one every caller gets
        assert leader.error is failing.error
    else:  # its fsync returned: its record is durable, whatever happened since
        assert leader.error is None
        assert leader.durable_on_return
    # written, but not yet durable when the writer broke: never answered as recorded
    assert staged.error is failing.error
    assert after.error is failing.error
    assert files.fsyncs == 1
    assert files.writes == 2
    writer.close()
    assert files.fsyncs == 1
    assert seqs_by_file(audit) == {"2026-11-30.jsonl": [0, 1]}


# --- a day change -------------------------------------------------------------------


def test_a_day_change_syncs_the_old_files_records_before_the_new_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    writer = open_writer(audit, files)
    day_one = ["2026-11-30T23:59:59.000Z", "2026-11-30T23:59:59.100Z", "2026-11-30T23:59:59.200Z"]
    gate = files.hold[1] = threading.Event()
    callers = [Caller(writer, files, f"c{i}", now) for i, now in enumerate(day_one)]
    callers[0].start()
    files.wait_for("the first fsync", lambda: files.fsyncs == 1)
    for caller in callers[1:]:
        caller.start()
    wait_until(lambda: writer.stats.waiting == 2, TIMEOUT_S, "the group to wait")
    next_day = Caller(writer, files, "c3", "2026-12-01T00:00:00.100Z")
    next_day.start()  # must not switch files while the old one's fsync is in flight
    wait_until(lambda: writer.stats.waiting == 3, TIMEOUT_S, "the next day's record to wait")
    assert "create 2026-12-01.jsonl" not in files.log
    gate.set()
    for caller in [*callers, next_day]:
        caller.finish()
        assert caller.error is None
        assert caller.durable_on_return, caller.call
    created = files.log.index("create 2026-12-01.jsonl")
    synced = [i for i, entry in enumerate(files.log) if entry.startswith("fsync") and "2]" in entry]
    assert synced
    assert synced[0] < created  # the old file's records, synced before the switch
    assert files.log[created + 1] == "sync_dir"
    assert files.log[created + 2] == "write 3"  # nothing in the new file before its sync_dir
    assert files.log[-1].startswith("fsync")
    assert files.log[-1].endswith("[3]")
    writer.close()
    assert seqs_by_file(audit) == {"2026-11-30.jsonl": [0, 1, 2], "2026-12-01.jsonl": [3]}
    report = verify(audit)
    assert report.ok, report.failure
    assert report.clock_warnings == ()


@pytest.mark.parametrize("fail", [False, True], ids=["synced", "fsync-fails"])
def test_a_day_change_first_syncs_what_the_old_file_owes(tmp_path: Path, fail: bool) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    if fail:
        files.fail_fsync_at = 1
    writer = open_writer(audit, files)
    day_one = ["2026-11-30T23:59:59.000Z", "2026-11-30T23:59:59.100Z", "2026-11-30T23:59:59.200Z"]
    tickets = [writer.stage(event(f"c{i}"), now) for i, now in enumerate(day_one)]
    assert files.fsyncs == 0
    if fail:
        with pytest.raises(AuditUnavailableError) as failed:
            writer.stage(event("c3"), "2026-12-01T00:00:00.100Z")
        assert "create 2026-12-01.jsonl" not in files.log
        for ticket in tickets:  # staged, never durable: never answered as recorded
            with pytest.raises(AuditUnavailableError) as later:
                writer.wait_durable(ticket)
            assert later.value is failed.value
        writer.close()
        return
    next_day = writer.stage(event("c3"), "2026-12-01T00:00:00.100Z")
    assert files.log == [
        "create 2026-11-30.jsonl",
        "sync_dir",
        "write 0",
        "write 1",
        "write 2",
        "fsync 1 [0, 1, 2]",
        "create 2026-12-01.jsonl",
        "sync_dir",
        "write 3",
    ]
    for ticket in tickets:
        writer.wait_durable(ticket)  # already durable: no fsync of the new file for them
    assert files.fsyncs == 1
    writer.wait_durable(next_day)
    assert files.log[-1] == "fsync 2 [3]"
    writer.close()
    assert seqs_by_file(audit) == {"2026-11-30.jsonl": [0, 1, 2], "2026-12-01.jsonl": [3]}
    assert verify(audit).ok


# --- many threads -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_many_threads_with_slow_fsyncs_keep_one_chain_and_answer_only_durable_records(
    tmp_path: Path, seed: int
) -> None:
    """Staged in the order of their times (as the ledger stages), across midnight."""
    threads, per_thread = 8, 25
    audit = tmp_path / "audit"
    files = WatchedFiles()
    rng = random.Random(seed)  # noqa: S311 (fsync delays, not secrets)
    rng_lock = threading.Lock()

    def delay() -> float:
        with rng_lock:
            return rng.choice([0.0, 0.0, 0.0005, 0.001, 0.003])

    files.delay = delay
    writer = open_writer(audit, files)
    ordered = threading.Lock()  # the ledger's lock: the clock read and the stage under it
    clock = ["2026-11-30T23:59:59.900Z"]
    answered: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def client(index: int) -> None:
        try:
            for n in range(per_thread):
                with ordered:
                    clock[0] = now = add_ms(clock[0], 1)
                    ticket = writer.stage(event(f"t{index}-{n}"), now)
                writer.wait_durable(ticket)
                answered.append((ticket.seq, files.is_durable(ticket.seq)))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers)
    assert errors == []
    total = threads * per_thread
    assert sorted(seq for seq, _ in answered) == list(range(total))
    assert all(durable for _, durable in answered)
    stats = writer.stats
    writer.close()
    assert stats.records == total
    assert stats.fsyncs == files.fsyncs <= total
    by_file = seqs_by_file(audit)
    assert list(by_file) == ["2026-11-30.jsonl", "2026-12-01.jsonl"]
    assert [seq for seqs in by_file.values() for seq in seqs] == list(range(total))
    report = verify(audit)
    assert report.ok, report.failure
    assert report.records == total
    assert report.clock_warnings == ()


# --- the ledger ---------------------------------------------------------------------


def request(call: str) -> ToolRequest:
    return ToolRequest(session="chat-1", call=call, tool="read_file", arguments='{"path":"/x"}')


@pytest.mark.parametrize("fail", [False, True], ids=["synced", "fsync-fails"])
def test_the_ledger_lets_others_stage_while_a_record_syncs(tmp_path: Path, fail: bool) -> None:
    audit = tmp_path / "audit"
    files = WatchedFiles()
    if fail:
        files.fail_fsync_at = 1
    writer = open_writer(audit, files)
    ledger = Ledger(writer, SessionStore(tmp_path), lambda: NOW)
    gate = files.hold[1] = threading.Event()
    answers: dict[str, tuple[object, int | None, bool]] = {}

    def decide(call: str) -> None:
        decided = ledger.decide(request(call), GrantSet(grants=()))
        durable = decided.seq is not None and files.is_durable(decided.seq)
        answers[call] = (decided.outcome, decided.seq, durable)

    first = threading.Thread(target=decide, args=("c0",))
    first.start()
    files.wait_for("the first fsync", lambda: files.fsyncs == 1)
    second = threading.Thread(target=decide, args=("c1",))
    second.start()
    # staged while the first record's fsync is held: the ledger's lock is free
    files.wait_for("the second decision's write", lambda: files.writes == 2)
    wait_until(lambda: writer.stats.waiting == 1, TIMEOUT_S, "the second decision to wait")
    assert answers == {}  # nobody is answered before its record is durable
    gate.set()
    for thread in (first, second):
        thread.join(TIMEOUT_S)
        assert not thread.is_alive()
    if fail:
        unavailable = (Denial(DenyReason.AUDIT_UNAVAILABLE), None, False)
        assert answers == {"c0": unavailable, "c1": unavailable}
        assert ledger.poisoned
        later = ledger.decide(request("c2"), GrantSet(grants=()))
        assert later.outcome == Denial(DenyReason.AUDIT_UNAVAILABLE)
        assert files.attempts == 2
    else:
        no_grant = Denial(DenyReason.NO_GRANT)
        assert answers == {"c0": (no_grant, 0, True), "c1": (no_grant, 1, True)}
        assert files.fsyncs == 2
        assert not ledger.poisoned
    writer.close()
