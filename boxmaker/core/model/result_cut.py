"""A tool result cut to the model's budget: its head and tail, and one marker between.

Pure; no I/O (the token count is a function given by the caller: the model's own
tokenizer, without special-token parsing). The rules:

1. A result whose text counts at most `budget` tokens is left as it is.
2. A longer one becomes head + marker + tail, counting at most `budget` tokens in
   all (a budget smaller than the marker itself gives the marker alone). The
   marker is one line of its own that says how many lines and bytes (of UTF-8)
   were left out, and that the whole result is in the session log.
3. Head and tail share what the marker leaves, half each; each is the most whole
   lines that fit its half (errors are usually at the end, headings at the start).
   Only when not even one line fits is a line cut, at a character, never inside a
   listed marker's text (`keep_whole`: the model's own tags, neutralised or not,
   so that a cut cannot leave half a tag that reads as something else).
4. The cut text is made from the text given (the neutralised result); what was
   left out is counted, never summarised.

`cut_result` is deterministic: the same text, budget and count give the same cut,
so a prompt rendered again from the session log is the same prompt. It counts only
what it must (tokenizing 256 KiB takes seconds): a text of at most `budget` UTF-8
bytes fits without a count (every token is at least one byte), one of more than
CHARS_PER_TOKEN characters a token of budget is taken not to fit without one, and
head and tail are looked for among at most CHARS_PER_TOKEN characters a token of
their share (a rare text of longer tokens is then shown a little shorter than it
could be).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Count = Callable[[str], int]
CHARS_PER_TOKEN = 16  # more than a token of any vocabulary holds, all but always
LEFT_OUT = (
    "[... {lines} lines, {bytes} bytes of this result left out here: the whole result "
    "is in the session log ...]"
)


@dataclass(frozen=True)
class Cut:
    text: str
    lines_left_out: int = 0
    bytes_left_out: int = 0

    @property
    def cut(self) -> bool:
        return self.bytes_left_out > 0


def marker_line(lines: int, size: int) -> str:
    return "\n" + LEFT_OUT.format(lines=lines, bytes=size) + "\n"


def cut_result(text: str, budget: int, count: Count, keep_whole: Sequence[str] = ()) -> Cut:
    """`text` within `budget` tokens by the rules above."""
    if len(text.encode("utf-8")) <= budget:
        return Cut(text)
    if len(text) <= budget * CHARS_PER_TOKEN and count(text) <= budget:
        return Cut(text)
    # the marker at its longest (every digit it could need) is what it reserves
    reserve = count(marker_line(text.count("\n") + 1, len(text.encode("utf-8"))))
    room = max(0, budget - reserve)
    head = _head(text, room // 2, count, keep_whole)
    tail_room = room - (count(text[:head]) if head else 0)
    tail = _tail(text[head:], tail_room, count, keep_whole)
    middle = text[head : len(text) - tail]
    lines = middle.count("\n") + (0 if middle.endswith("\n") or not middle else 1)
    size = len(middle.encode("utf-8"))
    return Cut(text[:head] + marker_line(lines, size) + text[len(text) - tail :], lines, size)


def _head(text: str, room: int, count: Count, keep_whole: Sequence[str]) -> int:
    """How many characters of `text`'s start fit `room`: whole lines, else a safe cut."""
    text = text[: (room + 1) * CHARS_PER_TOKEN]  # no more could fit
    ends = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    fits = _largest(ends, lambda end: count(text[:end]) <= room)
    if fits is not None:
        return fits
    first = ends[0] if ends else len(text)
    points = _safe_points(text, range(1, first), keep_whole)
    return _largest(points, lambda at: count(text[:at]) <= room) or 0


def _tail(text: str, room: int, count: Count, keep_whole: Sequence[str]) -> int:
    """How many characters of `text`'s end fit `room`: whole lines, else a safe cut."""
    text = text[-(room + 1) * CHARS_PER_TOKEN :]  # no more could fit
    starts = [i + 1 for i, ch in enumerate(text) if ch == "\n" and i + 1 < len(text)]
    sizes = sorted(len(text) - s for s in starts)
    fits = _largest(sizes, lambda size: count(text[len(text) - size :]) <= room)
    if fits is not None:
        return fits
    last = sizes[0] if sizes else len(text)
    safe = set(_safe_points(text, range(len(text) - last + 1, len(text)), keep_whole))
    points = [size for size in range(1, last) if len(text) - size in safe]
    return _largest(points, lambda size: count(text[len(text) - size :]) <= room) or 0


def _largest(candidates: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest of the ascending `candidates` that `fits` (monotone), by bisection."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(candidates[mid]):
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    return best


def _safe_points(text: str, points: range, keep_whole: Sequence[str]) -> list[int]:
    """The cut points of `points` (ascending) that leave every occurrence of every
    `keep_whole` text whole."""
    inside = bytearray(len(text) + 1)  # 1: a cut here would split an occurrence
    for marker in keep_whole:
        if len(marker) < 2:
            continue
        at = text.find(marker, max(0, points.start - len(marker)))
        while at != -1 and at < points.stop:
            inside[at + 1 : at + len(marker)] = b"\x01" * (len(marker) - 1)
            at = text.find(marker, at + 1)
    return [i for i in points if not inside[i]]
