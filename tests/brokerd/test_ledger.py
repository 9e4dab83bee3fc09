"""The ledger through broker.sock: audit before action, failing writers, session state.

Each test runs brokerd in this process on real sockets, with a real audit writer
whose file operations fail on demand, and a recording runtime.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.ledger import NOT_RECORDED
from boxmaker.core.audit.records import DecisionEvent, ResultEvent, ResultStatus
from boxmaker.core.grants.decisions import AllowedRecord, DeniedRecord, DenyReason
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import DeniedResponse, FailedResponse, ResultResponse, ToolRequest
from boxmaker.core.wire.envelope import encode_envelope
from boxmaker.sandbox.runner import RunOutput
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import verify_log, write_grant
from boxmaker.testing.runtime import RecordingRuntime

CONTENT = "the-content-of-the-file-7f3a"


@pytest.fixture
def brokerd(tmp_path: Path) -> Iterator[InProcessBrokerd]:
    notes = tmp_path / "notes"
    keys = tmp_path / "keys"
    write_grant(tmp_path / "grants", "notes-read", tool="read_file", paths=[str(notes)])
    write_grant(
        tmp_path / "grants",
        "keys-read",
        tool="read_file",
        result_class="secret",
        untrusted=True,
        paths=[str(keys)],
    )
    runtime = RecordingRuntime(RunOutput(content=CONTENT, truncated=False))
    with running_brokerd(tmp_path, runtime=runtime) as b:
        yield b


def read(tmp_path: Path, where: str, call: str = "c1", session: str = "chat-1") -> ToolRequest:
    arguments = orjson.dumps({"path": str(tmp_path / where / "a.md")}).decode()
    return ToolRequest(session=session, call=call, tool="read_file", arguments=arguments)


def final(b: InProcessBrokerd, request: ToolRequest) -> object:
    answers = b.tool(request, request.call)
    assert [a.final for a in answers] == [True]
    return answers[0].message


def state_file(b: InProcessBrokerd, session: str) -> Path:
    return b.home / "broker" / "sessions" / f"{session}.json"


# --- the ordinary path --------------------------------------------------------------


def test_an_allowed_call_is_decided_run_and_recorded_in_that_order(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    answer = final(brokerd, read(tmp_path, "keys"))
    assert answer == ResultResponse(
        content=CONTENT, class_=DataClass.SECRET, untrusted=True, truncated=False
    )
    decision, result = (r.event for r in brokerd.records())
    assert isinstance(decision, DecisionEvent)
    assert decision.outcome == AllowedRecord()
    assert decision.grant == "keys-read"
    assert decision.taint is DataClass.PRIVATE
    assert isinstance(result, ResultEvent)
    assert result.status is ResultStatus.RESULT
    assert result.decision == 0
    assert result.bytes == len(CONTENT)
    assert result.taint_after is DataClass.SECRET
    assert json.loads(state_file(brokerd, "chat-1").read_bytes()) == {
        "taint": "secret",
        "untrusted": True,
        "untrusted_by": {"session": "chat-1", "call": "c1", "tool": "read_file"},
    }
    assert brokerd.runtime.count == 1
    assert verify_log(brokerd.home).ok


def test_a_denied_call_writes_its_decision_and_nothing_else(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    answer = final(brokerd, read(tmp_path, "elsewhere"))
    assert answer == DeniedResponse(reason=DenyReason.NO_GRANT)
    (record,) = brokerd.records()
    assert isinstance(record.event, DecisionEvent)
    assert record.event.outcome == DeniedRecord(reason=DenyReason.NO_GRANT)
    assert brokerd.runtime.count == 0
    assert not state_file(brokerd, "chat-1").exists()


def test_grants_are_read_afresh_at_every_decision(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    request = read(tmp_path, "later", call="c1")
    assert final(brokerd, request) == DeniedResponse(reason=DenyReason.NO_GRANT)
    write_grant(
        tmp_path / "grants", "later-read", tool="read_file", paths=[str(tmp_path / "later")]
    )
    again = read(tmp_path, "later", call="c2")
    assert isinstance(final(brokerd, again), ResultResponse)


# --- audit before action ------------------------------------------------------------


def test_a_decision_that_cannot_be_written_runs_nothing_and_every_later_call_is_denied(
    brokerd: InProcessBrokerd, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    brokerd.files.fail_now()
    first = final(brokerd, read(tmp_path, "notes", call="c1"))
    assert first == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    assert brokerd.runtime.count == 0

    brokerd.files.heal()  # the disk would take a write again; brokerd must not try
    second = final(brokerd, read(tmp_path, "notes", call="c2"))
    assert second == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    other_session = final(brokerd, read(tmp_path, "keys", call="c3", session="chat-2"))
    assert other_session == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    assert brokerd.runtime.count == 0
    assert brokerd.files.writes == 0
    assert brokerd.records() == []
    assert any(r.getMessage().endswith("see runbook.md#audit-unavailable") for r in caplog.records)


def test_a_result_record_that_cannot_be_written_sends_no_content(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    brokerd.files.fail_after(1)  # the Decision record goes out; the Result record does not
    answers = brokerd.tool(read(tmp_path, "keys"), "c1")
    assert [a.message for a in answers] == [FailedResponse(message=NOT_RECORDED)]
    assert CONTENT.encode() not in b"".join(encode_envelope(a) for a in answers)
    assert brokerd.runtime.count == 1
    (record,) = brokerd.records()
    assert isinstance(record.event, DecisionEvent)
    brokerd.files.heal()
    later = final(brokerd, read(tmp_path, "notes", call="c2"))
    assert later == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    assert brokerd.runtime.count == 1


def test_a_state_file_that_cannot_be_written_sends_no_content(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    # the atomic write goes through <id>.json.tmp; a directory there makes it fail
    tmp = state_file(brokerd, "chat-1").with_name("chat-1.json.tmp")
    tmp.mkdir(parents=True)
    answers = brokerd.tool(read(tmp_path, "keys"), "c1")
    assert [a.message for a in answers] == [FailedResponse(message=NOT_RECORDED)]
    assert answers[0].final
    assert CONTENT.encode() not in b"".join(encode_envelope(a) for a in answers)
    assert brokerd.runtime.count == 1
    # no Result record claims a taint that is not on disk
    assert [type(r.event) for r in brokerd.records()] == [DecisionEvent]
    assert not state_file(brokerd, "chat-1").exists()
    later = final(brokerd, read(tmp_path, "notes", call="c2", session="chat-2"))
    assert later == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)


def test_a_failed_run_changes_no_state(tmp_path: Path) -> None:
    from boxmaker.sandbox.runner import RunError, RunFailure

    write_grant(
        tmp_path / "grants",
        "keys-read",
        tool="read_file",
        result_class="secret",
        paths=[str(tmp_path / "keys")],
    )
    runtime = RecordingRuntime(RunError(RunFailure.TIMED_OUT))
    with running_brokerd(tmp_path, runtime=runtime) as b:
        answer = final(b, read(tmp_path, "keys"))
        assert answer == FailedResponse(message="the tool timed out")
        result = b.records()[-1].event
        assert isinstance(result, ResultEvent)
        assert result.status is ResultStatus.FAILED
        assert result.class_ is DataClass.SECRET
        assert result.taint_after is DataClass.PRIVATE
        assert not state_file(b, "chat-1").exists()


def test_a_result_that_raises_nothing_leaves_the_state_file_alone(
    brokerd: InProcessBrokerd, tmp_path: Path
) -> None:
    # a private, trusted result of a fresh session: still no file (absent reads as that)
    assert isinstance(final(brokerd, read(tmp_path, "notes", call="c1")), ResultResponse)
    assert not state_file(brokerd, "chat-1").exists()
    # once raised, a result at or below the taint does not rewrite it
    assert isinstance(final(brokerd, read(tmp_path, "keys", call="c2")), ResultResponse)
    path = state_file(brokerd, "chat-1")
    before = path.stat()
    assert isinstance(final(brokerd, read(tmp_path, "notes", call="c3")), ResultResponse)
    assert isinstance(final(brokerd, read(tmp_path, "keys", call="c4")), ResultResponse)
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert json.loads(path.read_bytes())["taint"] == "secret"
    results = [r.event for r in brokerd.records() if isinstance(r.event, ResultEvent)]
    assert [r.taint_after for r in results] == [DataClass.PRIVATE] + [DataClass.SECRET] * 3
    assert verify_log(brokerd.home).ok


# --- session state ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b'{"taint":"public","untrusted":false}', b'{"taint":"private"}'],
    ids=["empty", "not-json", "public", "missing-field"],
)
def test_an_unreadable_state_denies_that_session_only(
    brokerd: InProcessBrokerd,
    tmp_path: Path,
    content: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = state_file(brokerd, "chat-1")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    answer = final(brokerd, read(tmp_path, "notes"))
    assert answer == DeniedResponse(reason=DenyReason.STATE_UNREADABLE)
    (record,) = brokerd.records()
    assert isinstance(record.event, DecisionEvent)
    assert record.event.outcome == DeniedRecord(reason=DenyReason.STATE_UNREADABLE)
    assert brokerd.runtime.count == 0
    assert path.read_bytes() == content  # never repaired behind the owner's back
    assert any(
        r.getMessage().endswith("see runbook.md#broker-state-damaged") for r in caplog.records
    )
    other = final(brokerd, read(tmp_path, "notes", call="c2", session="chat-2"))
    assert isinstance(other, ResultResponse)


def test_taint_carries_from_one_call_to_the_next(brokerd: InProcessBrokerd, tmp_path: Path) -> None:
    write_grant(
        tmp_path / "grants",
        "notes-write",
        tool="write_file",
        max_taint="private",
        paths=[str(tmp_path / "notes")],
    )
    arguments = orjson.dumps({"path": str(tmp_path / "notes" / "x"), "content": "hi"}).decode()
    write = ToolRequest(session="chat-1", call="w1", tool="write_file", arguments=arguments)
    assert isinstance(final(brokerd, write), ResultResponse)
    assert isinstance(final(brokerd, read(tmp_path, "keys", call="r1")), ResultResponse)
    again = ToolRequest(session="chat-1", call="w2", tool="write_file", arguments=arguments)
    assert final(brokerd, again) == DeniedResponse(reason=DenyReason.TAINT_TOO_HIGH)
    fresh = ToolRequest(session="chat-2", call="w3", tool="write_file", arguments=arguments)
    assert isinstance(final(brokerd, fresh), ResultResponse)
