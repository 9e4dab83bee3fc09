"""`core.audit.ask_history` and `core.audit.approval_stats`: pairing asks with answers, and the figures."""

from __future__ import annotations

import pytest

from boxmaker.core.audit.approval_stats import approval_stats, nearest_rank
from boxmaker.core.audit.ask_history import AskHistory, PastAsk
from boxmaker.core.audit.views import (
    AllowedView,
    ApprovalView,
    AskView,
    DecisionView,
    DeniedView,
    RecordView,
)
from boxmaker.core.grants.decisions import DenyReason

ZERO = "0" * 64


@pytest.mark.parametrize(
    ("values", "share", "expected"),
    [
        ((), 0.5, None),
        ((7,), 0.5, 7),
        ((7,), 0.9, 7),
        ((1, 2), 0.5, 1),
        ((1, 2), 0.9, 2),
        ((1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9),
        ((1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0.9, 10),
    ],
    ids=["none", "one-median", "one-p90", "two-median", "two-p90", "ten-p90", "eleven-p90"],
)
def test_nearest_rank(values: tuple[int, ...], share: float, expected: int | None) -> None:
    assert nearest_rank(values, share) == expected


def decision(seq: int, time: str, grant: str, ask: bool = True) -> RecordView:
    event = DecisionView(
        session="s",
        call=f"c{seq}",
        tool="read_file",
        arguments='{"path":"/a/b"}',
        outcome=AskView() if ask else AllowedView(),
        taint="private",
        untrusted=False,
        grant=grant,
    )
    return RecordView(seq=seq, time=time, prev=ZERO, event=event)


def approval(seq: int, time: str, of: int, answer: str) -> RecordView:
    outcome = AskView() if answer == "approved" else DeniedView(reason=DenyReason.APPROVAL_REFUSED)
    event = ApprovalView(
        session="s",
        call=f"c{of}",
        decision=of,
        answer=answer,  # type: ignore[arg-type]
        outcome=outcome,
        taint="private",
        untrusted=False,
    )
    return RecordView(seq=seq, time=time, prev=ZERO, event=event)


T = "2026-11-30T10:00:0{}.000Z"


def test_history_pairs_answers_and_ignores_strays() -> None:
    history = AskHistory()
    history.extend(
        [
            decision(0, T.format(0), "g"),
            decision(1, T.format(1), "g", ask=False),  # not an ask
            approval(2, T.format(2), 1, "approved"),  # answers no ask
            approval(3, T.format(3), 0, "refused"),
            approval(4, T.format(4), 0, "approved"),  # a second answer: ignored
            decision(5, T.format(5), "h"),
        ]
    )
    asks = history.finish()
    assert [(a.decision, a.answer, a.answered) for a in asks] == [
        (0, "refused", T.format(3)),
        (5, None, None),
    ]


def test_history_since_leaves_earlier_asks_and_their_answers_out() -> None:
    history = AskHistory(since=T.format(1))
    history.extend([decision(0, T.format(0), "g"), approval(1, T.format(2), 0, "approved")])
    assert history.finish() == []


def ask(grant: str, answer: str | None, asked: str, answered: str | None) -> PastAsk:
    return PastAsk(0, grant, "read_file", "{}", asked, answer, answered)


def test_expired_counts_in_the_rate_but_not_in_the_times() -> None:
    stats = approval_stats(
        [
            ask("g", "approved", T.format(0), T.format(2)),
            ask("g", "expired", T.format(0), "2026-11-30T10:15:00.000Z"),
            ask("g", None, T.format(0), None),
        ]
    )
    (row,) = stats.grants
    assert (row.asks, row.approved, row.expired, row.abandoned) == (3, 1, 1, 1)
    assert row.rate == 0.5
    assert (row.median_ms, row.p90_ms) == (2000, 2000)


def test_a_clock_step_back_is_no_negative_time_and_no_answer_is_none() -> None:
    stats = approval_stats(
        [ask("g", "refused", T.format(5), T.format(1)), ask("h", None, T.format(0), None)]
    )
    assert [(r.grant, r.median_ms, r.rate) for r in stats.grants] == [
        ("g", 0, 0.0),
        ("h", None, None),
    ]
