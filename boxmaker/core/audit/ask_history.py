"""Every ask in the audit log, paired with its answer. Pure; no I/O.

Fed the records of the log in order (as `audit_views.RecordView`s), `AskHistory`
keeps each Decision whose outcome is `ask` and pairs it with the Approval record
that names it (`Approval.decision` is the Decision's seq). The rules:

    1  an ask is a Decision record with outcome `ask`, at or after `since` (a
       timestamp; "" takes every record); the grant that asked is the
       Decision's `grant`
    2  an Approval record answers the ask whose seq it names: approved, refused
       or expired, at the Approval record's time; an Approval that names no
       ask seen (one before `since`, or a second answer) is ignored
    3  an ask that no Approval answers by the end of the log is unanswered:
       its call was abandoned (loopd went away, brokerd restarted), or it is
       still waiting
    4  every other record is ignored

`finish` gives the asks in log order. Memory: one entry per ask (the log's other
records are not kept).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from boxmaker.core.audit.views import ApprovalView, AskView, DecisionView, RecordView


@dataclass(frozen=True, slots=True)
class PastAsk:
    """One ask and what became of it."""

    decision: int  # the Decision's seq: the approval id the owner saw
    grant: str | None  # the grant that asked
    tool: str
    arguments: str  # as received, unparsed
    asked: str  # the Decision's time
    answer: str | None = None  # approved | refused | expired; None when unanswered
    answered: str | None = None  # the Approval's time


class AskHistory:
    """Pairs asks with their answers, record by record (the rules above)."""

    __slots__ = ("_asks", "_since")

    def __init__(self, since: str = "") -> None:
        self._since = since
        self._asks: dict[int, PastAsk] = {}  # by seq, in log order

    def add(self, record: RecordView) -> None:
        event = record.event
        if type(event) is DecisionView:
            if type(event.outcome) is AskView and record.time >= self._since:
                self._asks[record.seq] = PastAsk(
                    decision=record.seq,
                    grant=event.grant,
                    tool=event.tool,
                    arguments=event.arguments,
                    asked=record.time,
                )
        elif type(event) is ApprovalView:
            ask = self._asks.get(event.decision)
            if ask is not None and ask.answer is None:
                self._asks[event.decision] = PastAsk(
                    decision=ask.decision,
                    grant=ask.grant,
                    tool=ask.tool,
                    arguments=ask.arguments,
                    asked=ask.asked,
                    answer=event.answer,
                    answered=record.time,
                )

    def extend(self, records: Iterable[RecordView]) -> None:
        for record in records:
            self.add(record)

    def finish(self) -> list[PastAsk]:
        """Every ask seen, in log order."""
        return list(self._asks.values())
