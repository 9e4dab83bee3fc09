"""The verifier's fast path: it never accepts what the models refuse, and agrees with them.

`vouched_view` (msgspec decoding, then `Vouch`) is only a shortcut: the pydantic
models in `audit_records` define a record. These tests hold the two together:
every writer line in range is taken by the fast path and read the same as the
models read it; no edit makes the fast path take a line the models refuse; and
the values the fast path leaves to the models are ones they accept.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, get_args

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.audit import views as V  # noqa: N812 (read as the module's prefix)
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
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.labels import DataClass

H = "ab" * 32
T = "2026-11-30T12:00:00.000Z"


def fast(line: bytes) -> V.RecordView | None:
    return V.vouched_view(line, V.Vouch())


def models(line: bytes) -> V.RecordView | None:
    """The view of what the models read in `line`, or None if they refuse it."""
    try:
        record = decode_record(line)
    except RecordError:
        return None
    return V.view_of_model(record.model_dump(mode="json", by_alias=True))


def agree(line: bytes) -> V.RecordView | None:
    """The fast path's view; if it has one, the models read the same record."""
    view = fast(line)
    if view is not None:
        assert models(line) == view, line
    return view


# --- the two descriptions name the same things -------------------------------------


@pytest.mark.parametrize(
    ("literal", "enum"),
    [
        (V.Class, DataClass),
        (V.Answer, ApprovalAnswer),
        (V.Status, ResultStatus),
    ],
    ids=["class", "answer", "status"],
)
def test_each_literal_is_its_enum(literal: Any, enum: Any) -> None:
    assert set(get_args(literal)) == {member.value for member in enum}


@pytest.mark.parametrize(
    ("view", "model"),
    [
        (V.DecisionView, DecisionEvent),
        (V.ApprovalView, ApprovalEvent),
        (V.ResultView, ResultEvent),
        (V.RecoveryView, RecoveryEvent),
        (V.AcceptedBreakView, AcceptedBreakEvent),
        (V.RecordView, AuditRecord),
    ],
    ids=lambda c: c.__name__,
)
def test_each_view_has_its_models_fields(view: Any, model: Any) -> None:
    names = {field.alias or name for name, field in model.model_fields.items()} - {"type"}
    encoded = {field.encode_name for field in msgspec.structs.fields(view)}
    assert encoded == names


# --- records of every shape -------------------------------------------------------

_ids = st.from_regex(r"[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,20}", fullmatch=True)
_hashes = st.text("0123456789abcdef", min_size=64, max_size=64)
_text = st.text(max_size=20)  # any unicode, control characters and escapes included
_u63 = st.integers(0, 2**63 - 1)
_classes = st.sampled_from(list(DataClass))
_outcomes = st.one_of(
    st.just(AllowedRecord()),
    st.just(AskRecord()),
    st.builds(DeniedRecord, reason=st.sampled_from(list(DenyReason))),
)
_times = st.datetimes(
    min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)
).map(lambda d: f"{d.year:04d}-{d:%m-%dT%H:%M:%S}.{d.microsecond // 1000:03d}Z")
_events = st.one_of(
    st.builds(
        DecisionEvent,
        session=_ids,
        call=_ids,
        tool=_text,
        arguments=_text,
        outcome=_outcomes,
        grant=st.none() | _text,
        grant_sha256=st.none() | _hashes,
        taint=_classes,
        untrusted=st.booleans(),
    ),
    st.builds(
        ApprovalEvent,
        session=_ids,
        call=_ids,
        decision=_u63,
        answer=st.sampled_from(list(ApprovalAnswer)),
        by=st.none() | _text,
        post=st.none() | _text,
        reason=st.none() | _text,
        outcome=_outcomes,
        grant=st.none() | _text,
        grant_sha256=st.none() | _hashes,
        taint=_classes,
        untrusted=st.booleans(),
    ),
    st.builds(
        lambda session, call, decision, status, cls, flags, size, digest, after: (
            ResultEvent.model_validate(
                {
                    "session": session,
                    "call": call,
                    "decision": decision,
                    "status": status,
                    "class": cls,
                    "untrusted": flags[0],
                    "truncated": flags[1],
                    "bytes": size,
                    "sha256": digest,
                    "taint_after": after,
                }
            )
        ),
        _ids,
        _ids,
        _u63,
        st.sampled_from(list(ResultStatus)),
        _classes,
        st.tuples(st.booleans(), st.booleans()),
        _u63,
        _hashes,
        _classes,
    ),
    st.builds(RecoveryEvent, torn_bytes=_u63, torn_sha256=_hashes),
    st.builds(AcceptedBreakEvent, file=_text, line=_u63, last_good=_hashes),
)
_records = st.builds(AuditRecord, seq=_u63, time=_times, prev=_hashes, event=_events)


