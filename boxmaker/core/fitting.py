"""Fitting under a size limit, stated once. Pure; no I/O.

Two questions every bounded answer asks: how much of something fits (`largest`: the
longest prefix of a text, the most lines of a post), and how a listing is cut into
pages that each fit (`take` and `pages`). The sizes are the caller's (escaped JSON
bytes, a post's characters); frames (`core.wire.frame_fit`), session pages
(`loopd.session_view`), recall pages (`memoryd.recall_pages`) and Mattermost posts
(`core.display.reply_parts`) all use these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

_T = TypeVar("_T")


def largest(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n in 0..most with `fits(n)`, for a `fits` that holds up to some n
    and not after it (a binary search; `fits(0)` is never asked: 0 when nothing more
    fits)."""
    low, high = 0, max(most, 0)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _runs(
    items: Iterable[_T], size: Callable[[_T], int], room: int, between: int
) -> Iterator[list[_T]]:
    """`items` in runs whose sizes, with `between` bytes between each two, add up to at
    most `room`; an item too big alone makes a run of its own; at least one run."""
    run: list[_T] = []
    used = 0
    for item in items:
        added = size(item) + (between if run else 0)
        if run and used + added > room:
            yield run
            run, used, added = [], 0, added - between
        run.append(item)
        used += added
    yield run


def take(items: Iterable[_T], size: Callable[[_T], int], room: int, between: int = 1) -> list[_T]:
    """The longest run from the start of `items` that fits `room` (sizes, with `between`
    bytes between each two); the first item alone when it is too big (the caller cuts
    it). Empty only when `items` is. Items past the run are not looked at."""
    return next(_runs(items, size, room, between))


def pages(
    items: Iterable[_T], size: Callable[[_T], int], room: int, between: int = 1
) -> list[tuple[_T, ...]]:
    """`items`, in order, in pages that each fit `room` as `take` fits the first; at
    least one page (empty when there are no items)."""
    return [tuple(run) for run in _runs(items, size, room, between)]
