"""memoryd's messages, on its three sockets: the memory block and session updates
(loopd), the memory tools (brokerd), and the owner's reindex and log.

No I/O; part of the wire (`core.wire.envelope`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from boxmaker.core.grants.tools import RunsIn, tool_name, tool_names
from boxmaker.core.ids import CallId, Identifier, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict

# loop-memory/memory.sock: loopd asks


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


# broker-memory/memory.sock: brokerd runs the memory tools


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


# owner-memory/admin.sock: the owner's

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
