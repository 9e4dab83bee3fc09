"""gateway.sock's messages refuse ids, reasons and outcomes of the wrong shape."""

from __future__ import annotations

import orjson
import pytest

from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker_admin import PendingApproval
from boxmaker.core.wire.envelope import decode_envelope
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
)

OWNER = "owner0000000000000000000aa"
POST = "approvalpost00000000000041"


def reply_frame(**changes: object) -> bytes:
    fields = {
        "kind": "approval_reply",
        "approval": 41,
        "answer": "refuse",
        "by": OWNER,
        "post": POST,
    } | changes
    return orjson.dumps({"id": "approval-41", "final": True, "message": fields})


def test_a_good_reply_decodes() -> None:
    message = decode_envelope(reply_frame(reason="not now")).message
    assert isinstance(message, ApprovalReply)
    assert message.reason == "not now"


@pytest.mark.parametrize(
    "changes",
    [
        {"by": "short"},
        {"by": OWNER + "a"},
        {"by": OWNER.upper()},
        {"by": OWNER[:-1] + "\n"},
        {"post": "p" * 25 + "-"},
        {"post": ""},
        {"answer": "approved"},
        {"reason": ""},
        {"reason": "x" * 1001},
        {"reason": "two\nlines"},
        {"reason": "a\x1b[31m"},
        {"reason": "line\u2028separator"},
        {"extra": 1},
    ],
    ids=lambda c: next(iter(c)) + "=" + repr(next(iter(c.values())))[:12],
)
def test_a_bad_reply_is_malformed(changes: dict[str, object]) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_envelope(reply_frame(**changes))
    assert caught.value.code is ErrorCode.MALFORMED


def test_outcome_by_is_bxctl_a_user_id_or_absent() -> None:
    for by in ("bxctl", OWNER, None):
        ApprovalOutcome(approval=1, answer=ApprovalAnswer.APPROVED, by=by, outcome="runs")
    for bad in ("root", "", OWNER.upper()):
        with pytest.raises(ValueError, match="by is bxctl"):
            ApprovalOutcome(approval=1, answer=ApprovalAnswer.APPROVED, by=bad, outcome="runs")
    with pytest.raises(ValueError, match="line-break"):
        ApprovalOutcome(approval=1, answer=ApprovalAnswer.EXPIRED, outcome="runs\nand more")


def test_posted_needs_a_mattermost_id() -> None:
    ApprovalPosted(approval=1, post=POST)
    with pytest.raises(ValueError, match="Mattermost id"):
        ApprovalPosted(approval=1, post="../../etc/passwd0000000000")


def test_a_request_carries_exactly_the_pending_approval() -> None:
    item = PendingApproval(
        approval=41,
        session="chat-1",
        call="c7",
        tool="shell",
        arguments='{"command":"ls"}',
        grant="scratch-shell",
        taint=DataClass.PRIVATE,
        created="2026-11-30T12:00:00.000Z",
        expires="2026-11-30T12:15:00.000Z",
        digest="3f" * 32,
    )
    request = ApprovalRequest.of(item)
    assert request.item() == item
    assert set(ApprovalRequest.model_fields) - {"kind"} == set(PendingApproval.model_fields)
