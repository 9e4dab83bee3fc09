"""`ChainVerifier`: the audit log's hash chain, checked line by line. Pure; no I/O.

brokerd's startup and `bxctl audit verify` both feed it the files of
`<home>/audit/` in name order and act on its `ChainReport`. It reads no file and
no clock: it is given names and bytes.

    v = ChainVerifier()                      # expects seq 0 and prev all zeros
    v = ChainVerifier.resume(next_seq, prev) # continues from a known line
    v.feed(name, content)                    # or: v.file(name); v.line(b, has_newline)...
    report = v.finish()

The rules, in the order they are applied (hash(line) is the sha256 of the line's
bytes without its newline):

    A line is held back until the next one arrives (or `finish`), then judged.

    Recovered line: line L followed at once by a Recovery record R (even across a
        file boundary) with R.torn_bytes = len(L), R.torn_sha256 = hash(L),
        R.prev = the head before L and R.seq = the seq L should have had. L is not
        a record, whether or not it parses; R reuses its seq. Reported in
        `recoveries`.
    Torn tail: the last line fed, in the last file named, that has no newline, or
        has one and does not parse. Reported in `torn_tail`, with the seq and prev
        its Recovery must carry; not a failure.
    A record verifies if it parses as an AuditRecord, has its newline, its seq is
        the next one and its prev is the head. A Recovery that recovered nothing,
        and an AcceptedBreak outside a failed region, fail.
    Resumed verifier: an AcceptedBreak naming a file that sorts before the first
        file given is accepted when its prev is the hash of the line before it,
        whether or not a region is open; its seq sets the counter.
    The first line that fails opens a failed region. Lines in a region are read
        only to find an AcceptedBreak that names the failure's file and line, the
        last line that verified before it (`last_good`), has as prev the hash of
        the line just before it, and as seq the seq the failing line should have
        had plus the number of lines from the failure up to it. Such a break closes
        the region and becomes the head: one break covers every failure before it.
    Clock warning: a record whose time is earlier than the record before it.
    A Decision that asks, with no Approval after it, is `abandoned`; a call
        allowed (at once or by an Approval) with no Result after it is
        `unfinished`. A Recovery or AcceptedBreak means a new brokerd: what was
        still waiting before it can never finish.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from boxmaker.core.audit_records import U64_MAX, FastCheck, RecordError, decode_record
from boxmaker.core.chain_report import ChainFailure, ChainReport, Location, TornTail
from boxmaker.core.hashes import ZERO_HASH, check_hash

# A line held back: (file, line, index, size, digest, before, obj, error, newline, recovers)
#   index   its number counted across every file fed (1-based)
#   before  the hash of the line just before it, whatever that line was
#   obj     the record as a dict (orjson's shape), or None if it does not parse
#   recovers  it is a Recovery that recovered the line before it
_Held = tuple[str, int, int, int, str, str, Any, str, bool, bool]

_NO_NEWLINE = "the line has no newline"
_BAD_PREV = "prev is not the hash of the line before"
_LONE_RECOVERY = "a recovery record that describes no line"
_LONE_BREAK = "an accepted break with no failure before it"


class _Region:
    """An open failed region: where it starts and what a break for it must carry."""

    __slots__ = ("expected_seq", "file", "index", "last_good", "line", "what")

    def __init__(
        self, file: str, line: int, index: int, what: str, last_good: str, expected_seq: int
    ) -> None:
        self.file = file
        self.line = line
        self.index = index
        self.what = what
        self.last_good = last_good
        self.expected_seq = expected_seq


class ChainVerifier:
    """A pure state machine over the lines of the audit log (rules above)."""

    def __init__(self) -> None:
        self._next_seq = 0
        self._prev = ZERO_HASH  # the head: hash of the last record that verified
        self._head: str | None = None
        self._last_good = ZERO_HASH
        self._resumed = False
        self._first_file: str | None = None
        self._file: str | None = None
        self._file_line = 0
        self._index = 0
        self._last_digest = ZERO_HASH
        self._last_newline = True
        self._held: _Held | None = None
        self._region: _Region | None = None  # the first failure since the last break
        self._records = 0
        self._last_time: str | None = None
        self._recoveries: list[Location] = []
        self._breaks: list[Location] = []
        self._clock: list[Location] = []
        self._asks: dict[int, None] = {}
        self._running: dict[int, None] = {}
        self._abandoned: list[int] = []
        self._unfinished: list[int] = []
        self._check = FastCheck()

    @classmethod
    def resume(cls, next_seq: int, prev: str) -> ChainVerifier:
        """A verifier that continues after a line it trusts: seq `next_seq - 1`, hash `prev`."""
        check_hash(prev)
        if not 0 <= next_seq <= U64_MAX + 1:
            raise ValueError(f"not a seq: {next_seq}")
        verifier = cls()
        verifier._next_seq = next_seq
        verifier._prev = verifier._last_good = verifier._last_digest = prev
        verifier._head = prev
        verifier._resumed = True
        return verifier

    # --- input ------------------------------------------------------------------

    def file(self, name: str) -> None:
        """The lines that follow belong to the file `name` (files come in name order)."""
        if self._first_file is None:
            self._first_file = name
        self._file = name
        self._file_line = 0

    def feed(self, name: str, content: bytes) -> None:
        """A whole file: `file(name)`, then each of its lines."""
        self.file(name)
        lines = content.split(b"\n")
        last = lines.pop()  # b"" when the content ends with a newline
        line = self.line
        for data in lines:
            line(data, True)
        if last:
            line(last, False)

    def line(self, data: bytes, has_newline: bool) -> None:
        """One line, without its newline; `has_newline` is False only for a file's last line."""
        if self._file is None:
            raise ValueError("ChainVerifier.line before ChainVerifier.file")
        self._index += 1
        self._file_line += 1
        digest = hashlib.sha256(data).hexdigest()
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        error = ""
        if obj is None or not self._check.check(obj, self._last_digest):
            obj, error = _slow_parse(data)
        held = self._held
        recovers = False
        if held is not None:
            recovers = obj is not None and self._recovers(obj, held)
            if recovers:
                if self._region is None:
                    self._recoveries.append(Location(held[0], held[1]))
            elif self._region is None:
                self._judge(held)
            else:
                self._judge_in_region(held)
        self._held = (
            self._file,
            self._file_line,
            self._index,
            len(data),
            digest,
            self._last_digest,
            obj,
            error,
            has_newline,
            recovers,
        )
        self._last_digest = digest
        self._last_newline = has_newline

    # --- judging ----------------------------------------------------------------

    def _recovers(self, obj: dict[str, Any], held: _Held) -> bool:
        """Is `obj` a Recovery describing the held line exactly?"""
        event = obj["event"]
        if event["type"] != "recovery":
            return False
        if event["torn_bytes"] != held[3] or event["torn_sha256"] != held[4]:
            return False
        region = self._region
        if region is None:
            return bool(obj["prev"] == self._prev and obj["seq"] == self._next_seq)
        expected_seq = region.expected_seq + (held[2] - region.index)
        return bool(obj["prev"] == held[5] and obj["seq"] == expected_seq)

    def _judge(self, held: _Held) -> None:
        """Judge a held line outside a failed region: it verifies, or opens one."""
        before, obj, error, newline, recovers = held[5:]
        if recovers:
            self._accept(held)
            return
        if obj is None:
            self._fail(held, error)
            return
        if not newline:
            self._fail(held, _NO_NEWLINE)
            return
        event = obj["event"]
        kind = event["type"]
        if kind == "accepted_break" and self._from_earlier_file(event):
            if obj["prev"] != before:
                self._fail(held, _BAD_PREV)
            else:
                self._accept_break(held)
            return
        seq = obj["seq"]
        if seq != self._next_seq:
            self._fail(held, f"seq is {seq}, expected {self._next_seq}")
        elif obj["prev"] != self._prev:
            self._fail(held, _BAD_PREV)
        elif kind == "recovery":
            self._fail(held, _LONE_RECOVERY)
        elif kind == "accepted_break":
            self._fail(held, _LONE_BREAK)
        else:
            self._accept(held)

    def _judge_in_region(self, held: _Held) -> None:
        """Inside a failed region a line matters only as the break that closes it."""
        region = self._region
        assert region is not None
        obj, newline, recovers = held[6], held[8], held[9]
        if obj is None or not newline or recovers:
            return
        event = obj["event"]
        if event["type"] != "accepted_break":
            return
        if self._from_earlier_file(event):
            accepted = obj["prev"] == held[5]
        else:
            accepted = (
                event["file"] == region.file
                and event["line"] == region.line
                and event["last_good"] == region.last_good
                and obj["prev"] == held[5]
                and obj["seq"] == region.expected_seq + (held[2] - region.index)
            )
        if accepted:
            self._region = None
            self._accept_break(held)

    def _from_earlier_file(self, event: dict[str, Any]) -> bool:
        first = self._first_file
        return self._resumed and first is not None and event["file"] < first

    def _fail(self, held: _Held, what: str) -> None:
        self._region = _Region(held[0], held[1], held[2], what, self._last_good, self._next_seq)

    def _accept_break(self, held: _Held) -> None:
        self._breaks.append(Location(held[0], held[1]))
        self._accept(held)

    def _accept(self, held: _Held) -> None:
        """A record verified: it becomes the head."""
        obj = held[6]
        digest = held[4]
        self._records += 1
        self._prev = self._last_good = digest
        self._head = digest
        seq = obj["seq"]
        self._next_seq = seq + 1
        time = obj["time"]
        last_time = self._last_time
        if last_time is not None and time < last_time:
            self._clock.append(Location(held[0], held[1]))
        self._last_time = time
        event = obj["event"]
        kind = event["type"]
        if kind == "decision":
            outcome = event["outcome"]["outcome"]
            if outcome == "allowed":
                self._running[seq] = None
            elif outcome == "ask":
                self._asks[seq] = None
        elif kind == "result":
            self._running.pop(event["decision"], None)
        elif kind == "approval":
            decision = event["decision"]
            self._asks.pop(decision, None)
            if event["outcome"]["outcome"] == "allowed":
                self._running[decision] = None
        else:  # a Recovery or an AcceptedBreak: written by a new brokerd at startup
            self._abandoned.extend(self._asks)
            self._unfinished.extend(self._running)
            self._asks.clear()
            self._running.clear()

    # --- the verdict --------------------------------------------------------------

    def finish(self) -> ChainReport:
        """Judge the last held line and report. The verifier is spent afterwards."""
        torn: TornTail | None = None
        held = self._held
        self._held = None
        if held is not None:
            if self._region is not None:
                self._judge_in_region(held)
            elif held[0] == self._file and (not held[8] or held[6] is None):
                torn = TornTail(
                    at=Location(held[0], held[1]),
                    has_newline=held[8],
                    bytes=held[3],
                    sha256=held[4],
                    recovery_prev=self._prev,
                    recovery_seq=self._next_seq,
                )
            else:
                self._judge(held)
        failure: ChainFailure | None = None
        region = self._region
        if region is not None:
            failure = ChainFailure(
                file=region.file,
                line=region.line,
                what=region.what,
                last_good=region.last_good,
                break_prev=self._last_digest,
                break_seq=region.expected_seq + (self._index - region.index + 1),
                tail_torn=not self._last_newline,
            )
        return ChainReport(
            records=self._records,
            head=self._head,
            next_seq=self._next_seq,
            failure=failure,
            recoveries=tuple(self._recoveries),
            accepted_breaks=tuple(self._breaks),
            abandoned=(*self._abandoned, *self._asks),
            unfinished=(*self._unfinished, *self._running),
            clock_warnings=tuple(self._clock),
            torn_tail=torn,
        )


def _slow_parse(data: bytes) -> tuple[dict[str, Any] | None, str]:
    """The record in `data` in orjson's shape, decided by the pydantic models."""
    try:
        record = decode_record(data)
    except RecordError as exc:
        return None, str(exc)
    return record.model_dump(mode="json", by_alias=True), ""
