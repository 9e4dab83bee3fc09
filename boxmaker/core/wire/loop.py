"""loop.sock's messages: turns and their events, compaction, the owner's session views.

No I/O; part of the wire (`core.wire.envelope`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp
from boxmaker.core.wire.common import ApprovalId


class Turn(Strict):
    kind: Literal["turn"] = "turn"
    session: SessionId
    text: str
    resume: bool = False


class Compact(Strict):
    """Compact a session now (`/compact`, `bxctl sessions compact`): answered as a turn."""

    kind: Literal["compact"] = "compact"
    session: SessionId


class Cancel(Strict):
    """Stop a session's running turn at its next token (the owner's Ctrl-C, issue 42)."""

    kind: Literal["cancel"] = "cancel"
    session: SessionId


class Cancelled(Strict):
    """`cancel`'s answer: whether a turn of the session was running (it then ends with
    its own turn_done, to its own client)."""

    kind: Literal["cancelled"] = "cancelled"
    session: SessionId
    running: bool


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


class UsageEvent(Strict):
    """After each reply of the model: what its prompt filled and how fast it wrote.

    For the owner's status line only; nothing decides on it.
    """

    type: Literal["usage"] = "usage"
    prompt: int = Field(ge=0)  # the prompt's tokens, as the model read them
    generated: int = Field(ge=0)  # the reply's tokens
    context: int | None = Field(default=None, ge=1)  # the model's context; absent: not known
    seconds: float = Field(ge=0)  # from the reply's first token to its last


Event = Annotated[
    ReasoningEvent
    | ContentEvent
    | ToolCallStartedEvent
    | ToolResultEvent
    | ToolDeniedEvent
    | ApprovalPendingEvent
    | ContextCompactedEvent
    | UsageEvent,
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
