"""Audit records as the verifier reads them: fast decoding, vouched for in bulk. Pure.

The pydantic models in `audit_records` define a record. Checking every line of a
large log through them costs several times what reading, hashing and parsing
the line costs, so the verifier reads lines this way first:

    views = decode_views(lines)     # msgspec structs; None if any line fails
    Vouch()(times, events, prevs)   # True only if every one is a record

`decode_views` checks JSON syntax, types, the event and outcome tags, enum
values, lengths, the range of integers (up to 2**63 - 1) and unknown fields
(refused at every level, as in the models), all in C. `Vouch` checks what the
structs do not: the characters of identifiers and hashes, and timestamps
(format and real dates), a whole column at once (one pass over all the values
joined, not one call per value).

A view that is not vouched for is not invalid: the verifier asks the pydantic
models then (`view_of_model` turns what they accept into a view). The views and
the models describe the same records; `tests/core/audit/test_audit_views.py` holds
that with hypothesis (the fast path never accepts what the models refuse, and
agrees with them on what it accepts).
"""

from __future__ import annotations

import datetime
import re
from bisect import bisect_right
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from boxmaker.core.grants.deny_reasons import DenyReason

U64_MAX = 2**64 - 1

# Lengths and bounds are checked by msgspec as it decodes; every value the models
# accept is within them (a u64 above 2**63 - 1 is left to the models).
Seq = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
Hash = Annotated[str, msgspec.Meta(min_length=64, max_length=64)]
Ident = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Time = Annotated[str, msgspec.Meta(min_length=24, max_length=24)]
Answer = Literal["approved", "refused", "expired"]
Status = Literal["result", "failed"]
Class = Literal["public", "private", "secret"]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, gc=False):
    """Unknown fields refused; frozen; untracked by the GC (views hold only scalars)."""


class AllowedView(_Strict, frozen=True, tag_field="outcome", tag="allowed"):
    pass


class AskView(_Strict, frozen=True, tag_field="outcome", tag="ask"):
    why: Literal["untrusted"] | None = None


class DeniedView(_Strict, frozen=True, tag_field="outcome", tag="denied"):
    reason: DenyReason  # msgspec decodes an enum by its values: the deny-reason table's names


OutcomeView = AllowedView | AskView | DeniedView


class DecisionView(_Strict, frozen=True, tag_field="type", tag="decision"):
    session: Ident
    call: Ident
    tool: str
    arguments: str
    outcome: OutcomeView
    taint: Class
    untrusted: bool
    grant: str | None = None
    grant_sha256: Hash | None = None


class ApprovalView(_Strict, frozen=True, tag_field="type", tag="approval"):
    session: Ident
    call: Ident
    decision: Seq
    answer: Answer
    outcome: OutcomeView
    taint: Class
    untrusted: bool
    by: str | None = None
    post: str | None = None
    reason: str | None = None
    grant: str | None = None
    grant_sha256: Hash | None = None


class ResultView(_Strict, frozen=True, tag_field="type", tag="result", rename={"class_": "class"}):
    session: Ident
    call: Ident
    decision: Seq
    status: Status
    class_: Class
    untrusted: bool
    truncated: bool
    bytes: Seq
    sha256: Hash
    taint_after: Class
    flag: str | None = None


class RecoveryView(_Strict, frozen=True, tag_field="type", tag="recovery"):
    torn_bytes: Seq
    torn_sha256: Hash


class AcceptedBreakView(_Strict, frozen=True, tag_field="type", tag="accepted_break"):
    file: str
    line: Seq
    last_good: Hash


EventView = DecisionView | ApprovalView | ResultView | RecoveryView | AcceptedBreakView


class RecordView(_Strict, frozen=True):
    """One audit line, as the verifier uses it."""

    seq: Seq
    time: Time
    prev: Hash
    event: EventView


_decoder = msgspec.json.Decoder(RecordView)
_decode = _decoder.decode


def decode_views(lines: Sequence[bytes]) -> list[RecordView] | None:
    """A view of each line (each decoded on its own), or None if any line fails to decode."""
    try:
        return list(map(_decode, lines))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def decode_view(line: bytes) -> RecordView | None:
    """The view of one line, or None if it does not decode (`vouch` it before trusting it)."""
    try:
        return _decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


_EVENTS: dict[str, type[EventView]] = {
    "decision": DecisionView,
    "approval": ApprovalView,
    "result": ResultView,
    "recovery": RecoveryView,
    "accepted_break": AcceptedBreakView,
}
_OUTCOMES: dict[str, type[OutcomeView]] = {
    "allowed": AllowedView,
    "ask": AskView,
    "denied": DeniedView,
}


def vouched_view(line: bytes, vouch: Vouch, known: str = "") -> RecordView | None:
    """The view of one line if it decodes and `vouch` vouches for it, else None.

    `known` is a hash already checked: a `prev` equal to it needs no check.
    """
    view = decode_view(line)
    if view is None:
        return None
    prevs = () if view.prev == known else (view.prev,)
    return view if vouch((view.time,), (view.event,), prevs) else None


