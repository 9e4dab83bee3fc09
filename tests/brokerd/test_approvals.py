"""Approvals through both sockets: the requester on broker.sock, the owner on admin.sock.

brokerd runs in this process on real sockets with a real audit writer. Every
race here is settled by the pending table's one rule (whoever takes the entry
answers it), so each test checks the answers on both sockets and the records.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.broker import WENT_AWAY
from boxmaker.core.audit.records import (
    ApprovalAnswer,
    ApprovalEvent,
    AuditRecord,
    DecisionEvent,
    ResultEvent,
    ResultStatus,
)
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import add_ms, parse_timestamp
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals, Approve, ApproveResult, Refuse
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Message
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import verify_log, write_grant
from boxmaker.testing.sockets import OpenCall
from boxmaker.testing.waiting import wait_until


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path / "scratch"


@pytest.fixture
def brokerd(tmp_path: Path, scratch: Path) -> Iterator[InProcessBrokerd]:
    write_grant(
        tmp_path / "grants",
        "scratch-shell",
        tool="shell",
        mode="ask",
        max_taint="private",
        paths=[str(scratch)],
    )
    with running_brokerd(tmp_path) as b:
        yield b


def shell(
    scratch: Path, call: str = "c1", session: str = "chat-1", cwd: Path | None = None
) -> ToolRequest:
    arguments = orjson.dumps({"command": "make", "cwd": str(cwd or scratch)}).decode()
    return ToolRequest(session=session, call=call, tool="shell", arguments=arguments)


def pending(call: OpenCall) -> PendingApprovalResponse:
    first = call.first()
    assert not first.final
    assert isinstance(first.message, PendingApprovalResponse)
    return first.message


def admin(b: InProcessBrokerd, message: Message) -> Message:
    answers = b.admin(message)
    assert [a.final for a in answers] == [True]
    return answers[0].message


def events_of(
    records: list[AuditRecord], kind: type[object], decision: int | None = None
) -> list[object]:
    found: list[object] = [r.event for r in records if isinstance(r.event, kind)]
    if decision is not None:
        found = [e for e in found if getattr(e, "decision", None) == decision]
    return found


def approval_record(b: InProcessBrokerd, seq: int) -> ApprovalEvent:
    (event,) = events_of(b.records(), ApprovalEvent, seq)
    assert isinstance(event, ApprovalEvent)
    return event


# --- the three answers --------------------------------------------------------------


def test_approve_lets_the_call_run(brokerd: InProcessBrokerd, scratch: Path) -> None:
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        decision = brokerd.records()[waiting.approval].event
        assert isinstance(decision, DecisionEvent)
        assert decision.outcome == AskRecord()
        assert decision.grant == "scratch-shell"
        listed = admin(brokerd, Approvals())
        assert isinstance(listed, ApprovalList)
        (item,) = listed.items
        assert item.approval == waiting.approval
        assert item.expires == waiting.expires == add_ms(item.created, 900_000)
        assert (item.session, item.call, item.tool, item.grant) == (
            "chat-1",
            "c1",
            "shell",
            "scratch-shell",
        )
        assert item.taint is DataClass.PRIVATE
        assert brokerd.runtime.count == 0

        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=AllowedRecord())
        answer = call.final()
    assert answer.final
    assert isinstance(answer.message, ResultResponse)
    assert brokerd.runtime.count == 1
    approval = approval_record(brokerd, waiting.approval)
    assert approval.answer is ApprovalAnswer.APPROVED
    assert approval.by == "bxctl"
    assert approval.outcome == AllowedRecord()
    assert approval.grant == "scratch-shell"
    (result,) = events_of(brokerd.records(), ResultEvent, waiting.approval)
    assert isinstance(result, ResultEvent)
    assert result.status is ResultStatus.RESULT
    assert admin(brokerd, Approvals()) == ApprovalList(items=())
    report = verify_log(brokerd.home)
    assert report.ok
    assert report.abandoned == ()
    assert report.unfinished == ()


def test_refuse_denies_the_call(brokerd: InProcessBrokerd, scratch: Path) -> None:
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        assert admin(brokerd, Refuse(approval=waiting.approval, reason="not now")) == Ok()
        answer = call.final()
    assert answer.message == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
    assert brokerd.runtime.count == 0
    approval = approval_record(brokerd, waiting.approval)
    assert approval.answer is ApprovalAnswer.REFUSED
    assert approval.reason == "not now"
    assert approval.outcome == DeniedRecord(reason=DenyReason.APPROVAL_REFUSED)
    assert approval.grant is None
    assert events_of(brokerd.records(), ResultEvent) == []


def test_an_unanswered_approval_expires(tmp_path: Path, scratch: Path) -> None:
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    with running_brokerd(tmp_path, ttl_ms=100) as b, b.open_call(shell(scratch)) as call:
        waiting = pending(call)
        assert parse_timestamp(waiting.expires) > parse_timestamp(
            b.records()[waiting.approval].time
        )
        answer = call.final(timeout_s=10)
        assert answer.message == DeniedResponse(reason=DenyReason.APPROVAL_EXPIRED)
        approval = approval_record(b, waiting.approval)
        assert approval.answer is ApprovalAnswer.EXPIRED
        assert approval.outcome == DeniedRecord(reason=DenyReason.APPROVAL_EXPIRED)
        assert b.runtime.count == 0
        late = admin(b, Approve(approval=waiting.approval))
        assert isinstance(late, Error)
        assert late.code is ErrorCode.NO_SUCH_APPROVAL


def test_a_grant_that_expires_first_sets_the_approval_expiry(tmp_path: Path, scratch: Path) -> None:
    from boxmaker.testing.daemons import Clock

    clock = Clock()
    soon = add_ms(clock(), 60_000)
    write_grant(
        tmp_path / "grants",
        "scratch-shell",
        tool="shell",
        mode="ask",
        expires=soon,
        paths=[str(scratch)],
    )
    with running_brokerd(tmp_path, clock=clock) as b, b.open_call(shell(scratch)) as call:
        assert pending(call).expires == soon


# --- the re-decision -----------------------------------------------------------------


def test_approve_after_the_grant_file_is_removed_is_denied(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        (brokerd.grants_dir / "scratch-shell.toml").unlink()
        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=DeniedRecord(reason=DenyReason.NO_GRANT))
        assert call.final().message == DeniedResponse(reason=DenyReason.NO_GRANT)
    assert brokerd.runtime.count == 0
    approval = approval_record(brokerd, waiting.approval)
    assert approval.answer is ApprovalAnswer.APPROVED
    assert approval.outcome == DeniedRecord(reason=DenyReason.NO_GRANT)
    assert approval.grant is None


def test_approve_after_the_taint_rose_is_denied(
    brokerd: InProcessBrokerd, tmp_path: Path, scratch: Path
) -> None:
    keys = tmp_path / "keys"
    write_grant(
        brokerd.grants_dir, "keys-read", tool="read_file", result_class="secret", paths=[str(keys)]
    )
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        arguments = orjson.dumps({"path": str(keys / "id")}).decode()
        read = ToolRequest(session="chat-1", call="r1", tool="read_file", arguments=arguments)
        assert isinstance(brokerd.tool(read, "r1")[-1].message, ResultResponse)
        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=DeniedRecord(reason=DenyReason.TAINT_TOO_HIGH))
        assert call.final().message == DeniedResponse(reason=DenyReason.TAINT_TOO_HIGH)
    assert brokerd.runtime.count == 1  # the read, not the shell command
    approval = approval_record(brokerd, waiting.approval)
    assert approval.taint is DataClass.SECRET
    assert approval.outcome == DeniedRecord(reason=DenyReason.TAINT_TOO_HIGH)


@pytest.mark.parametrize(
    ("grant_id", "mode"),
    [("b-longer-ask", "ask"), ("c-auto", "auto")],
    ids=["a-longer-ask-grant", "an-auto-grant-replacing-the-ask"],
)
def test_another_grant_matched_at_the_re_decision_makes_the_approval_stale(
    brokerd: InProcessBrokerd, scratch: Path, grant_id: str, mode: str
) -> None:
    inner = scratch / "inner"
    with brokerd.open_call(shell(scratch, cwd=inner)) as call:
        waiting = pending(call)
        path = write_grant(
            brokerd.grants_dir, grant_id, tool="shell", mode=mode, paths=[str(inner)]
        )
        if mode == "auto":
            (brokerd.grants_dir / "scratch-shell.toml").unlink()
        assert admin(brokerd, Approve(approval=waiting.approval)) == ApproveResult(
            outcome=DeniedRecord(reason=DenyReason.APPROVAL_STALE)
        )
        assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_STALE)
    decision = brokerd.records()[waiting.approval].event
    assert isinstance(decision, DecisionEvent)
    assert decision.grant == "scratch-shell"
    approval = approval_record(brokerd, waiting.approval)
    assert approval.outcome == DeniedRecord(reason=DenyReason.APPROVAL_STALE)
    assert approval.grant == grant_id  # the grant that matches now, which nobody approved
    assert approval.grant_sha256 == sha256_hex(path.read_bytes())
    assert brokerd.runtime.count == 0


# --- ids that are not pending -------------------------------------------------------


@pytest.mark.parametrize(
    "message", [Approve(approval=41), Refuse(approval=41)], ids=["approve", "refuse"]
)
def test_an_unknown_id_is_no_such_approval(brokerd: InProcessBrokerd, message: Message) -> None:
    answer = admin(brokerd, message)
    assert isinstance(answer, Error)
    assert answer.code is ErrorCode.NO_SUCH_APPROVAL
    assert brokerd.records() == []


# --- a requester that goes away -----------------------------------------------------


def test_a_requester_that_goes_away_while_pending_is_abandoned(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    call = brokerd.open_call(shell(scratch))
    waiting = pending(call)
    call.drop()

    def gone() -> bool:
        listed = admin(brokerd, Approvals())
        return isinstance(listed, ApprovalList) and not listed.items

    wait_until(gone, 10, "the abandoned entry leaving the table")
    late = admin(brokerd, Approve(approval=waiting.approval))
    assert isinstance(late, Error)
    assert late.code is ErrorCode.NO_SUCH_APPROVAL
    brokerd.stop()  # nothing may be written later either
    (record,) = brokerd.records()
    assert record.seq == waiting.approval
    report = verify_log(brokerd.home)
    assert report.ok
    assert report.abandoned == (waiting.approval,)
    assert brokerd.runtime.count == 0


def test_a_requester_gone_at_the_last_check_gets_a_failed_result_and_nothing_runs(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    call = brokerd.open_call(shell(scratch))
    waiting = pending(call)
    # the next grants load is approve's re-decision: the requester leaves just then,
    # after approve has taken the entry and before the verdict reaches its thread
    brokerd.grants.before_next_load(call.drop)
    assert admin(brokerd, Approve(approval=waiting.approval)) == ApproveResult(
        outcome=AllowedRecord()
    )

    def results() -> list[object]:
        return events_of(brokerd.records(), ResultEvent, waiting.approval)

    wait_until(lambda: bool(results()), 10, "the Result record")
    (result,) = results()
    assert isinstance(result, ResultEvent)
    assert result.status is ResultStatus.FAILED
    assert result.sha256 == sha256_hex(WENT_AWAY.encode())
    assert result.bytes == len(WENT_AWAY)
    assert result.taint_after is DataClass.PRIVATE
    assert brokerd.runtime.count == 0
    report = verify_log(brokerd.home)
    assert report.ok
    assert report.unfinished == ()


# --- audit failures ------------------------------------------------------------------


def test_an_approval_record_that_cannot_be_written_denies_both_sides(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        brokerd.files.fail_now()
        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=DeniedRecord(reason=DenyReason.AUDIT_UNAVAILABLE))
        assert call.final().message == DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    assert brokerd.runtime.count == 0
    assert events_of(brokerd.records(), ApprovalEvent) == []


# --- approve and refuse at once ---------------------------------------------------------


def race(b: InProcessBrokerd, approve: Approve, refuse: Refuse) -> dict[str, Message]:
    """Send approve and refuse from two threads released together; both answers."""
    barrier = threading.Barrier(2)
    answers: dict[str, Message] = {}

    def send(name: str, message: Message) -> None:
        barrier.wait()
        answers[name] = admin(b, message)

    threads = [
        threading.Thread(target=send, args=("approve", approve)),
        threading.Thread(target=send, args=("refuse", refuse)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return answers


def test_approve_and_refuse_raced_a_hundred_times_answer_once_each_time(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    approved = 0
    for n in range(100):
        with brokerd.open_call(shell(scratch, call=f"c{n}", session=f"s{n % 3}")) as call:
            seq = pending(call).approval
            answers = race(brokerd, Approve(approval=seq), Refuse(approval=seq))
            final = call.final().message
        losers = [k for k, v in answers.items() if isinstance(v, Error)]
        assert len(losers) == 1, answers
        loser = answers[losers[0]]
        assert isinstance(loser, Error)
        assert loser.code is ErrorCode.NO_SUCH_APPROVAL
        if losers == ["refuse"]:
            approved += 1
            assert answers["approve"] == ApproveResult(outcome=AllowedRecord())
            assert isinstance(final, ResultResponse)
        else:
            assert answers["refuse"] == Ok()
            assert final == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
    records = brokerd.records()
    decisions = [r.seq for r in records if isinstance(r.event, DecisionEvent)]
    assert len(decisions) == 100
    for seq in decisions:
        assert len(events_of(records, ApprovalEvent, seq)) == 1
    assert brokerd.runtime.count == approved
    assert verify_log(brokerd.home).ok
    print(f"approve won {approved} of 100")
