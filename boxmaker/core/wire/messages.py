"""Every message kind on boxmaker's Unix sockets, and the envelope that carries it.

No I/O. An envelope is `{"id", "final", "message"}`; `message["kind"]` selects the
model, and for `tool_response` so does `status`. Every model refuses unknown
fields and does not coerce types. `encode_envelope` writes compact JSON with
fields in declaration order and absent optional fields left out;
`decode_envelope` raises `ProtocolError(malformed)` for anything it refuses.

Each request kind and what it is answered (which socket accepts which kinds is
the link table's, `boxmaker.core.home.links`):

    request                                  answers
    tool_request                             tool_response
    approvals                                approval_list
    approve                                  approve_result
    refuse                                   ok
    check_grants                             grants_report
    checkpoint                               checkpoint_reply
    session_states                           session_state_list
    turn, compact                            turn_event..., turn_done
    sessions                                 session_list
    session_show                             session_entries
    memory_block                             memory_block_reply
    session_updated                          ok
    memory_call                              tool_response
    reindex                                  reindexed
    memory_log                               memory_log_reply
    status                                   status_report
    approval_request                         approval_posted, then approval_reply
    approval_outcome                         ok
    any                                      error

On gateway.sock (served by gatewayd, brokerd the client; docs/gatewayd.md, "The
wire") a Mattermost id (`by`, `post`) is exactly 26 characters of [a-z0-9], and
the owner's `reason` is at most MAX_REASON_CHARS characters with no control or
line-break character (categories Cc, Zl, Zp).
"""

from __future__ import annotations

import unicodedata
from enum import StrEnum
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationError

from boxmaker.core.audit.records import ApprovalAnswer, Hash32, Seq
from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.grants.decisions import DecisionRecord, DenyReason
from boxmaker.core.grants.model import GrantProblem
from boxmaker.core.grants.tools import RunsIn, tool_name, tool_names
from boxmaker.core.ids import CallId, Identifier, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp

ApprovalId = Annotated[int, Field(ge=0, le=2**64 - 1)]

# --- broker.sock -------------------------------------------------------------------


class ToolRequest(Strict):
    kind: Literal["tool_request"] = "tool_request"
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # the model's raw JSON text


class PendingApprovalResponse(Strict):
    kind: Literal["tool_response"] = "tool_response"
    status: Literal["pending_approval"] = "pending_approval"
    approval: ApprovalId
    expires: Timestamp


class ResultResponse(Strict):
    kind: Literal["tool_response"] = "tool_response"
    status: Literal["result"] = "result"
    content: str
    class_: DataClass = Field(alias="class")
    untrusted: bool
    truncated: bool


class FailedResponse(Strict):
    kind: Literal["tool_response"] = "tool_response"
    status: Literal["failed"] = "failed"
    message: str


class DeniedResponse(Strict):
    kind: Literal["tool_response"] = "tool_response"
    status: Literal["denied"] = "denied"
    reason: DenyReason
    detail: str | None = None


# --- admin.sock --------------------------------------------------------------------


class UntrustedBy(Strict):
    """The call whose result first made a session untrusted (brokerd's session state),
    and the flag rule its content matched when that, not its grant, made it untrusted."""

    session: SessionId
    call: CallId
    tool: str
    rule: str | None = None


# a digest's prefix, as the owner types it (`bxctl approve N --digest D`)
DigestPrefix = Annotated[str, Field(pattern=r"^[0-9a-f]{12,64}$")]


class PendingApproval(Strict):
    """One call waiting for the owner, as brokerd describes it (never loopd)."""

    approval: ApprovalId
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # the parsed arguments serialised again, not the raw text
    grant: str
    taint: DataClass
    created: Timestamp
    expires: Timestamp
    digest: Hash32  # what approving it binds to (`core.policy`, "What an approval is bound to")
    untrusted_by: UntrustedBy | None = None  # the session is untrusted: since this call


class Approvals(Strict):
    kind: Literal["approvals"] = "approvals"


class ApprovalList(Strict):
    kind: Literal["approval_list"] = "approval_list"
    items: tuple[PendingApproval, ...]


class Approve(Strict):
    kind: Literal["approve"] = "approve"
    approval: ApprovalId
    digest: DigestPrefix | None = None  # approve only if the approval's digest starts so


class ApproveResult(Strict):
    kind: Literal["approve_result"] = "approve_result"
    outcome: DecisionRecord


class Refuse(Strict):
    kind: Literal["refuse"] = "refuse"
    approval: ApprovalId
    reason: str | None = None


class Ok(Strict):
    kind: Literal["ok"] = "ok"