@settings(max_examples=1000)
@given(_records)
def test_every_writer_line_in_range_is_taken_and_read_as_the_models_read_it(
    record: AuditRecord,
) -> None:
    line = encode_record(record)
    # the writer's own encoder makes exactly what pydantic's dump would (a Result's flag
    # written only when set)
    dumped = record.model_dump(mode="json", by_alias=True)
    if dumped["event"].get("flag", "") is None:
        del dumped["event"]["flag"]
    assert line == orjson.dumps(dumped)
    view = agree(line)
    assert view is not None, line


# Values put in place of one field: the kinds of thing the models refuse, and a
# few they accept, so the fast path must neither take the first nor misread the second.
_TRICKY: list[Any] = [
    None, True, False, 0, -1, 1.0, 2**63 - 1, 2**63, 2**64 - 1, 2**64, "", ".", "..", "a/b",
    "a" * 128, "a" * 129, "A" * 64, "ab" * 31 + " a", "ab" * 31 + "\u0661\u0662", H, "é" * 64,
    T, "2026-11-30T24:00:00.000Z", "2026-11-30T12:60:00.000Z", "2026-11-30T12:00:60.000Z",
    "2026-02-29T12:00:00.000Z", "2024-02-29T12:00:00.000Z", "2026-02-30T12:00:00.000Z",
    "0000-01-01T00:00:00.000Z", "2026-13-01T00:00:00.000Z", "2026-11-30t12:00:00.000Z",
    "2026-11-30T12:00:00.000z", "2026-11-30 12:00:00.000Z", "2026-11-30T12:00:00,000Z",
    "\u0662\u0660\u0662\u0666-11-30T12:00:00.000Z", "2026-11-30T12:00:00.000+00:00",
    "public", "internal", "allowed", "decision", "recovery", "no_grant", [], {},
    {"outcome": "allowed"}, {"outcome": "ask"}, {"outcome": "denied", "reason": "no_grant"},
    {"outcome": "denied"}, {"outcome": "allowed", "reason": "no_grant"},
]  # fmt: skip


@settings(max_examples=3000)
@given(
    record=_records,
    where=st.sampled_from(["header", "event", "outcome"]),
    pick=st.integers(0, 30),
    value=st.sampled_from(_TRICKY) | st.integers() | _text,
    delete=st.booleans(),
    extra=st.booleans(),
)
def test_no_edit_makes_the_fast_path_take_what_the_models_refuse(
    record: AuditRecord, where: str, pick: int, value: Any, delete: bool, extra: bool
) -> None:
    obj = orjson.loads(encode_record(record))
    target = {"header": obj, "event": obj["event"]}.get(where) or obj["event"].get("outcome")
    if not isinstance(target, dict):
        target = obj["event"]
    keys = list(target)
    key = "extra" if extra else keys[pick % len(keys)]
    if delete:
        target.pop(key, None)
    else:
        target[key] = value
    agree(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())  # any int


# Text the writer never writes but JSON allows: each variant must be read alike.
_LINE = encode_record(
    AuditRecord(
        seq=7,
        time=T,
        prev=H,
        event=ResultEvent.model_validate(
            {
                "session": "s1",
                "call": "c1",
                "decision": 6,
                "status": ResultStatus.RESULT,
                "class": DataClass.PRIVATE,
                "untrusted": False,
                "truncated": False,
                "bytes": 3,
                "sha256": H,
                "taint_after": DataClass.PRIVATE,
            }
        ),
    )
)
VARIANTS = {
    "spaces": _LINE.replace(b":", b" : ").replace(b",", b" , "),
    "escaped-id": _LINE.replace(b'"c1"', b'"\\u0063\\u0031"'),
    "escaped-slash-id": _LINE.replace(b'"c1"', b'"c\\/1"'),
    "escaped-hash": _LINE.replace(b'"sha256":"ab', b'"sha256":"\\u0061b'),
    "duplicate-seq": _LINE.replace(b'{"seq":7', b'{"seq":9,"seq":7'),
    "duplicate-seq-last-bad": _LINE.replace(b'{"seq":7', b'{"seq":7,"seq":-1'),
    "class_-by-name": _LINE.replace(b'"class"', b'"class_"'),
    "both-class-names": _LINE.replace(b'"class":"private"', b'"class":"private","class_":"secret"'),
    "seq-exponent": _LINE.replace(b'"seq":7', b'"seq":7e0'),
    "seq-leading-zero": _LINE.replace(b'"seq":7', b'"seq":07'),
    "seq-minus-zero": _LINE.replace(b'"seq":7', b'"seq":-0'),
    "trailing-garbage": _LINE + b"x",
    "trailing-space": _LINE + b" ",
    "two-objects": _LINE + b"," + _LINE,
    "nul-in-string": _LINE.replace(b'"s1"', b'"s\x001"'),
    "lone-surrogate": _LINE.replace(b'"s1"', b'"\\ud800"'),
    "bad-utf8": _LINE.replace(b'"s1"', b'"\xff"'),
    "type-null": _LINE.replace(b'"type":"result"', b'"type":null'),
    "no-type": _LINE.replace(b'"type":"result",', b""),
}


