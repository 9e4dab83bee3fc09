"""One reply of the model: generated in stretches, streamed as reasoning and content
events while it is written, its reasoning bounded, stopped when it only repeats itself.

I/O: the model (generation and tokenizing); events through the caller's `emit`.

What could still be a tool call is held back while streaming
(`core.model.reply_stream`), and at most one event goes out an interval
(`loopd.pacing`). Past the reasoning budget an open reasoning block is closed: its
closing marker is appended, as the template spells it, and the model goes on to
answer, so the reply is its ids, the marker's and the rest, in order. A reply cut off
by the turn's bound is no answer: what was held back of it is not sent. After each
stretch of `repeat_check_tokens` that does not end it, a reply that only repeats itself
(`core.model.repetition`) is stopped, and is no answer either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.reasoning import ReasoningStream
from boxmaker.core.model.repetition import Repetition, find_repetition
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.wire.loop import ContentEvent, Event, ReasoningEvent
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import Interrupted, Model, never
from boxmaker.loopd.pacing import Paced

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    ids: tuple[int, ...]
    text: str  # all of it, reasoning included: what the log keeps
    finished: bool
    answer: str | None  # outside reasoning; None when the reply was cut off unfinished
    repeated: Repetition | None = None  # stopped because it only repeated itself
    interrupted: bool = False  # stopped between tokens: its turn was cancelled
    seconds: float = 0.0  # from the first streamed piece to the last (the writing rate's)


def stop_ids(model: Model, dialect: Dialect) -> set[int]:
    """The dialect's stop markers that are one token each, as ids."""
    ids = set()
    for text in dialect.stop:
        tokens = model.tokenize(text, special=True)
        if len(tokens) == 1:
            ids.add(tokens[0])
    return ids


class Replier:
    def __init__(self, model: Model, dialect: Dialect, limits: TurnLimits) -> None:
        self._model = model
        self._dialect = dialect
        self._limits = limits
        self._stop = stop_ids(model, dialect)

    def reply(
        self,
        session: str,
        prompt: list[int],
        budget: int,
        last: bool,
        emit: Callable[[Event], None],
        reasoning_tokens: int | None = None,
        interrupted: Interrupted = never,
    ) -> Reply:
        """The model's reply to `prompt`, at most `budget` tokens, `last` when the budget
        is the turn's last (a reply it cuts off is then no answer), its reasoning bounded
        by `reasoning_tokens` (the limits' when None); stopped between tokens when
        `interrupted()` (no answer either: what was held back is not shown)."""
        dialect = self._dialect
        thinking = ReasoningStream(
            dialect.reasoning, opened=dialect.opens_reasoning, openers=dialect.marked_openers
        )
        answer = ReplyStream(dialect.syntax)
        paced = Paced(emit, self._limits.stream_interval_s)
        thinks = self._limits.reasoning_tokens if reasoning_tokens is None else reasoning_tokens
        pieces: list[float] = []  # when the first and the last piece came

        def on_text(piece: str) -> None:
            now = time.monotonic()
            if pieces:
                pieces[1] = now
            else:
                pieces.extend((now, now))
            reasoning, content = thinking.feed(piece)
            paced.add(ReasoningEvent, reasoning)
            paced.add(ContentEvent, answer.feed(content) if content else "")
            paced.tick()

        ids: list[int] = []
        texts: list[str] = []
        finished = cut = False
        repeated: Repetition | None = None
        while True:
            left = budget - len(ids)
            step = min(left, self._limits.repeat_check_tokens)
            if thinking.reasoning_open and dialect.reasoning is not None:
                step = min(step, max(1, thinks - len(ids)))
            generation = self._model.generate(
                session,
                prompt + ids,
                max_tokens=step,
                stop=self._stop,
                on_text=on_text,
                interrupted=interrupted,
            )
            ids += generation.ids
            texts.append(generation.text)
            finished = generation.finished
            cut = generation.interrupted
            if finished or cut or len(ids) >= budget or not generation.ids:
                break
            repeated = find_repetition(ids)
            if repeated is not None:
                break
            over = len(ids) >= thinks
            if over and thinking.reasoning_open and dialect.reasoning is not None:
                close = dialect.reasoning.close  # the budget is spent: close the block
                log.info("event=reasoning_closed session=%s tokens=%d", session, len(ids))
                ids += self._model.tokenize(close, special=True)
                texts.append(close)
                on_text(close)
        text = "".join(texts)
        if thinking.text != text:  # a model that broke on_text's contract
            log.warning("event=streamed_text_differs session=%s", session)
        reasoning, content = thinking.finish()
        paced.add(ReasoningEvent, reasoning)
        if cut or repeated is not None or (last and not finished and len(ids) >= budget):
            paced.flush()  # what was held back (perhaps half a tool call) is not shown
            return Reply(tuple(ids), text, finished, None, repeated, cut, _span(pieces))
        released = answer.feed(content) if content else ""
        paced.add(ContentEvent, released + answer.finish())
        paced.flush()
        split = thinking.split()
        if split.reasoning:
            log.info("event=reasoning session=%s chars=%d", session, len(split.reasoning))
        return Reply(tuple(ids), text, finished, split.answer, seconds=_span(pieces))


def _span(times: list[float]) -> float:
    """Seconds from the first time to the last, to the millisecond; 0 for fewer than two."""
    return round(times[-1] - times[0], 3) if times else 0.0