class CheckGrants(Strict):
    kind: Literal["check_grants"] = "check_grants"


class GrantsReport(Strict):
    kind: Literal["grants_report"] = "grants_report"
    problems: tuple[GrantProblem, ...]


class AuditCheckpoint(Strict):
    """Pin the audit log's head now (`bxctl audit checkpoint`; core.audit.checkpoints)."""

    kind: Literal["checkpoint"] = "checkpoint"


class CheckpointReply(Strict):
    kind: Literal["checkpoint_reply"] = "checkpoint_reply"
    seq: Seq  # the last record's seq
    head: Hash32  # the sha256 of its line
    time: Timestamp  # when brokerd took the checkpoint


class SessionStates(Strict):
    """Every session brokerd keeps state for (`bxctl sessions`)."""

    kind: Literal["session_states"] = "session_states"


class SessionStateItem(Strict):
    session: SessionId
    taint: DataClass
    untrusted: bool
    untrusted_by: UntrustedBy | None = None


class SessionStateList(Strict):
    kind: Literal["session_state_list"] = "session_state_list"
    items: tuple[SessionStateItem, ...]


# --- any socket --------------------------------------------------------------------


class Status(Strict):
    """A cheap question: are you serving? (bxctl status, the tree's health checks)."""

    kind: Literal["status"] = "status"


class StatusReport(Strict):
    kind: Literal["status_report"] = "status_report"
    role: str
    version: str
    started: Timestamp
    detail: str  # one line, the role's own summary (brokerd: the audit head)


class Error(Strict):
    kind: Literal["error"] = "error"
    code: ErrorCode
    message: str


# --- loop.sock ---------------------------------------------------------------------


class Turn(Strict):
    kind: Literal["turn"] = "turn"
    session: SessionId
    text: str
    resume: bool = False


class Compact(Strict):
    """Compact a session now (`/compact`, `bxctl sessions compact`): answered as a turn."""

    kind: Literal["compact"] = "compact"
    session: SessionId


class Sessions(Strict):
    """Every session loopd has a log for."""

    kind: Literal["sessions"] = "sessions"


class SessionSummary(Strict):
    session: SessionId
    turns: int = Field(ge=0)  # the owner's messages
    tokens: int = Field(ge=0)  # the prompt as last evaluated, its reply included
    compactions: int = Field(ge=0)
    untrusted: bool  # as loopd's log has it (brokerd's own view: `session_states`)
    last: Timestamp  # the log's last change


class SessionList(Strict):
    kind: Literal["session_list"] = "session_list"
    items: tuple[SessionSummary, ...]


class SessionShow(Strict):
    """A session's log as the owner reads it, from entry `start` on (paged to fit a frame)."""

    kind: Literal["session_show"] = "session_show"
    session: SessionId
    start: int = Field(default=0, ge=0)


EntryType = Literal["memory", "user", "model", "tool", "compaction", "notice"]


class ShownEntry(Strict):
    index: int = Field(ge=0)  # the entry's place in the log, from 0
    type: EntryType
    text: str  # cut to fit a frame when `cut` (the log file holds it all)
    name: str | None = None  # a tool result's tool
    untrusted: bool = False
    cut: bool = False


class SessionEntries(Strict):
    kind: Literal["session_entries"] = "session_entries"
    session: SessionId
    entries: tuple[ShownEntry, ...]
    next: int | None = None  # the next page's `start`; absent: the log ends here


class ReasoningEvent(Strict):
    type: Literal["reasoning"] = "reasoning"
    text: str


class ContentEvent(Strict):
    type: Literal["content"] = "content"
    text: str


class ToolCallStartedEvent(Strict):
    type: Literal["tool_call_started"] = "tool_call_started"
    call: CallId
    name: str  # as the model called it
    arguments: str


class ToolResultEvent(Strict):
    type: Literal["tool_result"] = "tool_result"
    call: CallId
    name: str  # as the model called it
    content: str
    class_: DataClass = Field(alias="class")
    untrusted: bool
    truncated: bool


class ToolDeniedEvent(Strict):
    type: Literal["tool_denied"] = "tool_denied"
    name: str  # the tool brokerd decided on
    reason: DenyReason


class ApprovalPendingEvent(Strict):
    """A notice that something waits; what it is must be asked of brokerd."""

    type: Literal["approval_pending"] = "approval_pending"
    approval: ApprovalId
    tool: str  # the tool brokerd decides on
    expires: Timestamp


class ContextCompactedEvent(Strict):
    """The older turns were replaced by a summary: the prompt's tokens before and after."""

    type: Literal["context_compacted"] = "context_compacted"
    before: int = Field(ge=0)
    after: int = Field(ge=0)


