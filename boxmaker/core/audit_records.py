"""The audit log's records: one header and one of five events per line. Pure; no I/O.

    {"seq", "time", "prev", "event": {"type": "decision" | "approval" | "result"
                                              | "recovery" | "accepted_break", ...}}

Every model refuses unknown fields at every level and does not coerce types.
`encode_record` writes the one line the writer appends (compact JSON, keys in
design.md section 4's order, every optional field present, as `null` when empty);
`decode_record` accepts any key order and a missing optional field (read as
`null`), and raises `RecordError` (a ValueError) with one line of explanation for
anything else.

`check_record` is the verifier's fast path: it takes the object `orjson.loads`
made of a line and answers `True` only for an object that `decode_record` would
accept with every field present. Anything it does not vouch for is decided by
`decode_record`, so the pydantic models stay the one definition of a record.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, ValidationError

from boxmaker.core.decisions import DecisionRecord, DenyReason, Strict
from boxmaker.core.hashes import Hash32
from boxmaker.core.ids import CallId, SessionId
from boxmaker.core.labels import DataClass
from boxmaker.core.timestamps import Timestamp, parse_timestamp

U64_MAX = 2**64 - 1

Seq = Annotated[int, Field(ge=0, le=U64_MAX)]


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


class RecordError(ValueError):
    """A line is not an audit record; the text says why in one line."""


def encode_record(record: AuditRecord) -> bytes:
    """The record's line, without the newline: compact, in declaration order, nulls kept."""
    return encode_line(record.seq, record.time, record.prev, record.event)


def encode_line(seq: int, time: str, prev: str, event: AuditEvent) -> bytes:
    """The line of a record made of these parts (the writer's hot path: no model built)."""
    body = event.model_dump(mode="json", by_alias=True)
    return orjson.dumps({"seq": seq, "time": time, "prev": prev, "event": body})


def decode_record(line: bytes) -> AuditRecord:
    """The record in `line` (without its newline), in any key order; RecordError if none."""
    try:
        return AuditRecord.model_validate_json(line)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "the line"
        raise RecordError(f"not an audit record: {where}: {first['msg']}") from exc


# --- the fast path ----------------------------------------------------------------

_TIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{3}Z"
)
_HEX = re.compile(r"[0-9a-f]{64}")
_ID = re.compile(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}")
_CLASSES = frozenset(c.value for c in DataClass)
_REASONS = frozenset(r.value for r in DenyReason)
_ANSWERS = frozenset(a.value for a in ApprovalAnswer)
_STATUSES = frozenset(s.value for s in ResultStatus)
_SIZES = {
    "decision": len(DecisionEvent.model_fields),
    "approval": len(ApprovalEvent.model_fields),
    "result": len(ResultEvent.model_fields),
    "recovery": len(RecoveryEvent.model_fields),
    "accepted_break": len(AcceptedBreakEvent.model_fields),
}
_ALLOWED = {"outcome": "allowed"}
_ASK = {"outcome": "ask"}


