"""How the owner has answered asks, per grant: the figures of `bxctl approvals --stats`. Pure.

Computed from `ask_history.PastAsk`s (no I/O, no clock). For each grant that
asked, and for all of them together:

    asks        every ask (rule 1 of `ask_history`)
    approved    answered approved (whatever the re-decision then said)
    refused     answered refused by the owner
    expired     answered expired: nobody answered before the approval's time ran out
    abandoned   no Approval record: the call went away (or is still waiting)
    rate        approved / (approved + refused + expired); None when that is 0
    median, p90 the time from the ask to the owner's answer (approved and refused
                only: an expiry is the clock, not the owner), in milliseconds,
                by nearest rank: the smallest time with at least 50 % (90 %) of
                the answers at or under it; None when there is no answer

Grants are listed by asks, most first, then by grant id.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from boxmaker.core.audit.ask_history import PastAsk
from boxmaker.core.timestamps import parse_timestamp

_OWNER_ANSWERS = ("approved", "refused")
_MILLISECOND = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class GrantStats:
    """The figures for one grant (`grant` None for the total, or an ask with no grant)."""

    grant: str | None
    asks: int
    approved: int
    refused: int
    expired: int
    abandoned: int
    rate: float | None
    median_ms: int | None
    p90_ms: int | None


@dataclass(frozen=True, slots=True)
class ApprovalStats:
    grants: tuple[GrantStats, ...]
    total: GrantStats


def nearest_rank(sorted_values: Sequence[int], share: float) -> int | None:
    """The smallest value with at least `share` of `sorted_values` at or under it."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(share * len(sorted_values)))
    return sorted_values[rank - 1]


def answer_ms(ask: PastAsk) -> int | None:
    """Milliseconds from the ask to the owner's answer (never below 0), or None."""
    if ask.answer not in _OWNER_ANSWERS or ask.answered is None:
        return None
    delta = parse_timestamp(ask.answered) - parse_timestamp(ask.asked)
    return max(0, delta // _MILLISECOND)


def _figures(grant: str | None, asks: Sequence[PastAsk]) -> GrantStats:
    counts = {"approved": 0, "refused": 0, "expired": 0}
    abandoned = 0
    times: list[int] = []
    for ask in asks:
        if ask.answer is None:
            abandoned += 1
            continue
        counts[ask.answer] = counts.get(ask.answer, 0) + 1
        ms = answer_ms(ask)
        if ms is not None:
            times.append(ms)
    answered = counts["approved"] + counts["refused"] + counts["expired"]
    times.sort()
    return GrantStats(
        grant=grant,
        asks=len(asks),
        approved=counts["approved"],
        refused=counts["refused"],
        expired=counts["expired"],
        abandoned=abandoned,
        rate=counts["approved"] / answered if answered else None,
        median_ms=nearest_rank(times, 0.5),
        p90_ms=nearest_rank(times, 0.9),
    )


def approval_stats(asks: Iterable[PastAsk]) -> ApprovalStats:
    """The figures per grant and in total (module docstring)."""
    every = list(asks)
    by_grant: dict[str | None, list[PastAsk]] = {}
    for ask in every:
        by_grant.setdefault(ask.grant, []).append(ask)
    rows = [_figures(grant, group) for grant, group in by_grant.items()]
    rows.sort(key=lambda row: (-row.asks, row.grant or ""))
    return ApprovalStats(grants=tuple(rows), total=_figures(None, every))