Event = Annotated[
    ReasoningEvent
    | ContentEvent
    | ToolCallStartedEvent
    | ToolResultEvent
    | ToolDeniedEvent
    | ApprovalPendingEvent
    | ContextCompactedEvent,
    Field(discriminator="type"),
]


class TurnEvent(Strict):
    kind: Literal["turn_event"] = "turn_event"
    event: Event


class TurnDone(Strict):
    kind: Literal["turn_done"] = "turn_done"
    session: SessionId
    content: str
    untrusted: bool  # the session has read untrusted content


# --- memoryd: loop-memory/memory.sock -------------------------------------------------


class MemoryBlock(Strict):
    """loopd, at a session's start: the memory block for its system prompt."""

    kind: Literal["memory_block"] = "memory_block"
    session: SessionId


class BlockSpan(Strict):
    """Where one identity entry's text lies in a block's text, in code points
    (`boxmaker.core.model.memory_block`, rule 2)."""

    id: Identifier
    kind: Literal["memory", "user"]
    start: int = Field(ge=0)
    end: int = Field(ge=0)


class MemoryBlockReply(Strict):
    kind: Literal["memory_block_reply"] = "memory_block_reply"
    text: str  # soul.md and the identity entries that pass, not yet neutralised
    excluded: int = Field(ge=0)  # identity entries left out (logged by memoryd with their rule)
    soul: int = Field(default=0, ge=0)  # code points at the head of `text` that are soul.md's
    entries: tuple[BlockSpan, ...] = ()  # the entries in `text`, in order


class SessionUpdated(Strict):
    """loopd: a turn of `session` has been logged (answered `ok`)."""

    kind: Literal["session_updated"] = "session_updated"
    session: SessionId


# --- memoryd: broker-memory/memory.sock -----------------------------------------------


def check_memory_tool(text: str) -> str:
    """`text` names a tool that runs in memoryd, by the tool table (`core.grants.tools`)."""
    tool = tool_name(text)
    if tool is None or not tool.is_memory:
        raise ValueError("tool must be one of " + ", ".join(tool_names(RunsIn.MEMORYD)))
    return text


MemoryTool = Annotated[str, AfterValidator(check_memory_tool)]


class MemoryCall(Strict):
    """brokerd, after granting a memory tool call: answered by one `tool_response`."""

    kind: Literal["memory_call"] = "memory_call"
    session: SessionId
    call: CallId
    tool: MemoryTool
    arguments: str  # the call's arguments as compact JSON text
    taint: DataClass  # the session's taint
    untrusted: bool  # the session has read untrusted content


# --- memoryd: owner-memory/admin.sock -------------------------------------------------

MAX_MEMORY_LOG = 1000  # journal lines in one answer (each a few hundred bytes)


class Reindex(Strict):
    kind: Literal["reindex"] = "reindex"


class Reindexed(Strict):
    kind: Literal["reindexed"] = "reindexed"
    entries: int = Field(ge=0)


class MemoryLog(Strict):
    kind: Literal["memory_log"] = "memory_log"
    limit: int = Field(ge=1, le=MAX_MEMORY_LOG)  # the last `limit` journal lines


MAX_LOG_EXCLUDED = 1000  # entries left out of the block named in one memory_log_reply


class BlockExclusion(Strict):
    """An identity entry the memory block leaves out now, and the rule that does."""

    id: Identifier
    kind: Literal["memory", "user"]
    rule: str = Field(min_length=1, max_length=128)


class MemoryLogReply(Strict):
    kind: Literal["memory_log_reply"] = "memory_log_reply"
    lines: tuple[str, ...]  # journal lines, oldest first, without their line feed
    # what the block leaves out now, in block order: the first MAX_LOG_EXCLUDED, and
    # how many more there are
    excluded: tuple[BlockExclusion, ...] = Field(default=(), max_length=MAX_LOG_EXCLUDED)
    excluded_more: int = Field(default=0, ge=0)


# --- gatewayd: gateway/gateway.sock -------------------------------------------------

MATTERMOST_ID_CHARS = 26
MAX_REASON_CHARS = 1000
MAX_OUTCOME_CHARS = 200
BY_BXCTL = "bxctl"  # who answered, when the owner used bxctl (audit `by`)
_LINE_BREAKING = frozenset({"Cc", "Zl", "Zp"})


def is_mattermost_id(text: str) -> bool:
    """True for exactly 26 characters of [a-z0-9] (a Mattermost user, post or channel id)."""
    return len(text) == MATTERMOST_ID_CHARS and all(
        c in "abcdefghijklmnopqrstuvwxyz0123456789" for c in text
    )