def view_of_model(dumped: dict[str, Any]) -> RecordView:
    """The view of a record the pydantic models accepted, built as it is (no checks).

    `dumped` is its `model_dump(mode="json", by_alias=True)`. Built field by
    field rather than by `msgspec.convert`, because the models accept u64
    values that the views' decoding leaves to them.
    """
    fields = dict(dumped["event"])
    kind = _EVENTS[fields.pop("type")]
    if "class" in fields:
        fields["class_"] = fields.pop("class")
    if "outcome" in fields:
        outcome = dict(fields["outcome"])
        if "reason" in outcome:  # as decoding gives it: the member, not its name
            outcome["reason"] = DenyReason(outcome["reason"])
        fields["outcome"] = _OUTCOMES[outcome.pop("outcome")](**outcome)
    return RecordView(
        seq=dumped["seq"], time=dumped["time"], prev=dumped["prev"], event=kind(**fields)
    )


# --- vouching ---------------------------------------------------------------------
#
# The decoders checked types, tags, enum values and lengths. What is left:
#   times   the shape `YYYY-MM-DDTHH:MM:SS.mmmZ` in ASCII digits, hours 00-23,
#           minutes and seconds 00-59, and a real date;
#   hashes  lowercase hex (64 characters already);
#   ids     `[A-Za-z0-9._:-]`, not starting with `.` (1-128 characters already).
# Each check runs over a whole column joined into one string, in C.

_TIME_SHAPE = b"0000-00-00T00:00:00.000Z"
_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_IDS = re.compile(r"(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}\n)*")
_PAST_PREFIX = "\x7f"  # sorts after every character a valid timestamp has


class Vouch:
    """Checks views in bulk; remembers the dates it has found real (a bounded memory)."""

    __slots__ = ("_dates",)

    _LIMIT = 4096

    def __init__(self) -> None:
        self._dates: set[str] = set()

    def __call__(
        self, times: Sequence[str], events: Sequence[EventView], prevs: Sequence[str]
    ) -> bool:
        """True only if the records with these columns are ones the models accept.

        `times` and `events` are the `time` and `event` columns of decoded
        views (so each time is 24 characters); `seq` needs nothing beyond what
        decoding checked. `prevs` are the `prev` values still to check: the
        caller may leave out those it found equal to a hash it computed.
        """
        if not self._times(times):
            return False
        ids: set[str] = set()
        hashes = list(prevs)
        add, append = ids.add, hashes.append
        for event in events:
            if type(event) is ResultView:
                add(event.session)
                add(event.call)
                append(event.sha256)
            elif type(event) is DecisionView or type(event) is ApprovalView:
                add(event.session)
                add(event.call)
                if event.grant_sha256 is not None:
                    append(event.grant_sha256)
            elif type(event) is RecoveryView:
                append(event.torn_sha256)
            elif type(event) is AcceptedBreakView:
                append(event.last_good)
        return _hex(hashes) and _identifiers(ids)

    def _times(self, times: Sequence[str]) -> bool:
        try:
            joined = "".join(times).encode("ascii")
        except UnicodeEncodeError:
            return False
        if joined.translate(_TO_ZERO) != _TIME_SHAPE * len(times):
            return False
        if max(joined[14::24], default=0) > 0x35 or max(joined[17::24], default=0) > 0x35:
            return False  # minutes or seconds past 59 ("5" is 0x35)
        if sorted(times) == list(times):
            return self._sorted_hours(times)
        return all(self._hour(t[:13]) for t in times)

    def _sorted_hours(self, times: Sequence[str]) -> bool:
        """Each distinct `YYYY-MM-DDTHH` of sorted `times` is real, found by bisection."""
        i, n = 0, len(times)
        while i < n:
            prefix = times[i][:13]
            if not self._hour(prefix):
                return False
            i = bisect_right(times, prefix + _PAST_PREFIX, i)
        return True

    def _hour(self, prefix: str) -> bool:
        """`YYYY-MM-DDTHH` (digits already checked) is a real date and an hour 00-23."""
        if prefix[11:13] > "23":
            return False
        date = prefix[:10]
        if date in self._dates:
            return True
        try:  # the calendar's own rule, as the models' datetime applies it
            datetime.date(int(date[:4]), int(date[5:7]), int(date[8:10]))
        except ValueError:
            return False
        if len(self._dates) >= self._LIMIT:
            self._dates.clear()
        self._dates.add(date)
        return True


def _identifiers(ids: set[str]) -> bool:
    """Every value is an identifier: one line each, so none may hold a newline itself."""
    joined = "".join(i + "\n" for i in ids)
    return joined.count("\n") == len(ids) and _IDS.fullmatch(joined) is not None


def _hex(hashes: list[str]) -> bool:
    """Every value (64 characters each) is lowercase hex."""
    joined = "".join(hashes)
    try:
        raw = bytes.fromhex(joined)  # hex digits of either case, and spaces
    except ValueError:
        return False
    return 2 * len(raw) == len(joined) and joined.lower() == joined
