"""The audit log's records: one header and one of five events per line. Pure; no I/O.

    {"seq", "time", "prev", "event": {"type": "decision" | "approval" | "result"
                                              | "recovery" | "accepted_break", ...}}

Every model refuses unknown fields at every level and does not coerce types.
`encode_record` writes the one line the writer appends (compact JSON, keys in
design.md section 4's order, every optional field present, as `null` when empty);
`decode_record` accepts any key order and a missing optional field (read as
`null`), and raises `RecordError` (a ValueError) with one line of explanation for
anything else.

These models are the one definition of a record. The verifier reads lines
through `audit_views` first, which must never accept what these refuse.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

import orjson
from pydantic import AfterValidator, Field, ValidationError

from boxmaker.core.audit.views import U64_MAX
from boxmaker.core.errors import DamagedError
from boxmaker.core.grants.decisions import DecisionRecord
from boxmaker.core.hashes import check_hash
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.strict import Strict
from boxmaker.core.timestamps import Timestamp

Seq = Annotated[int, Field(ge=0, le=U64_MAX)]
Hash32 = Annotated[str, AfterValidator(check_hash)]  # sha256, 64 lowercase hex characters


class ApprovalAnswer(StrEnum):
    """What the owner (or the clock) said to an ask. Values are never renamed."""

    APPROVED = "approved"
    REFUSED = "refused"
    EXPIRED = "expired"


class ResultStatus(StrEnum):
    """Whether a tool call that ran produced a result or failed. Never renamed."""

    RESULT = "result"
    FAILED = "failed"


class DecisionEvent(Strict):
    """The first decision on a tool call, written before anything happens."""

    type: Literal["decision"] = "decision"
    session: SessionId
    call: CallId
    tool: str
    arguments: str  # in full, exactly as received
    outcome: DecisionRecord
    grant: str | None = None  # the matched grant's id
    grant_sha256: Hash32 | None = None  # and the hash of its file
    taint: DataClass  # the session's state when decided
    untrusted: bool


class ApprovalEvent(Strict):
    """The owner's answer to an ask, and the re-decision made with it."""

    type: Literal["approval"] = "approval"
    session: SessionId
    call: CallId
    decision: Seq  # seq of the Decision record; the approval id the owner saw
    answer: ApprovalAnswer
    by: str | None = None  # "bxctl", or a chat user id
    post: str | None = None  # the chat post id, when approved over chat
    reason: str | None = None  # the owner's text, for refusals
    outcome: DecisionRecord  # the re-decision; denied when refused or expired
    grant: str | None = None
    grant_sha256: Hash32 | None = None
    taint: DataClass
    untrusted: bool


class ResultEvent(Strict):
    """What a call that ran returned, by size and hash, never by content."""

    type: Literal["result"] = "result"
    session: SessionId
    call: CallId
    decision: Seq
    status: ResultStatus
    class_: DataClass = Field(alias="class")
    untrusted: bool
    truncated: bool
    bytes: Seq  # of the content, or of the failure message
    sha256: Hash32
    taint_after: DataClass
    flag: str | None = None  # the flag rule the content matched, which made it untrusted


class RecoveryEvent(Strict):
    """Written at startup after a line torn by a crash; describes that line."""

    type: Literal["recovery"] = "recovery"
    torn_bytes: Seq
    torn_sha256: Hash32


class AcceptedBreakEvent(Strict):
    """Written by `--accept-break`: the owner accepts the chain failure it names."""

    type: Literal["accepted_break"] = "accepted_break"
    file: str
    line: Seq  # 1-based, within `file`
    last_good: Hash32  # the last line that verified before the failure


AuditEvent = Annotated[
    DecisionEvent | ApprovalEvent | ResultEvent | RecoveryEvent | AcceptedBreakEvent,
    Field(discriminator="type"),
]


class AuditRecord(Strict):
    """One line of the audit log."""

    seq: Seq
    time: Timestamp
    prev: Hash32  # sha256 of the previous line's bytes, without its newline
    event: AuditEvent


class RecordError(DamagedError, ValueError):
    """A line is not an audit record; the text says why in one line."""


def encode_record(record: AuditRecord) -> bytes:
    """The record's line, without the newline: compact, in declaration order, nulls kept
    (but a Result's `flag`, written only when a flag rule matched)."""
    return encode_line(record.seq, record.time, record.prev, record.event)


def encode_line(seq: int, time: str, prev: str, event: AuditEvent) -> bytes:
    """The line of a record made of these parts (the writer's hot path: no model built).

    The same bytes as `orjson.dumps` of the record's `model_dump(mode="json",
    by_alias=True)` (less a Result's `flag` when None), made without pydantic's
    serialiser: orjson writes each
    model's field values (`__dict__`, in declaration order) and enums by value.
    """
    fields = event.__dict__
    if type(event) is ResultEvent:  # the one field whose key is an alias
        fields = dict(zip(_RESULT_KEYS, fields.values(), strict=True))
        if fields["flag"] is None:  # added later: absent unless set (older lines unchanged)
            del fields["flag"]
    elif "outcome" in fields:  # a nested model: its fields too
        fields = fields.copy()
        fields["outcome"] = fields["outcome"].__dict__
    return orjson.dumps({"seq": seq, "time": time, "prev": prev, "event": fields})


_RESULT_KEYS = tuple(field.alias or name for name, field in ResultEvent.model_fields.items())


def decode_record(line: bytes) -> AuditRecord:
    """The record in `line` (without its newline), in any key order; RecordError if none."""
    try:
        return AuditRecord.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the line"
        raise RecordError(f"not an audit record: {where}: {first['msg']}") from exc
