"""Audit records: the writer's exact line, decoding in any order, and refusals."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from boxmaker.core.audit.records import (
    AcceptedBreakEvent,
    ApprovalAnswer,
    ApprovalEvent,
    AuditRecord,
    DecisionEvent,
    RecordError,
    RecoveryEvent,
    ResultEvent,
    ResultStatus,
    decode_record,
    encode_record,
)
from boxmaker.core.audit.views import Vouch, view_of_model, vouched_view
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.hashes import ZERO_HASH
from boxmaker.core.labels import DataClass

DESIGN_LINE = (
    b'{"seq":0,"time":"2026-11-30T12:00:00.000Z","prev":"' + ZERO_HASH.encode() + b'",'
    b'"event":{"type":"decision","session":"chat-1","call":"c1","tool":"read_file",'
    b'"arguments":"{\\"path\\":\\"/x\\"}","outcome":{"outcome":"denied","reason":"no_grant"},'
    b'"grant":null,"grant_sha256":null,"taint":"private","untrusted":false}}'
)
H = "ab" * 32


def _events() -> list[Any]:
    return [
        DecisionEvent(
            session="chat-1",
            call="c1",
            tool="read_file",
            arguments='{"path":"/x"}',
            outcome=AllowedRecord(),
            grant="notes",
            grant_sha256=H,
            taint=DataClass.SECRET,
            untrusted=True,
        ),
        ApprovalEvent(
            session="chat-1",
            call="c1",
            decision=4,
            answer=ApprovalAnswer.REFUSED,
            by="bxctl",
            reason="no",
            outcome=DeniedRecord(reason=DenyReason.APPROVAL_REFUSED),
            taint=DataClass.PRIVATE,
            untrusted=False,
        ),
        ResultEvent.model_validate(
            {
                "session": "chat-1",
                "call": "c1",
                "decision": 4,
                "status": ResultStatus.FAILED,
                "class": DataClass.PUBLIC,
                "untrusted": False,
                "truncated": True,
                "bytes": 12,
                "sha256": H,
                "taint_after": DataClass.PRIVATE,
            }
        ),
        RecoveryEvent(torn_bytes=7, torn_sha256=H),
        AcceptedBreakEvent(file="2026-11-30.jsonl", line=3, last_good=ZERO_HASH),
    ]


def test_the_line_is_design_md_sections_4_example() -> None:
    record = AuditRecord(
        seq=0,
        time="2026-11-30T12:00:00.000Z",
        prev=ZERO_HASH,
        event=DecisionEvent(
            session="chat-1",
            call="c1",
            tool="read_file",
            arguments='{"path":"/x"}',
            outcome=DeniedRecord(reason=DenyReason.NO_GRANT),
            taint=DataClass.PRIVATE,
            untrusted=False,
        ),
    )
    assert encode_record(record) == DESIGN_LINE
    assert decode_record(DESIGN_LINE) == record


@pytest.mark.parametrize("event", _events(), ids=lambda e: e.type)
def test_every_event_round_trips_with_every_key_present(event: Any) -> None:
    record = AuditRecord(seq=5, time="2026-11-30T12:00:00.000Z", prev=H, event=event)
    line = encode_record(record)
    assert decode_record(line) == record
    assert vouched_view(line, Vouch()) == view_of_model(
        record.model_dump(mode="json", by_alias=True)
    )
    keys = [f.alias or n for n, f in type(event).model_fields.items()]
    if event.type == "result" and event.flag is None:
        keys.remove("flag")  # written only when a flag rule matched
    assert list(orjson.loads(line)["event"]) == keys


def test_a_result_names_its_flag_rule_only_when_one_matched() -> None:
    (result,) = (event for event in _events() if event.type == "result")
    for flag in (None, "ignore-instructions"):
        event = result.model_copy(update={"flag": flag})
        record = AuditRecord(seq=5, time="2026-11-30T12:00:00.000Z", prev=H, event=event)
        line = encode_record(record)
        assert decode_record(line) == record
        assert orjson.loads(line)["event"].get("flag") == flag
        assert ("flag" in orjson.loads(line)["event"]) is (flag is not None)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    return value


@pytest.mark.parametrize("seed", range(5))
def test_any_key_order_decodes(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (a shuffle, not a secret)
    for event in _events():
        record = AuditRecord(seq=1, time="2026-11-30T12:00:00.000Z", prev=H, event=event)
        line = orjson.dumps(_shuffled(orjson.loads(encode_record(record)), rng))
        assert decode_record(line) == record


def test_a_missing_optional_field_reads_as_null() -> None:
    obj = orjson.loads(DESIGN_LINE)
    del obj["event"]["grant"]
    assert decode_record(orjson.dumps(obj)).event.grant is None  # type: ignore[union-attr]


def _edit(path: str, value: Any) -> bytes:
    obj = orjson.loads(DESIGN_LINE)
    *parents, last = path.split(".")
    target = obj
    for key in parents:
        target = target[key]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return orjson.dumps(obj)


_DELETE = object()

REFUSED = {
    "unknown-header-field": _edit("extra", 1),
    "unknown-event-field": _edit("event.extra", 1),
    "unknown-outcome-field": _edit("event.outcome", {"outcome": "allowed", "x": 1}),
    "ask-with-reason": _edit("event.outcome", {"outcome": "ask", "reason": "no_grant"}),
    "unknown-type": _edit("event.type", "nope"),
    "unknown-reason": _edit("event.outcome.reason", "because"),
    "seq-as-string": _edit("seq", "0"),
    "seq-as-bool": _edit("seq", False),
    "seq-as-float": _edit("seq", 0.0),
    "seq-negative": _edit("seq", -1),
    "seq-over-u64": DESIGN_LINE.replace(b'"seq":0', b'"seq":18446744073709551616'),
    "time-without-ms": _edit("time", "2026-11-30T12:00:00Z"),
    "time-not-a-date": _edit("time", "2026-02-30T12:00:00.000Z"),
    "prev-upper-case": _edit("prev", "AB" * 32),
    "prev-short": _edit("prev", "ab"),
    "bad-session": _edit("event.session", "../etc"),
    "taint-unknown": _edit("event.taint", "top"),
    "untrusted-as-int": _edit("event.untrusted", 0),
    "missing-required": _edit("event.tool", _DELETE),
    "missing-event": _edit("event", _DELETE),
    "not-json": b'{"seq":0',
    "not-utf8": b"\xff\xfe",
    "an-array": b"[]",
    "empty": b"",
}


@pytest.mark.parametrize("line", REFUSED.values(), ids=REFUSED.keys())
def test_refused(line: bytes) -> None:
    with pytest.raises(RecordError, match=r"^not an audit record: "):
        decode_record(line)
    assert vouched_view(line, Vouch()) is None  # nor does the verifier's fast path take it


def test_an_untrusted_ask_line_names_why_and_an_old_ask_line_still_reads() -> None:
    event = DecisionEvent(
        session="chat-1",
        call="c2",
        tool="write_file",
        arguments='{"path":"/s/a","content":"x"}',
        outcome=AskRecord(why="untrusted"),
        grant="scratch-write",
        grant_sha256=H,
        taint=DataClass.PRIVATE,
        untrusted=True,
    )
    line = encode_record(AuditRecord(seq=3, time="2026-11-30T12:00:00.000Z", prev=H, event=event))
    assert b'"outcome":{"outcome":"ask","why":"untrusted"}' in line
    plain = event.model_copy(update={"outcome": AskRecord()})
    plain_line = encode_record(
        AuditRecord(seq=3, time="2026-11-30T12:00:00.000Z", prev=H, event=plain)
    )
    assert b'"outcome":{"outcome":"ask","why":null}' in plain_line
    # a line written before `why` existed
    old = plain_line.replace(b',"why":null', b"")
    assert decode_record(old).event == plain
    assert vouched_view(old, Vouch()) is not None  # the verifier's fast path takes it too
    assert vouched_view(line, Vouch()) is not None
    with pytest.raises(RecordError):
        decode_record(line.replace(b'"why":"untrusted"', b'"why":"other"'))


def test_a_u64_max_seq_is_a_seq() -> None:
    line = DESIGN_LINE.replace(b'"seq":0', b'"seq":18446744073709551615')
    assert decode_record(line).seq == 2**64 - 1