def check_mattermost_id(text: str) -> str:
    if not is_mattermost_id(text):
        raise ValueError("a Mattermost id is exactly 26 characters of a-z 0-9")
    return text


def check_one_line(text: str, limit: int) -> str:
    """`text` if it is 1 to `limit` characters with no control or line-break character."""
    if not 1 <= len(text) <= limit:
        raise ValueError(f"must be 1 to {limit} characters")
    if any(unicodedata.category(char) in _LINE_BREAKING for char in text):
        raise ValueError("must not contain a control or line-break character")
    return text


def check_reason(text: str) -> str:
    return check_one_line(text, MAX_REASON_CHARS)


def check_outcome(text: str) -> str:
    return check_one_line(text, MAX_OUTCOME_CHARS)


def check_outcome_by(text: str) -> str:
    if text != BY_BXCTL and not is_mattermost_id(text):
        raise ValueError("by is bxctl or a Mattermost user id (26 characters of a-z 0-9)")
    return text


MattermostId = Annotated[str, AfterValidator(check_mattermost_id)]
Reason = Annotated[str, AfterValidator(check_reason)]
OutcomeBy = Annotated[str, AfterValidator(check_outcome_by)]
Outcome = Annotated[str, AfterValidator(check_outcome)]


class ReplyAnswer(StrEnum):
    """What the owner answered in chat. Values are never renamed."""

    APPROVE = "approve"
    REFUSE = "refuse"


class ApprovalRequest(Strict):
    """brokerd: post this approval (the fields of its `PendingApproval`, never model text)."""

    kind: Literal["approval_request"] = "approval_request"
    approval: ApprovalId
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # the parsed arguments serialised again, not the raw text
    grant: str
    taint: DataClass
    created: Timestamp
    expires: Timestamp
    digest: Hash32
    untrusted_by: UntrustedBy | None = None

    @classmethod
    def of(cls, item: PendingApproval) -> ApprovalRequest:
        return cls.model_validate(item.model_dump())

    def item(self) -> PendingApproval:
        return PendingApproval.model_validate(self.model_dump(exclude={"kind"}))


class ApprovalPosted(Strict):
    """gatewayd (not final): the approval's post exists, with this id."""

    kind: Literal["approval_posted"] = "approval_posted"
    approval: ApprovalId
    post: MattermostId


class ApprovalReply(Strict):
    """gatewayd (final): the owner answered the post in chat."""

    kind: Literal["approval_reply"] = "approval_reply"
    approval: ApprovalId
    answer: ReplyAnswer
    by: MattermostId  # the owner's Mattermost user id
    post: MattermostId  # the approval's post (as in `approval_posted`)
    reason: Reason | None = None  # the owner's words after `refuse <id>`; absent: none


class ApprovalOutcome(Strict):
    """brokerd: how a posted approval was settled, whoever settled it (answered `ok`)."""

    kind: Literal["approval_outcome"] = "approval_outcome"
    approval: ApprovalId
    answer: ApprovalAnswer
    by: OutcomeBy | None = None  # bxctl, the owner's user id, or absent (expired, abandoned)
    outcome: Outcome  # one line: `runs`, `denied (approval_refused)`


# --- the union and the envelope ----------------------------------------------------

ToolResponse = PendingApprovalResponse | ResultResponse | FailedResponse | DeniedResponse

_KINDS: dict[str, type[Strict]] = {
    "tool_request": ToolRequest,
    "tool_response:pending_approval": PendingApprovalResponse,
    "tool_response:result": ResultResponse,
    "tool_response:failed": FailedResponse,
    "tool_response:denied": DeniedResponse,
    "approvals": Approvals,
    "approval_list": ApprovalList,
    "approve": Approve,
    "approve_result": ApproveResult,
    "refuse": Refuse,
    "ok": Ok,
    "check_grants": CheckGrants,
    "grants_report": GrantsReport,
    "checkpoint": AuditCheckpoint,
    "checkpoint_reply": CheckpointReply,
    "session_states": SessionStates,
    "session_state_list": SessionStateList,
    "error": Error,
    "status": Status,
    "status_report": StatusReport,
    "turn": Turn,
    "turn_event": TurnEvent,
    "turn_done": TurnDone,
    "compact": Compact,
    "sessions": Sessions,
    "session_list": SessionList,
    "session_show": SessionShow,
    "session_entries": SessionEntries,
    "memory_block": MemoryBlock,
    "memory_block_reply": MemoryBlockReply,
    "session_updated": SessionUpdated,
    "memory_call": MemoryCall,
    "reindex": Reindex,
    "reindexed": Reindexed,
    "memory_log": MemoryLog,
    "memory_log_reply": MemoryLogReply,
    "approval_request": ApprovalRequest,
    "approval_posted": ApprovalPosted,
    "approval_reply": ApprovalReply,
    "approval_outcome": ApprovalOutcome,
}


