"""A reply's reasoning kept apart from its answer. Pure; no I/O.

A reasoning model writes its thinking between markers (`<think>` and
`</think>` for Qwen3, QwQ, DeepSeek-R1 and Qwen3.5; Gemma 4's thought channel),
and its answer after. The reasoning is shown to the owner as reasoning (the
wire's `reasoning` events, logged), never as the answer, and a tool call the
model only drafted in it is never run. The rules, one per case, for a reply's
text; `opened` says the generation prompt already opened a block (Qwen3.5 and
QwQ end the prompt with `<think>\\n`, so the reply starts inside it):

1. **A closed block is reasoning.** From an opening marker (or the start of the
   reply, when `opened`) up to the next closing marker is reasoning, whatever it
   holds: a tool call written there never runs, and text after the close is the
   answer. A reply may hold several blocks; each is reasoning.
2. **An unclosed block ends at a call.** A block that is never closed (the
   model went from thinking straight to acting, as Qwen3.5 does) is reasoning up
   to the first place a tool call opens (`openers`, the call syntax's own); the
   call and all after it are the answer, read for calls as any answer is. With
   no call in it, the whole rest of the reply is reasoning and there is no answer.
3. **Outside a block, everything is the answer**, where tool calls are read. A
   closing marker with no block open is text.
4. **Marker text from elsewhere is not a marker.** A tool result or the owner's
   words that spell `<think>` were neutralised when they entered the log (the
   turn loop's rule), so only the model's own reply is read here.

`split_reasoning` applies the rules to a whole reply. `ReasoningStream` applies
them to a reply as it is written: it releases reasoning and answer text only
where nothing written next can change which side it falls on (a tail that could
be the start of a marker or an opener waits; in an unclosed block, everything
from a call's opener waits, since a close written later makes it reasoning).
What it releases is always a prefix of what `split_reasoning` gives at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReasoningMarkers:
    open: str
    close: str


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str  # every block's text, in order, joined
    answer: str  # the rest: where tool calls are read


def _tail(text: str, words: Sequence[str]) -> int:
    """The length of the longest tail of `text` that is a proper start of one of `words`."""
    longest = 0
    for word in words:
        for size in range(min(len(word) - 1, len(text)), longest, -1):
            if word.startswith(text[-size:]):
                longest = size
                break
    return longest


def _first(text: str, words: Sequence[str], start: int) -> int:
    found = [at for at in (text.find(w, start) for w in words if w) if at >= 0]
    return min(found) if found else -1


def _read(
    text: str,
    markers: ReasoningMarkers | None,
    opened: bool,
    openers: Sequence[str],
    final: bool,
) -> Split:
    """The rules over `text`; when not `final`, only what no continuation can change."""
    if markers is None:
        return Split("", text if final else text[: len(text) - _tail(text, openers)])
    reasoning: list[str] = []
    answer: list[str] = []
    at, inside = 0, opened
    while True:
        if inside:
            close = text.find(markers.close, at)
            if close >= 0:  # rule 1
                reasoning.append(text[at:close])
                at, inside = close + len(markers.close), False
                continue
            call = _first(text, openers, at)
            if call >= 0:  # rule 2: final, or held until the reply ends
                if final:
                    reasoning.append(text[at:call])
                    answer.append(text[call:])
                else:
                    reasoning.append(text[at:call])
                return Split("".join(reasoning), "".join(answer))
            end = len(text) if final else len(text) - _tail(text, (markers.close, *openers))
            reasoning.append(text[at:end])
            return Split("".join(reasoning), "".join(answer))
        opening = text.find(markers.open, at)
        if opening < 0:  # rule 3
            end = len(text) if final else len(text) - _tail(text, (markers.open,))
            answer.append(text[at:end])
            return Split("".join(reasoning), "".join(answer))
        answer.append(text[at:opening])
        at, inside = opening + len(markers.open), True


def split_reasoning(
    text: str, markers: ReasoningMarkers | None, *, opened: bool, openers: Sequence[str]
) -> Split:
    """A whole reply's reasoning and answer (the rules above)."""
    return _read(text, markers, opened, openers, final=True)


class ReasoningStream:
    """One reply's reasoning and answer, released as the model's text arrives."""

    def __init__(
        self, markers: ReasoningMarkers | None, *, opened: bool, openers: Sequence[str]
    ) -> None:
        self.text = ""
        self._markers = markers
        self._opened = opened
        self._openers = tuple(openers)
        self._reasoning = 0  # released so far
        self._answer = 0

    @property
    def reasoning_open(self) -> bool:
        """Whether the text so far ends inside a reasoning block that no call has ended
        (rule 2): what the reasoning budget asks."""
        if self._markers is None:
            return False
        at, inside = 0, self._opened
        while True:
            mark = self._markers.close if inside else self._markers.open
            found = self.text.find(mark, at)
            if found < 0:
                return inside and _first(self.text, self._openers, at) < 0
            at, inside = found + len(mark), not inside

    def feed(self, piece: str) -> tuple[str, str]:
        """Take the next piece; the (reasoning, answer) text it releases (either may be "")."""
        self.text += piece
        return self._release(_read(self.text, self._markers, self._opened, self._openers, False))

    def finish(self) -> tuple[str, str]:
        """The reply has ended: the rest of its reasoning and answer."""
        return self._release(self.split())

    def split(self) -> Split:
        return split_reasoning(self.text, self._markers, opened=self._opened, openers=self._openers)

    def _release(self, split: Split) -> tuple[str, str]:
        reasoning = split.reasoning[self._reasoning :]
        answer = split.answer[self._answer :]
        self._reasoning = max(self._reasoning, len(split.reasoning))
        self._answer = max(self._answer, len(split.answer))
        return reasoning, answer
