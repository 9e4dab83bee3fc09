"""core.audit.checkpoints (lines, checkpoint.json, what is wrong) and ChainVerifier.watch."""

from __future__ import annotations

import hashlib

import pytest

from boxmaker.core.audit.chain import ChainVerifier
from boxmaker.core.audit.checkpoints import (
    GENESIS,
    Checkpoint,
    CheckpointLine,
    Seal,
    chain_problems,
    decode_head,
    decode_state,
    encode_head,
    encode_state,
    format_line,
    line_hash,
    parse_head,
    parse_line,
    problem,
    rollback_problem,
    signed_payload,
)
from boxmaker.core.audit.records import DecisionEvent, RecoveryEvent, encode_line
from boxmaker.core.grants.decisions import DeniedRecord, DenyReason
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass

H = "ab" * 32
T = "2026-11-30T12:05:00.000Z"
SIG = "A" * 86 + "=="
P = "cd" * 32
KEY = "0123456789abcdef"


def test_lines_round_trip() -> None:
    plain = Checkpoint(12, H, T)
    assert format_line(plain) == f"12:{H} {T}"
    assert parse_line(format_line(plain)) == CheckpointLine(plain, None)
    seal = Seal(P, KEY, SIG)
    sealed = format_line(plain, seal)
    assert sealed == f"12:{H} {T} prev={P} key={KEY} sig={SIG}"
    assert parse_line(sealed) == CheckpointLine(plain, seal)
    assert signed_payload(plain, P) == f"boxmaker audit checkpoint v2\n12:{H} {T} prev={P}".encode()
    assert line_hash(CheckpointLine(plain, seal)) == hashlib.sha256(sealed.encode()).hexdigest()
    assert GENESIS == "0" * 64


def test_a_v1_sealed_line_is_refused_saying_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"^a v1 sealed line") as caught:
        parse_line(f"12:{H} {T} key={KEY} sig={SIG}")
    assert "make it a note" in str(caught.value)
    assert "bxctl audit checkpoint --append FILE --key KEYFILE" in str(caught.value)


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
        f"12:{H} {T} prev={P} key=xyz sig={SIG}",
        f"12:{H} {T} prev={P} key={KEY} sig=short",
        f"12:{H} {T} prev={P} sig={SIG} key={KEY}",
        f"12:{H} {T} prev=abc key={KEY} sig={SIG}",
        f"12:{H} {T} key={KEY} prev={P} sig={SIG}",
        f"12:{H} {T} prev={P}",
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


# --- the chain of sealed lines -------------------------------------------------------


def chain(count: int) -> list[CheckpointLine]:
    """`count` sealed lines linked as bxctl links them (the signatures are not checked here)."""
    lines, prev = [], GENESIS
    for i in range(count):
        line = CheckpointLine(Checkpoint(i, H, T), Seal(prev, KEY, SIG))
        lines.append(line)
        prev = line_hash(line)
    return lines


def numbered(lines: list[CheckpointLine]) -> list[tuple[int, CheckpointLine]]:
    return list(enumerate(lines, 1))


def test_an_unbroken_chain_has_no_problem() -> None:
    assert list(chain_problems(numbered(chain(5)))) == []


@pytest.mark.parametrize("index", [0, 1, 5, 8], ids=["first", "second", "middle", "last-but-one"])
def test_a_deleted_line_breaks_the_chain_at_its_place(index: int) -> None:
    lines = chain(10)
    del lines[index]
    found = list(chain_problems(numbered(lines)))
    assert [number for number, _ in found] == [index + 1]
    assert found[0][1].startswith(f"seq {index + 1}: ")


def test_plain_lines_are_outside_the_chain() -> None:
    lines = chain(3)
    lines.insert(1, CheckpointLine(Checkpoint(0, H, T), None))
    assert list(chain_problems(numbered(lines))) == []


@pytest.mark.parametrize("case", ["moved", "inserted", "edited"])
def test_a_moved_inserted_or_edited_line_breaks_the_chain(case: str) -> None:
    lines = chain(6)
    if case == "moved":
        lines[2], lines[3] = lines[3], lines[2]
    elif case == "inserted":
        lines.insert(3, CheckpointLine(Checkpoint(2, P, T), lines[3].seal))
    else:
        lines[2] = CheckpointLine(Checkpoint(2, P, T), lines[2].seal)
    found = list(chain_problems(numbered(lines)))
    assert found, case
    assert found[0][0] == {"moved": 3, "inserted": 5, "edited": 4}[case]


def test_the_first_sealed_line_must_start_the_chain() -> None:
    lines = chain(3)[1:]
    ((number, text),) = chain_problems(numbered(lines))
    assert number == 1
    assert text.startswith("seq 1: the first sealed line does not start the chain")


@pytest.mark.parametrize(
    ("newest", "seen", "expected"),
    [(9, 9, None), (12, 9, None), (4, 9, "seq 4, older than seq 9 seen before (HEADFILE)")],
    ids=["same", "newer", "older"],
)
def test_rollback(newest: int, seen: int, expected: str | None) -> None:
    found = rollback_problem(Checkpoint(newest, H, T), Checkpoint(seen, P), "HEADFILE")
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert expected in found


def test_the_head_file_round_trips_and_refuses_what_is_not_one() -> None:
    for line in (chain(2)[1], CheckpointLine(Checkpoint(3, H, T), None)):
        data = encode_head(line)
        assert data.startswith(b"# ")
        assert decode_head(data) == line
    for bad in (b"", b"# nothing\n", b"garbage\n", encode_head(chain(1)[0]) * 2):
        with pytest.raises(ValueError, match="not a head file"):
            decode_head(bad)
