"""A reply's streamed text, paced: at most one reasoning or content event an interval.

I/O: the monotonic clock only. The model writes a token at a time, and each event
is a frame that the model's own thread encodes and sends and that the client must
wake for: at 150 tokens a second on a GPU that is 150 wake-ups a second on each
side, and on a CPU box every one of them takes time from the cores the model
runs on. So text released within `interval` of the last event waits and goes out
merged with what follows it. The rules:

1. The first text of a reply goes out at once (time to the first event is what
   the owner feels).
2. Text waits at most `interval` after the event before it, or until the model's
   next piece, whichever is later: `tick`, called at every piece the model
   writes, sends what is due even when that piece released nothing (a tool call
   being written holds the content back, not the text before it).
3. Reasoning and content never merge: text of the other kind sends what waits.
4. `flush` sends what waits: at the end of the reply, before anything else of the
   turn is emitted, so events keep their order.

The texts sent, in order, are exactly the texts given; only their boundaries move.
An interval of 0 sends every text as it comes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from boxmaker.core.wire.loop import ContentEvent, Event, ReasoningEvent

StreamedEvent = type[ReasoningEvent] | type[ContentEvent]


class Paced:
    """One reply's reasoning and content events, paced by the rules above."""

    def __init__(
        self,
        emit: Callable[[Event], None],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit, self._interval, self._clock = emit, interval, clock
        self._kind: StreamedEvent | None = None
        self._waiting: list[str] = []
        self._sent_at: float | None = None  # None: nothing sent yet (rule 1)

    def add(self, kind: StreamedEvent, text: str) -> None:
        if not text:
            return
        if self._kind is not None and kind is not self._kind:
            self.flush()  # rule 3
        self._kind = kind
        self._waiting.append(text)
        self.tick()

    def tick(self) -> None:
        """Send what waits if it is due (rules 1 and 2)."""
        if self._waiting and (
            self._sent_at is None or self._clock() - self._sent_at >= self._interval
        ):
            self.flush()

    def flush(self) -> None:
        if not self._waiting or self._kind is None:
            return
        self._emit(self._kind(text="".join(self._waiting)))
        self._waiting.clear()
        self._kind = None
        self._sent_at = self._clock()