@pytest.mark.parametrize("line", VARIANTS.values(), ids=VARIANTS.keys())
def test_json_variants_are_read_alike(line: bytes) -> None:
    agree(line)


def _with(field: str, value: Any) -> bytes:
    obj = orjson.loads(_LINE)
    (obj if field in ("seq", "time", "prev") else obj["event"])[field] = value
    return orjson.dumps(obj)


REFUSED_VALUES = {
    f"{field}={value!r}": (field, value)
    for field, values in {
        "time": [
            "2026-11-30T24:00:00.000Z",
            "2026-11-30T29:00:00.000Z",
            "2026-11-30T12:60:00.000Z",
            "2026-11-30T12:00:60.000Z",
            "2026-11-30T12:00:99.000Z",
            "2026-02-29T12:00:00.000Z",
            "2100-02-29T12:00:00.000Z",
            "2026-04-31T12:00:00.000Z",
            "2026-00-10T12:00:00.000Z",
            "2026-11-00T12:00:00.000Z",
            "0000-01-01T00:00:00.000Z",
            "2026-11-30T12:00:00.000z",
            "2026-11-30 12:00:00.000Z",
            "2026-11-30T12:00:00.0000",
            "2026-11-30T12:00:00.00Z",
            "é026-11-30T12:00:00.000Z",
            "\u0662\u0660\u0662\u0666-11-30T12:00:00.000Z",  # digits, but not ASCII ones
        ],
        "prev": ["A" * 64, "ab" * 31 + " a", "ab" * 31 + "ag", "é" * 64, "ab" * 32 + "a"],
        "sha256": ["A" * 64, "ab" * 31 + "\u0661a", "-" * 64, "0x" + "a" * 62],
        "session": [".hidden", "a/b", "a b", "", "a" * 129, "é", "a\nb"],
        "call": ["..", "a\\b", "a\u0000"],
    }.items()
    for value in values
}


@pytest.mark.parametrize(("field", "value"), REFUSED_VALUES.values(), ids=REFUSED_VALUES.keys())
def test_a_bad_value_is_refused_by_both(field: str, value: Any) -> None:
    line = _with(field, value)
    assert models(line) is None
    assert fast(line) is None


ACCEPTED_VALUES = {
    f"{field}={value!r}": (field, value)
    for field, values in {
        "time": ["2024-02-29T23:59:59.999Z", "0001-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z"],
        "session": ["a" * 128, "-", "A.b_c:d-e"],
    }.items()
    for value in values
}  # fmt: skip


@pytest.mark.parametrize(("field", "value"), ACCEPTED_VALUES.values(), ids=ACCEPTED_VALUES.keys())
def test_a_good_value_is_taken_by_both(field: str, value: Any) -> None:
    assert agree(_with(field, value)) is not None


# --- what the fast path leaves to the models ----------------------------------------

LEFT_TO_THE_MODELS = {
    "seq-over-i64": _LINE.replace(b'"seq":7', b'"seq":9223372036854775808'),
    "u64-max-bytes": _LINE.replace(b'"bytes":3', b'"bytes":18446744073709551615'),
    "class_-by-name": VARIANTS["class_-by-name"],
}  # fmt: skip


@pytest.mark.parametrize("line", LEFT_TO_THE_MODELS.values(), ids=LEFT_TO_THE_MODELS.keys())
def test_values_left_to_the_models_are_records_all_the_same(line: bytes) -> None:
    assert fast(line) is None
    assert models(line) is not None


# --- vouching over columns ---------------------------------------------------------


def _views(n: int, start: datetime) -> list[V.RecordView]:
    lines = [
        _LINE.replace(T.encode(), (start + timedelta(minutes=37 * i)).strftime(
            "%Y-%m-%dT%H:%M:%S.000Z").encode()) for i in range(n)
    ]  # fmt: skip
    views = V.decode_views(lines)
    assert views is not None
    return views


@pytest.mark.parametrize("unsorted", [False, True], ids=["sorted", "unsorted"])
def test_one_bad_value_in_a_column_fails_the_whole_column(unsorted: bool) -> None:
    views = _views(200, datetime(2024, 2, 27, 20, 0))  # across a leap day and midnights
    if unsorted:
        views.reverse()
    times = [v.time for v in views]
    events = [v.event for v in views]
    assert V.Vouch()(times, events, [v.prev for v in views])
    for i in (0, 77, 199):
        bad_times = list(times)
        bad_times[i] = bad_times[i][:11] + "24" + bad_times[i][13:]
        assert not V.Vouch()(bad_times, events, ())
        bad_prevs = [v.prev for v in views]
        bad_prevs[i] = "AB" * 32
        assert not V.Vouch()(times, events, bad_prevs)


def test_decode_views_is_all_or_nothing() -> None:
    assert V.decode_views([_LINE, _LINE]) is not None
    assert V.decode_views([_LINE, b"{}", _LINE]) is None
