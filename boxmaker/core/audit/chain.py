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
    Watched seqs (`watch`, for audit checkpoints): the hash of each record that
        verifies with one of them is reported in `heads`.
    A Decision that asks, with no Approval after it, is `abandoned`; a call
        allowed (at once or by an Approval) with no Result after it is
        `unfinished`. A Recovery or AcceptedBreak means a new brokerd: what was
        still waiting before it can never finish.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from boxmaker.core.audit.chain_report import ChainFailure, ChainReport, Location, TornTail
from boxmaker.core.audit.views import (
    U64_MAX,
    AcceptedBreakView,
    AllowedView,
    ApprovalView,
    AskView,
    DecisionView,
    EventView,
    RecordView,
    RecoveryView,
    ResultView,
    Vouch,
    decode_views,
    view_of_model,
    vouched_view,
)
from boxmaker.core.hashes import ZERO_HASH, check_hash

# A line held back: (file, line, index, size, digest, before, view, error, newline, recovers)
#   index   its number counted across every file fed (1-based)
#   before  the hash of the line just before it, whatever that line was
#   view    the record, or None if it does not parse
#   recovers  it is a Recovery that recovered the line before it
_Held = tuple[str, int, int, int, str, str, RecordView | None, str, bool, bool]

_NO_NEWLINE = "the line has no newline"
_BAD_PREV = "prev is not the hash of the line before"
_LONE_RECOVERY = "a recovery record that describes no line"
_LONE_BREAK = "an accepted break with no failure before it"

