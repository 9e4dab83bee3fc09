"""The envelope and the union of every message kind on boxmaker's Unix sockets.

No I/O. The kinds are defined per socket (`core.wire.broker`, `broker_admin`,
`loop`, `memory`, `gateway`, and `common` for what every socket knows); the union
`Message` here is their one list, and `message_kinds` is read from it. An envelope
is `{"id", "final", "message"}`; `message["kind"]` selects the model, and for
`tool_response` so does `status`. Every model refuses unknown fields and does not
coerce types. `encode_envelope` writes compact JSON with
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
    cancel                                   cancelled
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
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

import orjson
from pydantic import Discriminator, Tag, ValidationError

from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.ids import Identifier
from boxmaker.core.strict import Strict
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
    Refuse,
    SessionStateList,
    SessionStates,
)
from boxmaker.core.wire.common import Error, Ok, Status, StatusReport
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
)
from boxmaker.core.wire.loop import (
    Cancel,
    Cancelled,
    Compact,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    Turn,
    TurnDone,
    TurnEvent,
)
from boxmaker.core.wire.memory import (
    MemoryBlock,
    MemoryBlockReply,
    MemoryCall,
    MemoryLog,
    MemoryLogReply,
    Reindex,
    Reindexed,
    SessionUpdated,
)


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
    | Annotated[Cancel, Tag("cancel")]
    | Annotated[Cancelled, Tag("cancelled")]
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


def _members() -> dict[str, type[Strict]]:
    """Each member of `Message` by its tag, read from the union itself."""
    union, _discriminator = get_args(Message)
    members: dict[str, type[Strict]] = {}
    for member in get_args(union):
        cls, tag = get_args(member)
        members[tag.tag] = cls
    return members


_KINDS = _members()


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
