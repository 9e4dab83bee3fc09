"""ChainVerifier against logs built here line by line (real hashes, no files).

The same damage is checked through the real writer, startup and bxctl in
tests/brokerd and tests/bxctl; this file covers every rule on its own.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.chain_report import ChainReport, Location
from boxmaker.core.audit.records import (
    AcceptedBreakEvent,
    ApprovalAnswer,
    ApprovalEvent,
    AuditRecord,
    DecisionEvent,
    RecoveryEvent,
    ResultEvent,
    ResultStatus,
    encode_record,
)
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DecisionRecord, DeniedRecord
from boxmaker.core.grants.decisions import DenyReason as R
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass

D1, D2, D3 = "2026-11-29.jsonl", "2026-11-30.jsonl", "2026-12-01.jsonl"
U64_MAX = 2**64 - 1


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def decision(call: str, outcome: DecisionRecord | None = None) -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=call,
        tool="read_file",
        arguments='{"path":"/x"}',
        outcome=outcome or AllowedRecord(),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def approval(call: str, seq: int, approved: bool) -> ApprovalEvent:
    return ApprovalEvent(
        session="chat-1",
        call=call,
        decision=seq,
        answer=ApprovalAnswer.APPROVED if approved else ApprovalAnswer.REFUSED,
        by="bxctl",
        outcome=AllowedRecord() if approved else DeniedRecord(reason=R.APPROVAL_REFUSED),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def result(call: str, seq: int) -> ResultEvent:
    return ResultEvent.model_validate(
        {
            "session": "chat-1",
            "call": call,
            "decision": seq,
            "status": ResultStatus.RESULT,
            "class": DataClass.PRIVATE,
            "untrusted": False,
            "truncated": False,
            "bytes": 3,
            "sha256": sha(b"abc"),
            "taint_after": DataClass.PRIVATE,
        }
    )


class Log:
    """Lines per file, chained the way the writer chains them."""

    def __init__(self) -> None:
        self.files: dict[str, list[bytes]] = {}
        self.seq = 0
        self.prev = ZERO_HASH

    def add(self, file: str, event: Any, time: str = "", *, seq: int | None = None) -> bytes:
        time = time or f"{file[:10]}T12:00:{self.seq % 60:02d}.000Z"
        record = AuditRecord(
            seq=self.seq if seq is None else seq, time=time, prev=self.prev, event=event
        )
        line = encode_record(record)
        self.raw(file, line + b"\n")
        self.prev = sha(line)
        self.seq = record.seq + 1
        return line

    def raw(self, file: str, data: bytes) -> None:
        self.files.setdefault(file, []).append(data)

    def calls(self, file: str, n: int) -> None:
        for i in range(n):
            self.add(file, decision(f"c{self.seq}-{i}", DeniedRecord(reason=R.NO_GRANT)))

    def content(self) -> dict[str, bytes]:
        return {name: b"".join(lines) for name, lines in sorted(self.files.items())}


def verify(files: dict[str, bytes], resume: tuple[int, str] | None = None) -> ChainReport:
    """The report, the same whichever way the files are fed: whole, line by line, or in runs.

    `feed` accepts runs of lines whole when it can (`ChainVerifier.lines`); every
    test here also checks that this never changes a report.
    """

    def fresh(run_size: int = ChainVerifier.run_size) -> ChainVerifier:
        verifier = ChainVerifier() if resume is None else ChainVerifier.resume(*resume)
        verifier.run_size = run_size
        return verifier

    whole = fresh()
    for name, content in sorted(files.items()):
        whole.feed(name, content)
    report = whole.finish()
    for run_size in (2, 3):
        runs = fresh(run_size)
        for name, content in sorted(files.items()):
            runs.feed(name, content)
        assert runs.finish() == report, run_size
    by_line = fresh()
    for name, content in sorted(files.items()):
        by_line.file(name)
        *lines, last = content.split(b"\n")
        for line in lines:
            by_line.line(line, True)
        if last:
            by_line.line(last, False)
    assert by_line.finish() == report
    return report


def where(report: ChainReport) -> str:
    assert report.failure is not None, report
    return f"{report.failure.file}:{report.failure.line}"


def clean_log() -> Log:
    log = Log()
    log.calls(D1, 5)
    log.calls(D2, 5)
    return log


def test_a_clean_log_verifies() -> None:
    log = clean_log()
    report = verify(log.content())
    assert report.ok
    assert (report.records, report.next_seq, report.head) == (10, 10, log.prev)
    assert report.torn_tail is None
    assert report.clock_warnings == report.recoveries == report.accepted_breaks == ()


def test_an_empty_log_verifies_with_no_head() -> None:
    report = verify({})
    assert (report.ok, report.records, report.head, report.next_seq) == (True, 0, None, 0)


def test_line_by_line_is_feed() -> None:
    files = clean_log().content()
    verifier = ChainVerifier()
    for name, content in files.items():
        verifier.file(name)
        for line in content.splitlines():
            verifier.line(line, True)
    assert verifier.finish() == verify(files)


# --- the tampering suite -------------------------------------------------------


def _lines(files: dict[str, bytes], name: str) -> list[bytes]:
    return files[name].splitlines(keepends=True)


def _set(files: dict[str, bytes], name: str, lines: list[bytes]) -> dict[str, bytes]:
    return {**files, name: b"".join(lines)}


def changed_byte(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    lines = _lines(files, name)
    lines[2] = lines[2].replace(b'"path', b'"Path')  # still parses: the next line fails
    return _set(files, name, lines)


def broken_json(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    lines = _lines(files, name)
    lines[2] = lines[2].replace(b'"event"', b'"event!', 1)
    return _set(files, name, lines)


def deleted_line(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    lines = _lines(files, name)
    del lines[2]
    return _set(files, name, lines)


def swapped(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    lines = _lines(files, name)
    lines[2], lines[3] = lines[3], lines[2]
    return _set(files, name, lines)


def cut_short(files: dict[str, bytes], name: str) -> dict[str, bytes]:
    lines = _lines(files, name)
    lines[2] = lines[2][:40] + b"\n"
    return _set(files, name, lines)


# (damage, the line in the damaged file that fails)
TAMPERING = {
    "changed-byte": (changed_byte, 4),
    "changed-byte-breaking-json": (broken_json, 3),
    "deleted-line": (deleted_line, 3),
    "swapped-lines": (swapped, 3),
    "cut-short": (cut_short, 3),
}


@pytest.mark.parametrize("name", [D1, D2])
@pytest.mark.parametrize(("damage", "line"), TAMPERING.values(), ids=TAMPERING.keys())
def test_tampering_fails_at_its_file_and_line(damage: Any, line: int, name: str) -> None:
    report = verify(damage(clean_log().content(), name))
    assert where(report) == f"{name}:{line}"


def test_a_seq_gap_fails_at_the_line() -> None:
    log = clean_log()
    log.seq += 1
    log.calls(D2, 2)
    report = verify(log.content())
    assert where(report) == f"{D2}:6"
    assert report.failure is not None
    assert report.failure.what == "seq is 11, expected 10"


def test_a_file_that_does_not_chain_fails_at_its_line_1() -> None:
    log = clean_log()
    log.prev = sha(b"something else")
    log.calls(D3, 2)
    report = verify(log.content())
    assert where(report) == f"{D3}:1"
    assert report.failure is not None
    assert report.failure.what == "prev is not the hash of the line before"


def test_a_missing_file_fails_at_the_next_files_line_1() -> None:
    files = clean_log().content()
    del files[D1]
    assert where(verify(files)) == f"{D2}:1"


def test_a_middle_line_without_newline_fails() -> None:
    log = clean_log()
    lines = _lines(log.content(), D1)
    files = {D1: b"".join(lines[:2]) + lines[2][:-1], D2: log.content()[D2]}
    assert where(verify(files)) == f"{D1}:3"


# --- torn tails and recovery ---------------------------------------------------


def test_a_torn_tail_of_complete_json_is_reported_with_its_recovery_values() -> None:
    log = clean_log()
    head, seq = log.prev, log.seq
    line = log.add(D2, decision("late"))
    files = log.content()
    files[D2] = files[D2][:-1]
    report = verify(files)
    assert report.ok
    assert report.torn_tail is not None
    torn = report.torn_tail
    assert (torn.at, torn.has_newline) == (Location(D2, 6), False)
    assert (torn.bytes, torn.sha256) == (len(line), sha(line))
    assert (torn.recovery_prev, torn.recovery_seq) == (head, seq)
    assert (report.records, report.head, report.next_seq) == (10, head, seq)


def test_an_unparseable_last_line_with_its_newline_is_a_torn_tail() -> None:
    log = clean_log()
    log.raw(D2, b'{"seq":10,"ti\n')
    report = verify(log.content())
    assert report.ok
    assert report.torn_tail is not None
    assert report.torn_tail.has_newline


def recovered_log(torn: bytes) -> tuple[Log, Location]:
    """A log whose line 6 of D2 is `torn`, followed by its Recovery, then more calls."""
    log = clean_log()
    log.raw(D2, torn + b"\n")
    log.add(D2, RecoveryEvent(torn_bytes=len(torn), torn_sha256=sha(torn)))
    log.calls(D2, 2)
    return log, Location(D2, 6)


@pytest.mark.parametrize(
    "torn",
    [b'{"seq":10,"ti', b"", None],
    ids=["partial", "empty", "complete-json"],
)
def test_a_recovered_line_is_not_a_record_and_the_chain_goes_on(torn: bytes | None) -> None:
    if torn is None:
        probe = clean_log()
        torn = probe.add(D2, decision("never-acted-on"))
    log, at = recovered_log(torn)
    report = verify(log.content())
    assert report.ok, report.failure
    assert report.recoveries == (at,)
    assert report.records == 13
    assert report.next_seq == 13  # the Recovery reused the torn line's seq


def test_a_recovery_whose_hash_does_not_match_fails_at_the_torn_line() -> None:
    log = clean_log()
    log.raw(D2, b'{"seq":10,"ti\n')
    log.add(D2, RecoveryEvent(torn_bytes=13, torn_sha256=sha(b"other")))
    assert where(verify(log.content())) == f"{D2}:6"


def test_a_recovery_whose_length_does_not_match_fails_at_the_torn_line() -> None:
    torn = b'{"seq":10,"ti'
    log = clean_log()
    log.raw(D2, torn + b"\n")
    log.add(D2, RecoveryEvent(torn_bytes=len(torn) + 1, torn_sha256=sha(torn)))
    assert where(verify(log.content())) == f"{D2}:6"


def test_a_recovery_that_describes_no_line_fails_at_the_recovery() -> None:
    log = clean_log()
    log.add(D2, RecoveryEvent(torn_bytes=3, torn_sha256=sha(b"abc")))
    log.calls(D2, 1)
    report = verify(log.content())
    assert where(report) == f"{D2}:6"
    assert report.failure is not None
    assert report.failure.what == "a recovery record that describes no line"


def test_a_line_no_recovery_describes_followed_by_a_torn_recovery_fails() -> None:
    log = clean_log()
    log.raw(D2, b'{"seq":10,"ti\n')
    log.raw(D2, b'{"seq":10,"time":"2026-11-30T12:0')
    report = verify(log.content())
    assert where(report) == f"{D2}:6"
    assert report.failure is not None
    assert report.failure.tail_torn


def test_a_torn_first_line_of_a_file_is_a_torn_tail() -> None:
    log = clean_log()
    log.raw(D3, b'{"seq":10')
    report = verify(log.content())
    assert report.ok
    assert report.torn_tail is not None
    assert report.torn_tail.at == Location(D3, 1)


def test_a_line_torn_on_one_day_recovered_the_next_stays_in_its_file() -> None:
    log = clean_log()
    torn = b'{"seq":10,"time"'
    log.raw(D2, torn + b"\n")
    log.add(
        D2, RecoveryEvent(torn_bytes=len(torn), torn_sha256=sha(torn)), "2026-12-01T08:00:00.000Z"
    )
    log.calls(D3, 1)
    report = verify(log.content())
    assert report.ok
    assert report.recoveries == (Location(D2, 6),)


def test_an_empty_latest_file_is_nothing() -> None:
    files = clean_log().content()
    files[D3] = b""
    report = verify(files)
    assert report.ok
    assert report.torn_tail is None
    assert report.records == 10


# --- accepted breaks -----------------------------------------------------------


def broken_log() -> tuple[Log, dict[str, Any]]:
    """D1 lines 1-5 fine; D2 line 3 damaged (a changed seq); the break to append."""
    log = clean_log()
    files = log.content()
    lines = _lines(files, D2)
    lines[2] = lines[2].replace(b'"seq":7', b'"seq":70')
    log.files[D2] = lines
    good = sha(lines[1][:-1])
    # failure at D2:3 (global line 8), expected seq 7; the break is line 11: 7 + 3
    return log, {"file": D2, "line": 3, "last_good": good, "seq": 10, "prev": log.prev}


def _append_break(log: Log, values: dict[str, Any], **change: Any) -> None:
    values = {**values, **change}
    log.prev = values["prev"]
    event = AcceptedBreakEvent(
        file=values["file"], line=values["line"], last_good=values["last_good"]
    )
    log.add(D2, event, seq=values["seq"])


def test_the_failure_carries_what_its_break_needs() -> None:
    log, values = broken_log()
    report = verify(log.content())
    assert report.failure is not None
    f = report.failure
    assert (f.file, f.line, f.last_good) == (values["file"], values["line"], values["last_good"])
    assert (f.break_seq, f.break_prev, f.tail_torn) == (values["seq"], values["prev"], False)


def test_an_accepted_break_is_reported_and_the_chain_goes_on() -> None:
    log, values = broken_log()
    _append_break(log, values)
    log.calls(D2, 2)
    report = verify(log.content())
    assert report.ok, report.failure
    assert report.accepted_breaks == (Location(D2, 6),)
    assert report.next_seq == 13


@pytest.mark.parametrize(
    "change",
    [
        {"line": 4},
        {"file": D1},
        {"last_good": ZERO_HASH},
        {"prev": ZERO_HASH},
        {"seq": 11},
        {"seq": 7},
    ],
    ids=["wrong-line", "wrong-file", "wrong-last-good", "wrong-prev", "wrong-seq", "seq-unmoved"],
)
def test_a_wrong_break_is_not_accepted(change: dict[str, Any]) -> None:
    log, values = broken_log()
    _append_break(log, values, **change)
    report = verify(log.content())
    assert where(report) == f"{D2}:3"


def test_a_break_with_no_failure_fails() -> None:
    log = clean_log()
    log.add(D2, AcceptedBreakEvent(file=D1, line=1, last_good=ZERO_HASH))
    report = verify(log.content())
    assert where(report) == f"{D2}:6"


def test_one_break_covers_two_failures() -> None:
    log, values = broken_log()
    lines = log.files[D2]
    lines[3] = b"garbage\n"  # a second failure, inside the region
    _append_break(log, values)
    assert verify(log.content()).ok


def test_a_u64_max_seq_in_the_region_does_not_move_the_break() -> None:
    log, values = broken_log()
    lines = log.files[D2]
    lines[3] = lines[3].replace(b'"seq":8', b'"seq":18446744073709551615')
    _append_break(log, values)
    assert verify(log.content()).ok


def test_a_break_for_a_torn_region_tail_counts_the_torn_line() -> None:
    log, _ = broken_log()
    log.raw(D2, b'{"seq":')
    report = verify(log.content())
    assert report.failure is not None
    assert report.failure.tail_torn
    assert report.failure.break_seq == 11
    assert report.failure.break_prev == sha(b'{"seq":')


def test_a_resumed_verifier_accepts_a_break_from_an_earlier_file_on_prev_alone() -> None:
    log = clean_log()
    old = log.content()
    lines = _lines(old, D1)
    lines[1] = b"damage\n"
    log.files[D1] = lines
    full = verify(log.content())
    assert where(full) == f"{D1}:2"
    f = full.failure
    assert f is not None
    _append_break(
        log,
        {
            "file": f.file,
            "line": f.line,
            "last_good": f.last_good,
            "seq": f.break_seq,
            "prev": f.break_prev,
        },
    )
    files = log.content()
    assert verify(files).ok
    last_of_d1 = _lines(files, D1)[-1][:-1]
    resumed = verify({D2: files[D2]}, (5, sha(last_of_d1)))
    assert resumed.ok
    assert resumed.accepted_breaks == (Location(D2, 6),)


def test_a_resumed_verifier_in_a_region_is_cleared_by_an_earlier_files_break() -> None:
    log = clean_log()
    lines = log.files[D1]
    lines[1] = b"damage\n"
    lines = log.files[D2]
    lines[2] = b"more damage\n"
    full = verify(log.content())
    f = full.failure
    assert f is not None
    assert where(full) == f"{D1}:2"
    _append_break(
        log,
        {
            "file": f.file,
            "line": f.line,
            "last_good": f.last_good,
            "seq": f.break_seq,
            "prev": f.break_prev,
        },
    )
    files = log.content()
    assert verify(files).ok
    last_of_d1 = _lines(files, D1)[-1][:-1]
    assert verify({D2: files[D2]}, (5, sha(last_of_d1))).ok


# --- reports that are not failures ---------------------------------------------


def test_unfinished_and_abandoned() -> None:
    log = Log()
    log.add(D2, decision("ran"))  # 0: allowed, no result
    log.add(D2, decision("asked", AskRecord()))  # 1: ask, no approval
    log.add(D2, decision("done"))  # 2
    log.add(D2, result("done", 2))  # 3
    log.add(D2, decision("approved", AskRecord()))  # 4
    log.add(D2, approval("approved", 4, True))  # 5: now allowed, no result
    log.add(D2, decision("refused", AskRecord()))  # 6
    log.add(D2, approval("refused", 6, False))  # 7
    log.add(D2, decision("denied", DeniedRecord(reason=R.NO_GRANT)))  # 8
    report = verify(log.content())
    assert report.ok
    assert report.abandoned == (1,)
    assert report.unfinished == (0, 4)


def test_a_clock_stepped_back_is_one_warning() -> None:
    log = Log()
    log.add(D2, decision("a"), "2026-11-30T23:59:59.000Z")
    log.add(D3, decision("b"), "2026-12-01T00:00:05.000Z")
    log.add(D3, decision("c"), "2026-11-30T23:59:58.000Z")
    log.add(D3, decision("d"), "2026-11-30T23:59:59.500Z")
    report = verify(log.content())
    assert report.ok
    assert report.clock_warnings == (Location(D3, 2),)


# --- crash-shaped ----------------------------------------------------------------


def small_log() -> dict[str, bytes]:
    log = Log()
    log.add(D1, decision("a"))
    log.add(D1, result("a", 0))
    log.add(D2, decision("b", AskRecord()))
    return log.content()


def test_every_cut_is_clean_torn_or_a_failure_never_a_crash() -> None:
    files = small_log()
    whole = files[D1] + files[D2]
    ends = [i + 1 for i, b in enumerate(whole) if b == ord("\n")]
    for cut in range(len(whole) + 1):
        part = whole[:cut]
        split = len(files[D1])
        cut_files = {D1: part[:split], D2: part[split:]} if cut > split else {D1: part}
        report = verify(cut_files)
        assert report.ok, (cut, report.failure)
        if cut in ends or cut == 0:
            assert report.torn_tail is None, cut
        else:
            assert report.torn_tail is not None, cut
            assert report.records == sum(1 for e in ends if e <= cut)


def test_every_flipped_bit_is_found() -> None:
    files = small_log()
    clean = verify(files)
    for name in files:
        content = files[name]
        for i in range(len(content)):
            for bit in range(8):
                flipped = bytearray(content)
                flipped[i] ^= 1 << bit
                report = verify({**files, name: bytes(flipped)})
                found = (
                    report.failure is not None
                    or report.torn_tail is not None
                    or report.head != clean.head
                )
                assert found, (name, i, bit)


# --- runs: the fast way through a clean log ----------------------------------------


def busy_log(records: int) -> Log:
    log = Log()
    for i in range(0, records - 2, 3):
        log.add(D1, decision(f"c{i}"))
        log.add(D1, result(f"c{i}", log.seq - 1))
        log.add(D1, decision(f"a{i}", AskRecord()))
    return log


def test_a_clean_log_is_accepted_in_runs_without_a_line_by_line_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = busy_log(300).content()
    expected = verify(files)
    stepped: list[bytes] = []
    original = ChainVerifier.line

    def counted(self: ChainVerifier, data: bytes, has_newline: bool) -> None:
        stepped.append(data)
        original(self, data, has_newline)

    monkeypatch.setattr(ChainVerifier, "line", counted)
    verifier = ChainVerifier()
    verifier.run_size = 64
    for name, content in files.items():
        verifier.feed(name, content)
    assert verifier.finish() == expected
    assert stepped == []  # every line went through a run (the last one is held, not stepped)
    assert expected.records == 300
    assert len(expected.abandoned) == 100


def test_a_record_only_the_models_take_breaks_a_run_but_not_the_chain() -> None:
    log = busy_log(30)
    big = result("c0", 0).model_copy(update={"bytes": 2**64 - 1})  # over msgspec's int64
    log.add(D1, big)
    for i in range(10):
        log.add(D1, decision(f"after{i}"))
    report = verify(log.content())
    assert report.ok, report.failure
    assert report.records == 41