_PLAIN = frozenset((DecisionView, ApprovalView, ResultView))  # the events a run may hold
_sha256 = hashlib.sha256


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

    run_size = 2048  # `lines` tries runs of this many lines, accepting each whole when it can

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
        self._vouch = Vouch()
        self._watched: frozenset[int] = frozenset()
        self._heads: dict[int, str] = {}

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

    def watch(self, seqs: Iterable[int]) -> None:
        """Report in `heads` the hash of the record that verifies with each of `seqs`."""
        self._watched = self._watched.union(seqs)

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
        self.lines(lines)
        if last:
            self.line(last, False)

    def lines(self, batch: Sequence[bytes]) -> None:
        """Lines that each had a newline: the same as `line(data, True)` for each, faster.

        A run of lines that plainly verify (see `_run`) is accepted whole; any
        other run goes line by line.
        """
        if self._file is None:
            raise ValueError("ChainVerifier.lines before ChainVerifier.file")
        size = self.run_size
        for start in range(0, len(batch), size):
            run = batch[start : start + size]
            if not self._run(run):
                for data in run:
                    self.line(data, True)

    def line(self, data: bytes, has_newline: bool) -> None:
        """One line, without its newline; `has_newline` is False only for a file's last line."""
        if self._file is None:
            raise ValueError("ChainVerifier.line before ChainVerifier.file")
        self._index += 1
        self._file_line += 1
        digest = _sha256(data).hexdigest()
        view, error = self._parse(data)
        held = self._held
        recovers = False
        if held is not None:
            recovers = view is not None and self._recovers(view, held)
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
            view,
            error,
            has_newline,
            recovers,
        )
        self._last_digest = digest
        self._last_newline = has_newline

    def _parse(self, data: bytes) -> tuple[RecordView | None, str]:
        """The record in `data`, vouched for, else decided by the pydantic models."""
        view = vouched_view(data, self._vouch, self._last_digest)
        return (view, "") if view is not None else _slow_parse(data)

    # --- runs -------------------------------------------------------------------

    def _run(self, run: Sequence[bytes]) -> bool:
        """Accept `run` whole if every line of it plainly verifies; else change nothing.

        Plainly: no failed region is open; the line held before the run (if any)
        verifies; every line of the run is a Decision, Approval or Result that
        is vouched for, numbered on from the head and chained to it. Such a line
        can be neither recovered nor a break, so `line` would accept every one.
        The last line of the run is held, as `line` would hold it.
        """
        if self._region is not None or len(run) < 2:
            return False
        views = decode_views(run)
        if views is None:
            return False
        events = [view.event for view in views]
        if not _PLAIN.issuperset(map(type, events)):
            return False
        held = self._held
        if held is None:
            next_seq, head = self._next_seq, self._prev
        elif self._plainly_verifies(held):
            assert held[6] is not None
            next_seq, head = held[6].seq + 1, held[4]
        else:
            return False
        count = len(run)
        seqs = [view.seq for view in views]
        if seqs != list(range(next_seq, next_seq + count)):
            return False
        digests = [_sha256(data).hexdigest() for data in run]
        if [view.prev for view in views] != [head, *digests[:-1]]:
            return False
        times = [view.time for view in views]
        if not self._vouch(times, events, ()):  # each prev is a digest: checked above
            return False
        if held is not None:
            self._judge(held)  # it verifies: checked above
        first_line = self._file_line + 1
        self._file_line += count
        self._index += count
        accepted = count - 1  # the last line is held
        self._records += accepted
        if self._watched:
            first = seqs[0]
            for seq in self._watched:
                if first <= seq < first + accepted:
                    self._heads[seq] = digests[seq - first]
        self._prev = self._last_good = self._head = digests[-2]
        self._next_seq = seqs[-2] + 1
        self._note_times(times[:accepted], first_line)
        _track(zip(seqs[:accepted], events[:accepted], strict=True), self._asks, self._running)
        assert self._file is not None
        self._held = (
            self._file,
            self._file_line,
            self._index,
            len(run[-1]),
            digests[-1],
            digests[-2],
            views[-1],
            "",
            True,
            False,
        )
        self._last_digest = digests[-1]
        self._last_newline = True
        return True

    def _plainly_verifies(self, held: _Held) -> bool:
        """Would `_judge` accept `held` now, with a Decision, Approval or Result after it?"""
        view, newline, recovers = held[6], held[8], held[9]
        if view is None or not newline:
            return False
        return recovers or (
            type(view.event) in _PLAIN and view.seq == self._next_seq and view.prev == self._prev
        )

    def _note_times(self, times: Sequence[str], first_line: int) -> None:
        """Clock warnings for accepted records with these times, from line `first_line` on."""
        last = self._last_time
        if (last is not None and times[0] < last) or sorted(times) != list(times):
            previous = last
            for offset, time in enumerate(times):
                if previous is not None and time < previous:
                    assert self._file is not None
                    self._clock.append(Location(self._file, first_line + offset))
                previous = time
        self._last_time = times[-1]

    # --- judging ----------------------------------------------------------------

    def _recovers(self, view: RecordView, held: _Held) -> bool:
        """Is `view` a Recovery describing the held line exactly?"""
        event = view.event
        if type(event) is not RecoveryView:
            return False
        if event.torn_bytes != held[3] or event.torn_sha256 != held[4]:
            return False
        region = self._region
        if region is None:
            return view.prev == self._prev and view.seq == self._next_seq
        expected_seq = region.expected_seq + (held[2] - region.index)
        return view.prev == held[5] and view.seq == expected_seq

    def _judge(self, held: _Held) -> None:
        """Judge a held line outside a failed region: it verifies, or opens one."""
        before, view, error, newline, recovers = held[5:]
        if recovers:
            self._accept(held)
            return
        if view is None:
            self._fail(held, error)
            return
        if not newline:
            self._fail(held, _NO_NEWLINE)
            return
        event = view.event
        if type(event) is AcceptedBreakView and self._from_earlier_file(event):
            if view.prev != before:
                self._fail(held, _BAD_PREV)
            else:
                self._accept_break(held)
            return
        seq = view.seq
        if seq != self._next_seq:
            self._fail(held, f"seq is {seq}, expected {self._next_seq}")
        elif view.prev != self._prev:
            self._fail(held, _BAD_PREV)
        elif type(event) is RecoveryView:
            self._fail(held, _LONE_RECOVERY)
        elif type(event) is AcceptedBreakView:
            self._fail(held, _LONE_BREAK)
        else:
            self._accept(held)

    def _judge_in_region(self, held: _Held) -> None:
        """Inside a failed region a line matters only as the break that closes it."""
        region = self._region
        assert region is not None
        view, newline, recovers = held[6], held[8], held[9]
        if view is None or not newline or recovers:
            return
        event = view.event
        if type(event) is not AcceptedBreakView:
            return
        if self._from_earlier_file(event):
            accepted = view.prev == held[5]
        else:
            accepted = (
                event.file == region.file
                and event.line == region.line
                and event.last_good == region.last_good
                and view.prev == held[5]
                and view.seq == region.expected_seq + (held[2] - region.index)
            )
        if accepted:
            self._region = None
            self._accept_break(held)

    def _from_earlier_file(self, event: AcceptedBreakView) -> bool:
        first = self._first_file
        return self._resumed and first is not None and event.file < first

    def _fail(self, held: _Held, what: str) -> None:
        self._region = _Region(held[0], held[1], held[2], what, self._last_good, self._next_seq)

    def _accept_break(self, held: _Held) -> None:
        self._breaks.append(Location(held[0], held[1]))
        self._accept(held)

    def _accept(self, held: _Held) -> None:
        """A record verified: it becomes the head."""
        view = held[6]
        assert view is not None
        digest = held[4]
        self._records += 1
        self._prev = self._last_good = digest
        self._head = digest
        seq = view.seq
        self._next_seq = seq + 1
        if seq in self._watched:
            self._heads[seq] = digest
        time = view.time
        last_time = self._last_time
        if last_time is not None and time < last_time:
            self._clock.append(Location(held[0], held[1]))
        self._last_time = time
        event = view.event
        if type(event) in _PLAIN:
            _track(((seq, event),), self._asks, self._running)
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
            heads=tuple(sorted(self._heads.items())),
        )


def _track(
    records: Iterable[tuple[int, EventView]], asks: dict[int, None], running: dict[int, None]
) -> None:
    """Follow calls through accepted Decisions, Approvals and Results, in order.

    A Decision that asks waits in `asks` until an Approval; a call allowed (at
    once or by an Approval) is in `running` until its Result.
    """
    for seq, event in records:
        if type(event) is ResultView:
            running.pop(event.decision, None)
        elif type(event) is DecisionView:
            outcome = type(event.outcome)
            if outcome is AllowedView:
                running[seq] = None
            elif outcome is AskView:
                asks[seq] = None
        elif type(event) is ApprovalView:
            asks.pop(event.decision, None)
            if type(event.outcome) is AllowedView:
                running[event.decision] = None


def _slow_parse(data: bytes) -> tuple[RecordView | None, str]:
    """The record in `data`, decided by the pydantic models (imported only when needed)."""
    from boxmaker.core.audit.records import (  # pydantic: only when the fast path could not vouch
        RecordError,
        decode_record,
    )

    try:
        record = decode_record(data)
    except RecordError as exc:
        return None, str(exc)
    return view_of_model(record.model_dump(mode="json", by_alias=True)), ""