def _tag(value: Any) -> str | None:
    if isinstance(value, dict):
        kind, status = value.get("kind"), value.get("status")
    else:
        kind, status = getattr(value, "kind", None), getattr(value, "status", None)
    if kind == "tool_response":
        return f"tool_response:{status}"
    return kind if isinstance(kind, str) else None


Message = Annotated[
    Annotated[ToolRequest, Tag("tool_request")]
    | Annotated[PendingApprovalResponse, Tag("tool_response:pending_approval")]
    | Annotated[ResultResponse, Tag("tool_response:result")]
    | Annotated[FailedResponse, Tag("tool_response:failed")]
    | Annotated[DeniedResponse, Tag("tool_response:denied")]
    | Annotated[Approvals, Tag("approvals")]
    | Annotated[ApprovalList, Tag("approval_list")]
    | Annotated[Approve, Tag("approve")]
    | Annotated[ApproveResult, Tag("approve_result")]
    | Annotated[Refuse, Tag("refuse")]
    | Annotated[Ok, Tag("ok")]
    | Annotated[CheckGrants, Tag("check_grants")]
    | Annotated[GrantsReport, Tag("grants_report")]
    | Annotated[AuditCheckpoint, Tag("checkpoint")]
    | Annotated[CheckpointReply, Tag("checkpoint_reply")]
    | Annotated[SessionStates, Tag("session_states")]
    | Annotated[SessionStateList, Tag("session_state_list")]
    | Annotated[Error, Tag("error")]
    | Annotated[Status, Tag("status")]
    | Annotated[StatusReport, Tag("status_report")]
    | Annotated[Turn, Tag("turn")]
    | Annotated[TurnEvent, Tag("turn_event")]
    | Annotated[TurnDone, Tag("turn_done")]
    | Annotated[Compact, Tag("compact")]
    | Annotated[Sessions, Tag("sessions")]
    | Annotated[SessionList, Tag("session_list")]
    | Annotated[SessionShow, Tag("session_show")]
    | Annotated[SessionEntries, Tag("session_entries")]
    | Annotated[MemoryBlock, Tag("memory_block")]
    | Annotated[MemoryBlockReply, Tag("memory_block_reply")]
    | Annotated[SessionUpdated, Tag("session_updated")]
    | Annotated[MemoryCall, Tag("memory_call")]
    | Annotated[Reindex, Tag("reindex")]
    | Annotated[Reindexed, Tag("reindexed")]
    | Annotated[MemoryLog, Tag("memory_log")]
    | Annotated[MemoryLogReply, Tag("memory_log_reply")]
    | Annotated[ApprovalRequest, Tag("approval_request")]
    | Annotated[ApprovalPosted, Tag("approval_posted")]
    | Annotated[ApprovalReply, Tag("approval_reply")]
    | Annotated[ApprovalOutcome, Tag("approval_outcome")],
    Discriminator(
        _tag,
        custom_error_type="unknown_kind",
        custom_error_message="not a known message kind",
    ),
]


class Envelope(Strict):
    id: Identifier
    final: bool
    message: Message


def message_kinds() -> tuple[str, ...]:
    """Every tag the union knows (`tool_response:<status>` for the four statuses)."""
    return tuple(_KINDS)


def encode_envelope(envelope: Envelope) -> bytes:
    """Compact JSON, fields in declaration order, absent optional fields left out."""
    return encode_answer(envelope.id, envelope.final, envelope.message)


def encode_answer(request_id: str, final: bool, message: Message) -> bytes:
    """The bytes of the envelope of these parts, without building (validating) it.

    For a server's answers: `message` is a model built (so validated) by the
    server, and `request_id` the id of a request it decoded (so an Identifier).
    """
    dumped = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    return orjson.dumps({"id": request_id, "final": final, "message": dumped})


def decode_envelope(payload: bytes) -> Envelope:
    """The envelope in `payload`; ProtocolError(malformed) with a one-line reason if not."""
    try:
        return Envelope.model_validate_json(payload)
    except ValidationError as exc:
        raise ProtocolError(ErrorCode.MALFORMED, _one_line(exc)) from exc


def _one_line(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "the frame"
    extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{extra}"
