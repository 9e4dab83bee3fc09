"""core.checkpoints (lines, checkpoint.json, what is wrong) and ChainVerifier.watch."""

from __future__ import annotations

import hashlib

import pytest

from boxmaker.core.audit_records import DecisionEvent, RecoveryEvent, encode_line
from boxmaker.core.chain import ChainVerifier
from boxmaker.core.checkpoints import (
    Checkpoint,
    CheckpointLine,
    Seal,
    decode_state,
    encode_state,
    format_line,
    parse_head,
    parse_line,
    problem,
    signed_payload,
)
from boxmaker.core.decisions import DeniedRecord, DenyReason
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass

H = "ab" * 32
T = "2026-11-30T12:05:00.000Z"
SIG = "A" * 86 + "=="


def test_lines_round_trip() -> None:
    plain = Checkpoint(12, H, T)
    assert format_line(plain) == f"12:{H} {T}"
    assert parse_line(format_line(plain)) == CheckpointLine(plain, None)
    seal = Seal("0123456789abcdef", SIG)
    sealed = format_line(plain, seal)
    assert sealed == f"12:{H} {T} key=0123456789abcdef sig={SIG}"
    assert parse_line(sealed) == CheckpointLine(plain, seal)
    assert signed_payload(plain) == f"boxmaker audit checkpoint v1\n12:{H} {T}".encode()


@pytest.mark.parametrize("text", ["", "   ", "# a note", "  # indented note"])
def test_blank_lines_and_notes_are_skipped(text: str) -> None:
    assert parse_line(text) is None


@pytest.mark.parametrize(
    "text",
    [
        f"12:{H}",
        f"012:{H} {T}",
        f"12:{H.upper()} {T}",
        f"12:{H} 2026-11-30",
        f"12:{H} {T} key=0123456789abcdef",
        f"12:{H} {T} key=xyz sig={SIG}",
        f"12:{H} {T} key=0123456789abcdef sig=short",
        f"12:{H} {T} sig={SIG} key=0123456789abcdef",
    ],
)
def test_what_is_not_a_line_raises(text: str) -> None:
    with pytest.raises(ValueError, match="not"):
        parse_line(text)


def test_expect_head() -> None:
    assert parse_head(f"0:{H}") == Checkpoint(0, H)
    with pytest.raises(ValueError, match="SEQ:HASH"):
        parse_head(f"-1:{H}")


@pytest.mark.parametrize(
    ("heads", "last_seq", "expected"),
    [
        ({5: H}, 9, None),
        ({5: "cd" * 32}, 9, f"record 5 differs: its hash is {'cd' * 32}, the checkpoint says {H}"),
        ({}, 3, "record 5 is missing: the log ends at seq 3"),
        ({}, None, "record 5 is missing: the log has no records"),
        ({}, 9, "record 5 is missing: no record that verified has that seq"),
    ],
    ids=["holds", "differs", "cut", "empty", "not-verified"],
)
def test_problem(heads: dict[int, str], last_seq: int | None, expected: str | None) -> None:
    assert problem(Checkpoint(5, H, T), heads, last_seq) == expected


def test_state_round_trips_and_refuses_what_is_not_one() -> None:
    kept = Checkpoint(7, H, T)
    assert encode_state(kept) == f'{{"seq":7,"head":"{H}","time":"{T}"}}\n'.encode()
    assert decode_state(encode_state(kept)) == kept
    for bad in (b"", b"[]", b'{"seq":7}', b'{"seq":-1,"head":"x","time":"y"}'):
        with pytest.raises(ValueError, match=r"not|expected"):
            decode_state(bad)


def _event(i: int) -> DecisionEvent:
    return DecisionEvent(
        session="chat-1",
        call=f"c{i}",
        tool="read_file",
        arguments='{"path":"/x"}',
        outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )


def _log(count: int) -> list[bytes]:
    lines, prev = [], ZERO_HASH
    for i in range(count):
        line = encode_line(i, T, prev, _event(i))
        lines.append(line)
        prev = hashlib.sha256(line).hexdigest()
    return lines


@pytest.mark.parametrize("run_size", [2048, 3], ids=["runs", "small-runs"])
def test_watch_reports_the_hash_of_each_watched_record(run_size: int) -> None:
    lines = _log(10)
    verifier = ChainVerifier()
    verifier.run_size = run_size
    verifier.watch((0, 4, 9, 42))
    verifier.feed("2026-11-30.jsonl", b"".join(line + b"\n" for line in lines))
    report = verifier.finish()
    digest = [hashlib.sha256(line).hexdigest() for line in lines]
    assert report.heads == ((0, digest[0]), (4, digest[4]), (9, digest[9]))
    assert report.head_of()[9] == report.head
    assert report.last_seq == 9


def test_a_recovered_line_is_not_a_record_its_recovery_is() -> None:
    lines = _log(3)
    torn = lines[2][:40]
    recovery = encode_line(
        2,
        T,
        hashlib.sha256(lines[1]).hexdigest(),
        RecoveryEvent(torn_bytes=len(torn), torn_sha256=hashlib.sha256(torn).hexdigest()),
    )
    verifier = ChainVerifier()
    verifier.watch((2,))
    verifier.feed("2026-11-30.jsonl", b"".join(x + b"\n" for x in (*lines[:2], torn, recovery)))
    report = verifier.finish()
    assert report.heads == ((2, hashlib.sha256(recovery).hexdigest()),)
