"""Byte-exact fixtures: one per message kind, status and turn event.

Each fixture file holds one envelope as it goes on the wire (without the length
prefix). Encoding the value must give exactly those bytes, and decoding the bytes
must give back the value. The first five are design.md section 3's own examples.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.grants.model import GrantProblem
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import (
    ApprovalList,
    Approvals,
    Approve,
    ApproveResult,
    AuditCheckpoint,
    CheckGrants,
    CheckpointReply,
    GrantsReport,
    PendingApproval,
    Refuse,
    SessionStateItem,
    SessionStateList,
    SessionStates,
    UntrustedBy,
)
from boxmaker.core.wire.common import Error, Ok, Status, StatusReport
from boxmaker.core.wire.envelope import (
    Envelope,
    decode_envelope,
    encode_answer,
    encode_envelope,
    message_kinds,
)
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
    ReplyAnswer,
)
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    Cancel,
    Cancelled,
    Compact,
    ContentEvent,
    ContextCompactedEvent,
    ReasoningEvent,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    SessionSummary,
    ShownEntry,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolResultEvent,
    Turn,
    TurnDone,
    TurnEvent,
    UsageEvent,
)
from boxmaker.core.wire.memory import (
    BlockExclusion,
    BlockSpan,
    MemoryBlock,
    MemoryBlockReply,
    MemoryCall,
    MemoryLog,
    MemoryLogReply,
    Reindex,
    Reindexed,
    SessionUpdated,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "wire"
EXPIRES = "2026-11-30T12:15:00.000Z"
OWNER = "kyle4owner5mattermost6id7x"  # Mattermost ids: 26 characters of [a-z0-9]
POST = "p0st1d2for3approval4ab5cd6"
DIGEST = "3f2a9c01b4de" + "5a" * 26  # an approval's digest (core.policy.approval_digest)

CASES: dict[str, Envelope] = {
    "tool_request": Envelope(
        id="c7",
        final=True,
        message=ToolRequest(
            session="chat-1",
            call="c7",
            tool="read_file",
            arguments='{"path":"/home/kyle/notes/a.md"}',
        ),
    ),
    "tool_response_pending_approval": Envelope(
        id="c7", final=False, message=PendingApprovalResponse(approval=41, expires=EXPIRES)
    ),
    "tool_response_denied": Envelope(
        id="c7", final=True, message=DeniedResponse(reason=DenyReason.NO_GRANT)
    ),
    "tool_response_denied_detail": Envelope(
        id="c8",
        final=True,
        message=DeniedResponse(
            reason=DenyReason.INVALID_ARGUMENTS, detail="unknown field `file`, expected `path`"
        ),
    ),
    "error": Envelope(
        id="a1",
        final=True,
        message=Error(code=ErrorCode.FORBIDDEN, message="approvals is not accepted on broker.sock"),
    ),
    "tool_response_result": Envelope(
        id="c9",
        final=True,
        message=ResultResponse(
            content="# notes\n", class_=DataClass.PRIVATE, untrusted=False, truncated=False
        ),
    ),
    "tool_response_failed": Envelope(
        id="c9", final=True, message=FailedResponse(message="the tool timed out")
    ),
    "approvals": Envelope(id="a2", final=True, message=Approvals()),
    "approval_list": Envelope(
        id="a2",
        final=True,
        message=ApprovalList(
            items=(
                PendingApproval(
                    approval=41,
                    session="chat-1",
                    call="c7",
                    tool="shell",
                    arguments='{"command":"ls","cwd":"/home/kyle/scratch"}',
                    grant="scratch-shell",
                    taint=DataClass.PRIVATE,
                    created="2026-11-30T12:00:00.000Z",
                    expires=EXPIRES,
                    digest=DIGEST,
                ),
                PendingApproval(
                    approval=44,
                    session="chat-1",
                    call="c9",
                    tool="write_file",
                    arguments='{"path":"/home/kyle/scratch/a.txt","content":"hi"}',
                    grant="scratch-write",
                    taint=DataClass.PRIVATE,
                    created="2026-11-30T12:01:00.000Z",
                    expires=EXPIRES,
                    digest="9c" * 32,
                    untrusted_by=UntrustedBy(session="chat-1", call="c8", tool="http_fetch"),
                ),
            )
        ),
    ),
    "approve": Envelope(id="a3", final=True, message=Approve(approval=41)),
    "approve_digest": Envelope(
        id="a3", final=True, message=Approve(approval=41, digest=DIGEST[:12])
    ),
    "error_digest_mismatch": Envelope(
        id="a3",
        final=True,
        message=Error(
            code=ErrorCode.DIGEST_MISMATCH,
            message="approval 41 has digest 3f2a9c01b4de, not 000000000000; it is still pending",
        ),
    ),
    "approve_result_allowed": Envelope(
        id="a3", final=True, message=ApproveResult(outcome=AllowedRecord())
    ),
    "approve_result_ask": Envelope(id="a3", final=True, message=ApproveResult(outcome=AskRecord())),
    "approve_result_denied": Envelope(
        id="a3",
        final=True,
        message=ApproveResult(outcome=DeniedRecord(reason=DenyReason.TAINT_TOO_HIGH)),
    ),
    "refuse": Envelope(id="a4", final=True, message=Refuse(approval=41, reason="not now")),
    "refuse_no_reason": Envelope(id="a4", final=True, message=Refuse(approval=41)),
    "ok": Envelope(id="a4", final=True, message=Ok()),
    "check_grants": Envelope(id="a5", final=True, message=CheckGrants()),
    "grants_report": Envelope(
        id="a5",
        final=True,
        message=GrantsReport(
            problems=(
                GrantProblem(file="keys.toml", line=3, problem="secrets are not supported"),
                GrantProblem(
                    file="/etc/boxmaker/grants", problem="the grants directory cannot be read"
                ),
            )
        ),
    ),
    "checkpoint": Envelope(id="k1", final=True, message=AuditCheckpoint()),
    "checkpoint_reply": Envelope(
        id="k1",
        final=True,
        message=CheckpointReply(seq=1207, head="3f" * 32, time="2026-11-30T12:05:00.000Z"),
    ),
    "session_states": Envelope(id="a6", final=True, message=SessionStates()),
    "session_state_list": Envelope(
        id="a6",
        final=True,
        message=SessionStateList(
            items=(
                SessionStateItem(
                    session="chat-1",
                    taint=DataClass.PRIVATE,
                    untrusted=True,
                    untrusted_by=UntrustedBy(session="chat-1", call="c3", tool="http_fetch"),
                ),
                SessionStateItem(session="chat-2", taint=DataClass.SECRET, untrusted=False),
            )
        ),
    ),
    "status": Envelope(id="s1", final=True, message=Status()),
    "status_report": Envelope(
        id="s1",
        final=True,
        message=StatusReport(
            role="brokerd",
            version="0.1.0",
            started="2026-11-30T12:00:00.000Z",
            detail="audit: 12 records, head " + "ab" * 32,
        ),
    ),
    "turn": Envelope(id="t1", final=True, message=Turn(session="chat-1", text="hello")),
    "turn_resume": Envelope(
        id="t1", final=True, message=Turn(session="chat-1", text="go on", resume=True)
    ),
    "turn_event_reasoning": Envelope(
        id="t1", final=False, message=TurnEvent(event=ReasoningEvent(text="The owner asks"))
    ),
    "turn_event_content": Envelope(
        id="t1", final=False, message=TurnEvent(event=ContentEvent(text="Hello"))
    ),
    "turn_event_tool_call_started": Envelope(
        id="t1",
        final=False,
        message=TurnEvent(
            event=ToolCallStartedEvent(
                call="t1-c1", name="call_tool", arguments='{"name":"read_file"}'
            )
        ),
    ),
    "turn_event_tool_result": Envelope(
        id="t1",
        final=False,
        message=TurnEvent(
            event=ToolResultEvent(
                call="t1-c1",
                name="call_tool",
                content="Denied: no grant allows this call.",
                class_=DataClass.PUBLIC,
                untrusted=False,
                truncated=False,
            )
        ),
    ),
    "turn_event_tool_denied": Envelope(
        id="t1",
        final=False,
        message=TurnEvent(event=ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT)),
    ),
    "turn_event_approval_pending": Envelope(
        id="t1",
        final=False,
        message=TurnEvent(event=ApprovalPendingEvent(approval=41, tool="shell", expires=EXPIRES)),
    ),
    "turn_event_context_compacted": Envelope(
        id="t2",
        final=False,
        message=TurnEvent(event=ContextCompactedEvent(before=1812, after=604)),
    ),
    "turn_event_usage": Envelope(
        id="t1",
        final=False,
        message=TurnEvent(event=UsageEvent(prompt=1812, generated=96, context=8192, seconds=2.125)),
    ),
    "turn_done": Envelope(
        id="t1", final=True, message=TurnDone(session="chat-1", content="Done.", untrusted=False)
    ),
    "compact": Envelope(id="t2", final=True, message=Compact(session="chat-1")),
    "cancel": Envelope(id="t3", final=True, message=Cancel(session="chat-1")),
    "cancelled": Envelope(id="t3", final=True, message=Cancelled(session="chat-1", running=True)),
    "sessions": Envelope(id="v1", final=True, message=Sessions()),
    "session_list": Envelope(
        id="v1",
        final=True,
        message=SessionList(
            items=(
                SessionSummary(
                    session="chat-1",
                    turns=12,
                    tokens=1812,
                    compactions=1,
                    untrusted=True,
                    last="2026-11-30T12:05:00.000Z",
                ),
                SessionSummary(
                    session="mm-" + POST,
                    turns=1,
                    tokens=0,
                    compactions=0,
                    untrusted=False,
                    last="2026-11-30T11:00:00.000Z",
                ),
            )
        ),
    ),
    "session_show": Envelope(id="v2", final=True, message=SessionShow(session="chat-1", start=40)),
    "session_entries": Envelope(
        id="v2",
        final=True,
        message=SessionEntries(
            session="chat-1",
            entries=(
                ShownEntry(index=40, type="user", text="read /x"),
                ShownEntry(
                    index=41,
                    type="tool",
                    text="# notes\n",
                    name="call_tool",
                    untrusted=True,
                    cut=True,
                ),
            ),
            next=42,
        ),
    ),
    # memoryd's three links
    "memory_block": Envelope(id="m1", final=True, message=MemoryBlock(session="chat-1")),
    "memory_block_reply": Envelope(
        id="m1",
        final=True,
        message=MemoryBlockReply(
            text="You are Kyle's assistant.\n\n## Memory\n\nThe owner prefers tabs.",
            excluded=1,
            soul=25,
            entries=(BlockSpan(id="m-3f2a9c01b4de", kind="memory", start=38, end=61),),
        ),
    ),
    "session_updated": Envelope(id="m2", final=True, message=SessionUpdated(session="chat-1")),
    "memory_call": Envelope(
        id="c10",
        final=True,
        message=MemoryCall(
            session="chat-1",
            call="c10",
            tool="memory_recall",
            arguments='{"query":"deploy"}',
            taint=DataClass.PRIVATE,
            untrusted=False,
        ),
    ),
    "tool_response_result_untrusted": Envelope(
        id="c10",
        final=True,
        message=ResultResponse(
            content='{"entries":[{"id":"n-0123456789ab","kind":"note","text":"deploy on'
            ' fridays","untrusted":true,"time":"2026-11-30T12:00:00.000Z"}]}',
            class_=DataClass.PRIVATE,
            untrusted=True,
            truncated=False,
        ),
    ),
    "reindex": Envelope(id="o1", final=True, message=Reindex()),
    "reindexed": Envelope(id="o1", final=True, message=Reindexed(entries=12)),
    "memory_log": Envelope(id="o2", final=True, message=MemoryLog(limit=20)),
    "memory_log_reply": Envelope(
        id="o2",
        final=True,
        message=MemoryLogReply(
            lines=(
                '{"time":"2026-11-30T12:00:00.000Z","session":"chat-1","call":"c3",'
                '"taint":"private","untrusted":false,"action":"added","kind":"memory",'
                '"entry":"m-3f2a9c01b4de","removed":[],"rule":null,"entry_untrusted":false}',
            ),
            excluded=(BlockExclusion(id="m-9b1c2d3e4f50", kind="memory", rule="over-budget"),),
            excluded_more=2,
        ),
    ),
    # gatewayd's gateway.sock
    "approval_request": Envelope(
        id="approval-41",
        final=True,
        message=ApprovalRequest(
            approval=41,
            session="chat-1",
            call="c7",
            tool="shell",
            arguments='{"command":"ls","cwd":"/home/kyle/scratch"}',
            grant="scratch-shell",
            taint=DataClass.PRIVATE,
            created="2026-11-30T12:00:00.000Z",
            expires=EXPIRES,
            digest=DIGEST,
            untrusted_by=UntrustedBy(session="chat-1", call="c3", tool="read_file"),
        ),
    ),
    "approval_posted": Envelope(
        id="approval-41", final=False, message=ApprovalPosted(approval=41, post=POST)
    ),
    "approval_reply_approve": Envelope(
        id="approval-41",
        final=True,
        message=ApprovalReply(approval=41, answer=ReplyAnswer.APPROVE, by=OWNER, post=POST),
    ),
    "approval_reply_refuse": Envelope(
        id="approval-41",
        final=True,
        message=ApprovalReply(
            approval=41, answer=ReplyAnswer.REFUSE, by=OWNER, post=POST, reason="not on a friday"
        ),
    ),
    "approval_outcome_approved": Envelope(
        id="outcome-41",
        final=True,
        message=ApprovalOutcome(
            approval=41, answer=ApprovalAnswer.APPROVED, by="bxctl", outcome="runs"
        ),
    ),
    "approval_outcome_expired": Envelope(
        id="outcome-41",
        final=True,
        message=ApprovalOutcome(
            approval=41, answer=ApprovalAnswer.EXPIRED, outcome="denied (approval_expired)"
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_encode_gives_the_fixture_bytes(name: str) -> None:
    fixture = (FIXTURES / f"{name}.json").read_bytes().rstrip(b"\n")
    assert encode_envelope(CASES[name]) == fixture


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_servers_answer_gives_the_fixture_bytes(name: str) -> None:
    fixture = (FIXTURES / f"{name}.json").read_bytes().rstrip(b"\n")
    envelope = CASES[name]
    assert encode_answer(envelope.id, envelope.final, envelope.message) == fixture


@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_of_the_fixture_gives_the_value(name: str) -> None:
    fixture = (FIXTURES / f"{name}.json").read_bytes().rstrip(b"\n")
    assert decode_envelope(fixture) == CASES[name]


def test_every_kind_and_status_has_a_fixture() -> None:
    covered = set()
    for envelope in CASES.values():
        message = envelope.message
        status = getattr(message, "status", None)
        covered.add(f"{message.kind}:{status}" if status else message.kind)
    assert covered == set(message_kinds())


def test_every_turn_event_type_has_a_fixture() -> None:
    types = {e.message.event.type for e in CASES.values() if isinstance(e.message, TurnEvent)}
    assert types == {
        "reasoning",
        "content",
        "tool_call_started",
        "tool_result",
        "tool_denied",
        "approval_pending",
        "context_compacted",
        "usage",
    }


def test_every_deny_reason_round_trips() -> None:
    assert len(DenyReason) == 12
    for reason in DenyReason:
        envelope = Envelope(id="x", final=True, message=DeniedResponse(reason=reason))
        assert decode_envelope(encode_envelope(envelope)) == envelope


# design.md section 3's examples, written out here, not generated
DESIGN_EXAMPLES = {
    "tool_request": rb'{"id":"c7","final":true,"message":{"kind":"tool_request","session":"chat-1","call":"c7","tool":"read_file","arguments":"{\"path\":\"/home/kyle/notes/a.md\"}"}}',
    "tool_response_pending_approval": b'{"id":"c7","final":false,"message":{"kind":"tool_response","status":"pending_approval","approval":41,"expires":"2026-11-30T12:15:00.000Z"}}',
    "tool_response_denied": b'{"id":"c7","final":true,"message":{"kind":"tool_response","status":"denied","reason":"no_grant"}}',
    "tool_response_denied_detail": b'{"id":"c8","final":true,"message":{"kind":"tool_response","status":"denied","reason":"invalid_arguments","detail":"unknown field `file`, expected `path`"}}',
    "error": b'{"id":"a1","final":true,"message":{"kind":"error","code":"forbidden","message":"approvals is not accepted on broker.sock"}}',
}


@pytest.mark.parametrize("name", sorted(DESIGN_EXAMPLES))
def test_the_design_examples_are_encoded_exactly(name: str) -> None:
    assert encode_envelope(CASES[name]) == DESIGN_EXAMPLES[name]
