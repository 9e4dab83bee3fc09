"""Approvals bound to the action: approving N runs N's call exactly, or nothing.

brokerd runs in this process on real sockets with a real audit writer. A pending
approval carries the digest of its tool, canonical arguments, grant id and file
hash and the session's taint (`core.policy`); approving re-decides, and a
re-decision with another digest is denied `approval_stale`. `approve --digest`
is checked by brokerd, and a mismatch leaves the approval pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.core.audit.records import ApprovalAnswer, ApprovalEvent, DecisionEvent
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import AllowedRecord, DeniedRecord, DenyReason
from boxmaker.core.grants.tools import ShellArgs
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import approval_digest
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import (
    ApprovalList,
    Approvals,
    Approve,
    ApproveResult,
    PendingApproval,
)
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Message
from boxmaker.testing.daemons import InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.sockets import OpenCall


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
        max_taint="secret",
        paths=[str(scratch)],
    )
    with running_brokerd(tmp_path) as b:
        yield b


def shell(scratch: Path, command: str, call: str) -> ToolRequest:
    arguments = orjson.dumps({"command": command, "cwd": str(scratch)}).decode()
    return ToolRequest(session="chat-1", call=call, tool="shell", arguments=arguments)


def pending(call: OpenCall) -> PendingApprovalResponse:
    first = call.first()
    assert not first.final
    assert isinstance(first.message, PendingApprovalResponse)
    return first.message


def admin(b: InProcessBrokerd, message: Message) -> Message:
    answers = b.admin(message)
    assert [a.final for a in answers] == [True]
    return answers[0].message


def listed(b: InProcessBrokerd) -> dict[int, PendingApproval]:
    answer = admin(b, Approvals())
    assert isinstance(answer, ApprovalList)
    return {item.approval: item for item in answer.items}


def approval_record(b: InProcessBrokerd, seq: int) -> ApprovalEvent:
    (event,) = [
        r.event
        for r in b.records()
        if isinstance(r.event, ApprovalEvent) and r.event.decision == seq
    ]
    return event


def test_the_digest_listed_is_the_one_of_the_call_and_its_grant(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with brokerd.open_call(shell(scratch, "make", "c1")) as call:
        waiting = pending(call)
        item = listed(brokerd)[waiting.approval]
        grant_sha = sha256_hex((brokerd.grants_dir / "scratch-shell.toml").read_bytes())
        assert item.digest == approval_digest(
            "shell", item.arguments, "scratch-shell", grant_sha, DataClass.PRIVATE
        )
        assert item.untrusted_by is None
        admin(brokerd, Approve(approval=waiting.approval))
        call.final()


def test_approving_one_call_runs_exactly_its_arguments(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with (
        brokerd.open_call(shell(scratch, "make", "c1")) as first,
        brokerd.open_call(shell(scratch, "rm -rf .", "c2")) as second,
    ):
        one, two = pending(first), pending(second)
        assert one.approval != two.approval
        items = listed(brokerd)
        assert items[one.approval].digest != items[two.approval].digest
        assert admin(brokerd, Approve(approval=one.approval)) == ApproveResult(
            outcome=AllowedRecord()
        )
        assert isinstance(first.final().message, ResultResponse)
        (spec,) = brokerd.runtime.specs
        assert spec.arguments == ShellArgs(command="make", cwd=str(scratch))
        # the other call is still its own pending entry, untouched
        assert list(listed(brokerd)) == [two.approval]
        assert admin(brokerd, Approve(approval=two.approval)) == ApproveResult(
            outcome=AllowedRecord()
        )
        assert isinstance(second.final().message, ResultResponse)
    assert [s.arguments for s in brokerd.runtime.specs] == [
        ShellArgs(command="make", cwd=str(scratch)),
        ShellArgs(command="rm -rf .", cwd=str(scratch)),
    ]


def test_a_grant_file_changed_between_ask_and_approve_makes_it_stale(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with brokerd.open_call(shell(scratch, "make", "c1")) as call:
        waiting = pending(call)
        changed = write_grant(
            brokerd.grants_dir,
            "scratch-shell",
            tool="shell",
            mode="ask",
            max_taint="secret",
            result_class="public",  # same id, same paths, another file
            paths=[str(scratch)],
        )
        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=DeniedRecord(reason=DenyReason.APPROVAL_STALE))
        assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_STALE)
    assert brokerd.runtime.count == 0
    decision = brokerd.records()[waiting.approval].event
    assert isinstance(decision, DecisionEvent)
    approval = approval_record(brokerd, waiting.approval)
    assert approval.answer is ApprovalAnswer.APPROVED
    assert approval.outcome == DeniedRecord(reason=DenyReason.APPROVAL_STALE)
    assert approval.grant == "scratch-shell"
    assert approval.grant_sha256 == sha256_hex(changed.read_bytes())
    assert approval.grant_sha256 != decision.grant_sha256


def test_a_taint_risen_between_ask_and_approve_makes_it_stale(
    brokerd: InProcessBrokerd, tmp_path: Path, scratch: Path
) -> None:
    # the shell grant still applies at secret: only the binding refuses
    keys = tmp_path / "keys"
    write_grant(
        brokerd.grants_dir, "keys-read", tool="read_file", result_class="secret", paths=[str(keys)]
    )
    with brokerd.open_call(shell(scratch, "make", "c1")) as call:
        waiting = pending(call)
        arguments = orjson.dumps({"path": str(keys / "id")}).decode()
        read = ToolRequest(session="chat-1", call="r1", tool="read_file", arguments=arguments)
        assert isinstance(brokerd.tool(read, "r1")[-1].message, ResultResponse)
        outcome = admin(brokerd, Approve(approval=waiting.approval))
        assert outcome == ApproveResult(outcome=DeniedRecord(reason=DenyReason.APPROVAL_STALE))
        assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_STALE)
    assert brokerd.runtime.count == 1  # the read, not the shell command
    approval = approval_record(brokerd, waiting.approval)
    assert approval.taint is DataClass.SECRET
    assert approval.outcome == DeniedRecord(reason=DenyReason.APPROVAL_STALE)


def test_a_digest_that_does_not_match_leaves_the_approval_pending(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with brokerd.open_call(shell(scratch, "make", "c1")) as call:
        waiting = pending(call)
        digest = listed(brokerd)[waiting.approval].digest
        wrong = ("0" if digest[0] != "0" else "1") + digest[1:12]
        answer = admin(brokerd, Approve(approval=waiting.approval, digest=wrong))
        assert isinstance(answer, Error)
        assert answer.code is ErrorCode.DIGEST_MISMATCH
        assert answer.message == (
            f"approval {waiting.approval} has digest {digest[:12]}, not {wrong};"
            " it is still pending"
        )
        assert list(listed(brokerd)) == [waiting.approval]
        assert not [r for r in brokerd.records() if isinstance(r.event, ApprovalEvent)]
        # the digest shown, short or whole, approves it
        assert admin(brokerd, Approve(approval=waiting.approval, digest=digest[:12])) == (
            ApproveResult(outcome=AllowedRecord())
        )
        assert isinstance(call.final().message, ResultResponse)
    assert brokerd.runtime.count == 1


def test_a_digest_for_an_id_not_pending_is_no_such_approval(brokerd: InProcessBrokerd) -> None:
    answer = admin(brokerd, Approve(approval=41, digest="0" * 12))
    assert isinstance(answer, Error)
    assert answer.code is ErrorCode.NO_SUCH_APPROVAL
