"""broker.sock's messages: a tool call and the four ways brokerd answers it.

No I/O; part of the wire (`core.wire.envelope`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp
from boxmaker.core.wire.common import ApprovalId


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


ToolResponse = PendingApprovalResponse | ResultResponse | FailedResponse | DeniedResponse
