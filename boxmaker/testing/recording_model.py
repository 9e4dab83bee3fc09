"""Any model, its every generation recorded: the prompt, and when its first text came.

No I/O but the clock (`time.perf_counter`), read around each generation; the model
test and bench/loopd.py time the first content event by it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.loopd.model import Generation, Interrupted, Model, Wrapping, never


@dataclass(frozen=True)
class Recorded:
    session: str
    prompt: list[int]
    generation: Generation
    started: float  # time.perf_counter() when generate was called
    first_text: float | None  # when the first text came (None: it wrote nothing)
    ended: float
    texts: tuple[str, ...] = ()  # every piece of text handed to on_text, in order


class RecordingModel(Wrapping):
    """`inner`, with every `generate` recorded in `calls` (thread-safe)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.calls: list[Recorded] = []
        self._lock = threading.Lock()

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
        interrupted: Interrupted = never,
    ) -> Generation:
        started = time.perf_counter()
        first: list[float] = []
        texts: list[str] = []

        def seen(text: str) -> None:
            if not first:
                first.append(time.perf_counter())
            texts.append(text)
            on_text(text)

        generation = self.inner.generate(
            session, prompt, max_tokens=max_tokens, stop=stop, on_text=seen, interrupted=interrupted
        )
        ended = time.perf_counter()
        record = Recorded(
            session,
            list(prompt),
            generation,
            started,
            first[0] if first else None,
            ended,
            tuple(texts),
        )
        with self._lock:
            self.calls.append(record)
        return generation
