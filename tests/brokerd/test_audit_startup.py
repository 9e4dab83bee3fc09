"""brokerd's audit startup on real directories written by the real writer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from boxmaker.brokerd.audit_startup import Refused, Started, audit_files, start_audit
from boxmaker.brokerd.audit_writer import AuditLock
from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport, Location
from boxmaker.core.audit.records import DecisionEvent, decode_record
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.labels import DataClass

D1, D2 = "2026-11-30.jsonl", "2026-12-01.jsonl"
LATER = "2026-12-02T09:00:00.000Z"


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


def write_log(audit: Path, per_day: int = 5) -> None:
    """`per_day` records on 2026-11-30 and on 2026-12-01, by the real writer."""
    started = start_audit(audit, "2026-11-30T08:00:00.000Z")
    assert isinstance(started, Started)
    for day in ("2026-11-30", "2026-12-01"):
        for i in range(per_day):
            started.writer.append(event(f"{day}-{i}"), f"{day}T08:00:0{i}.000Z")
    started.writer.close()


def verify(audit: Path) -> ChainReport:
    verifier = ChainVerifier()
    for name in audit_files(audit):
        verifier.feed(name, (audit / name).read_bytes())
    return verifier.finish()


def start(audit: Path, accept_break: bool = False) -> Started | Refused:
    outcome = start_audit(audit, LATER, accept_break=accept_break)
    if isinstance(outcome, Started):
        outcome.writer.close()
    return outcome


def edit(path: Path, change: Callable[[list[bytes]], object]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    change(lines)
    path.write_bytes(b"".join(lines))


def _changed(lines: list[bytes]) -> None:
    lines[2] = lines[2].replace(b'"path', b'"Path')


def _deleted(lines: list[bytes]) -> None:
    del lines[2]


def _swapped(lines: list[bytes]) -> None:
    lines[2], lines[3] = lines[3], lines[2]


def _seq_gap(lines: list[bytes]) -> None:
    lines[2] = lines[2].replace(b'"seq":', b'"seq":9', 1)


def _cut_short(lines: list[bytes]) -> None:
    lines[2] = lines[2][:50] + b"\n"


TAMPERING: dict[str, tuple[Callable[[list[bytes]], None], int]] = {
    "changed-byte": (_changed, 4),
    "deleted-line": (_deleted, 3),
    "swapped-lines": (_swapped, 3),
    "seq-gap": (_seq_gap, 3),
    "cut-short": (_cut_short, 3),
}


@pytest.mark.parametrize(("damage", "line"), TAMPERING.values(), ids=TAMPERING.keys())
def test_damage_in_the_latest_file_stops_a_plain_start(
    tmp_path: Path, damage: Callable[[list[bytes]], None], line: int
) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    edit(audit / D2, damage)
    before = {n: (audit / n).read_bytes() for n in audit_files(audit)}
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert outcome.status == 1
    assert outcome.lines[0].startswith(f"{D2}:{line}: ")
    assert outcome.lines[1] == "see runbook.md#audit-chain-broken"
    assert {n: (audit / n).read_bytes() for n in audit_files(audit)} == before
    AuditLock.acquire(audit).release()  # a refused start let go of the lock


def test_a_latest_file_that_does_not_chain_stops_a_plain_start(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    edit(audit / D1, lambda lines: lines.pop())
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert outcome.lines[0].startswith(f"{D2}:1: ")


def test_a_held_lock_refuses_with_its_pointer(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    lock = AuditLock.acquire(audit)
    outcome = start(audit)
    lock.release()
    assert outcome == Refused(
        1, ("brokerd is already running", "see runbook.md#brokerd-already-running")
    )


def test_accept_break_with_nothing_to_accept_writes_nothing(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    with (audit / D2).open("ab") as f:
        f.write(b'{"seq":10')  # a torn tail: not even this is recovered
    before = (audit / D2).read_bytes()
    assert start(audit, accept_break=True) == Refused(2, ("nothing to accept",))
    assert (audit / D2).read_bytes() == before


@pytest.mark.parametrize("complete_json", [True, False], ids=["complete-json", "partial"])
def test_a_torn_tail_is_recovered_and_then_verifies(tmp_path: Path, complete_json: bool) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    lines = (audit / D2).read_bytes().splitlines(keepends=True)
    # a record cut exactly before its newline, or in the middle
    torn = lines[-1][:-1] if complete_json else lines[-1][:30]
    (audit / D2).write_bytes(b"".join(lines[:-1]) + torn)
    outcome = start(audit)
    assert isinstance(outcome, Started)
    assert outcome.lines == ("audit: recovered a torn final line", "see runbook.md#audit-recovered")
    report = verify(audit)
    assert report.ok
    assert report.recoveries == (Location(D2, 5),)
    assert report.torn_tail is None
    assert start(audit).lines == ()  # recovered once only


def test_an_unparseable_last_line_with_newline_gets_no_second_newline(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    with (audit / D2).open("ab") as f:
        f.write(b"{garbage\n")
    assert isinstance(start(audit), Started)
    lines = (audit / D2).read_bytes().splitlines()
    assert lines[-2] == b"{garbage"
    assert decode_record(lines[-1]).event.type == "recovery"
    assert verify(audit).ok


def test_a_torn_first_line_and_an_empty_latest_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    (audit / "2026-12-02.jsonl").write_bytes(b"")
    assert start(audit).lines == ()  # an empty latest file needs nothing
    (audit / "2026-12-02.jsonl").write_bytes(b'{"seq":10,"ti')
    outcome = start(audit)
    assert isinstance(outcome, Started)
    assert outcome.lines[0] == "audit: recovered a torn final line"
    report = verify(audit)
    assert report.ok
    assert report.recoveries == (Location("2026-12-02.jsonl", 1),)


def test_a_line_torn_one_day_is_recovered_the_next_in_its_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    with (audit / D2).open("ab") as f:
        f.write(b'{"seq":10,"t')
    outcome = start_audit(audit, "2026-12-09T00:00:00.000Z")
    assert isinstance(outcome, Started)
    outcome.writer.append(event("after"), "2026-12-09T00:00:01.000Z")
    outcome.writer.close()
    assert audit_files(audit) == [D1, D2, "2026-12-09.jsonl"]
    assert decode_record((audit / D2).read_bytes().splitlines()[-1]).event.type == "recovery"
    assert verify(audit).ok


def test_a_break_in_an_older_file(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    edit(audit / D1, _changed)  # fails at D1:4, which a plain start never reads
    assert start(audit).lines == ()
    assert verify(audit).failure is not None
    outcome = start(audit, accept_break=True)
    assert isinstance(outcome, Started)
    assert outcome.lines == (
        f"audit: accepted the break at {D1}:4: prev is not the hash of the line before",
    )
    report = verify(audit)
    assert report.ok
    assert report.accepted_breaks == (Location(D2, 6),)
    again = start(audit)  # the next plain start, through resume
    assert isinstance(again, Started)
    assert again.lines == ()
    assert start(audit, accept_break=True) == Refused(2, ("nothing to accept",))


def test_a_break_over_a_torn_tail_ends_the_line_first(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    edit(audit / D2, _deleted)
    with (audit / D2).open("ab") as f:
        f.write(b'{"seq":1')
    outcome = start(audit, accept_break=True)
    assert isinstance(outcome, Started)
    assert verify(audit).ok
    assert (audit / D2).read_bytes().splitlines()[-2] == b'{"seq":1'


def test_a_crash_while_writing_the_recovery_is_a_chain_failure(tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    with (audit / D2).open("ab") as f:
        f.write(b'{"seq":10,"t\n{"seq":10,"time":"2026')  # torn line, then a torn Recovery
    outcome = start(audit)
    assert isinstance(outcome, Refused)
    assert outcome.lines[0].startswith(f"{D2}:6: ")
    assert isinstance(start(audit, accept_break=True), Started)
    assert verify(audit).ok


def test_a_previous_file_whose_last_line_does_not_parse_means_the_whole_log(
    tmp_path: Path,
) -> None:
    audit = tmp_path / "audit"
    write_log(audit)
    edit(audit / D1, lambda lines: lines.__setitem__(-1, b"not a record\n"))
    outcome = start(audit)  # not a deadlock on the previous file's last line:
    assert isinstance(outcome, Refused)  # the whole log is read, and fails there
    assert outcome.lines[0].startswith(f"{D1}:5: ")
    assert isinstance(start(audit, accept_break=True), Started)
    assert verify(audit).ok
    assert start(audit).lines == ()


def test_every_cut_of_the_latest_file_recovers_or_fails_at_its_line(tmp_path: Path) -> None:
    source = tmp_path / "source"
    write_log(source, per_day=2)
    whole = (source / D2).read_bytes()
    ends = [i + 1 for i, b in enumerate(whole) if b == ord("\n")]
    for cut in range(len(whole) + 1):
        audit = tmp_path / f"cut{cut}" / "audit"
        audit.mkdir(parents=True)
        (audit / D1).write_bytes((source / D1).read_bytes())
        (audit / D2).write_bytes(whole[:cut])
        outcome = start(audit)
        assert isinstance(outcome, Started), (cut, outcome)
        torn = cut not in ends and cut != 0
        assert outcome.lines == (
            ("audit: recovered a torn final line", "see runbook.md#audit-recovered") if torn else ()
        )
        report = verify(audit)
        assert report.ok, cut
        assert report.torn_tail is None, cut