class FastCheck:
    """`check(obj, prev)`: True only if `obj` is a record `decode_record` accepts in full.

    `obj` is what `orjson.loads` made of a line; `prev` is the hash the caller
    expects in its `prev` (a value already known to be a hash, or None). It
    remembers the identifiers, hashes and dates it has checked (a bounded memory),
    so values that repeat from line to line are checked once. Exactly the keys of
    the model must be present: a dict of the right size whose every key is read
    has no other. False means "not vouched for", never "invalid": the caller asks
    `decode_record` then.
    """

    __slots__ = ("_dates", "_hashes", "_ids")

    _LIMIT = 65536

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._hashes: set[str] = set()
        self._dates: set[str] = set()

    def check(self, obj: Any, prev: str | None = None) -> bool:
        try:
            return self._check(obj, prev)
        except (KeyError, TypeError):  # a missing key, or an unhashable value
            return False

    def _check(self, obj: Any, expected_prev: str | None) -> bool:
        if type(obj) is not dict or len(obj) != 4:
            return False
        seq, time, prev, event = obj["seq"], obj["time"], obj["prev"], obj["event"]
        if type(seq) is not int or seq < 0 or seq > U64_MAX:
            return False
        if (expected_prev is None or prev != expected_prev) and not _is_hash(prev):
            return False
        if type(time) is not str or _TIME.fullmatch(time) is None:
            return False
        if time[:10] not in self._dates and not self._learn_date(time):
            return False
        if type(event) is not dict:
            return False
        kind = event["type"]
        size = len(event)
        if kind == "decision" and size == _SIZES["decision"]:
            return (
                self._id(event["session"])
                and self._id(event["call"])
                and type(event["tool"]) is str
                and type(event["arguments"]) is str
                and _is_outcome(event["outcome"])
                and self._grant(event["grant"], event["grant_sha256"])
                and event["taint"] in _CLASSES
                and type(event["untrusted"]) is bool
            )
        if kind == "result" and size == _SIZES["result"]:
            return (
                self._id(event["session"])
                and self._id(event["call"])
                and _is_seq(event["decision"])
                and event["status"] in _STATUSES
                and event["class"] in _CLASSES
                and type(event["untrusted"]) is bool
                and type(event["truncated"]) is bool
                and _is_seq(event["bytes"])
                and _is_hash(event["sha256"])
                and event["taint_after"] in _CLASSES
            )
        if kind == "approval" and size == _SIZES["approval"]:
            return (
                self._id(event["session"])
                and self._id(event["call"])
                and _is_seq(event["decision"])
                and event["answer"] in _ANSWERS
                and _is_optional_str(event["by"])
                and _is_optional_str(event["post"])
                and _is_optional_str(event["reason"])
                and _is_outcome(event["outcome"])
                and self._grant(event["grant"], event["grant_sha256"])
                and event["taint"] in _CLASSES
                and type(event["untrusted"]) is bool
            )
        if kind == "recovery" and size == _SIZES["recovery"]:
            return _is_seq(event["torn_bytes"]) and _is_hash(event["torn_sha256"])
        if kind == "accepted_break" and size == _SIZES["accepted_break"]:
            return (
                type(event["file"]) is str
                and _is_seq(event["line"])
                and _is_hash(event["last_good"])
            )
        return False

    def _learn_date(self, time: str) -> bool:
        try:
            parse_timestamp(time)
        except ValueError:
            return False
        _remember(self._dates, time[:10])
        return True

    def _id(self, text: Any) -> bool:
        if text in self._ids:
            return True
        if type(text) is not str or _ID.fullmatch(text) is None:
            return False
        _remember(self._ids, text)
        return True

    def _grant(self, grant: Any, digest: Any) -> bool:
        if grant is not None and type(grant) is not str:
            return False
        if digest is None or digest in self._hashes:
            return True
        if not _is_hash(digest):
            return False
        _remember(self._hashes, digest)
        return True


def _remember(known: set[str], text: str) -> None:
    if len(known) >= FastCheck._LIMIT:
        known.clear()
    known.add(text)


def _is_seq(value: Any) -> bool:
    return type(value) is int and 0 <= value <= U64_MAX


def _is_hash(value: Any) -> bool:
    return type(value) is str and _HEX.fullmatch(value) is not None


def _is_optional_str(value: Any) -> bool:
    return value is None or type(value) is str


def _is_outcome(value: Any) -> bool:
    if type(value) is not dict:
        return False
    if value in (_ALLOWED, _ASK):
        return True
    return len(value) == 2 and value["outcome"] == "denied" and value["reason"] in _REASONS


# --- file names -------------------------------------------------------------------

_FILE_NAME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl")


def audit_file_name(time: str) -> str:
    """The file a record with this `time` starts in: `YYYY-MM-DD.jsonl`, its UTC date."""
    return f"{time[:10]}.jsonl"


def is_audit_file_name(name: str) -> bool:
    """Whether `name` is one of the log's files (others in the directory are not read)."""
    return _FILE_NAME.fullmatch(name) is not None
