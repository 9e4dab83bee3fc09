"""A scripted model with the real one's interface, for the turn loop's tests.

Its tokenizer is the demo model's (`boxmaker.loopd.demo.CharTokenizer`): with
special parsing, the chat-template tags of both formats become single reserved
ids; without it, every character is its own id (code point + 1000), so a tag
spelled in text is many tokens, as with a real tokenizer. Each `generate`
answers with the next scripted reply (a string, or a function of the prompt's
text), handing its text to `on_text` one token (one character) at a time as the
real model streams it (`pace_s` apart, where given, spent asleep or, `busy`, on the
processor as a real model's are; `interrupted` asked before each
token after the first, and with `serial` one generation at a time, as the real model
does), and records the prompt it was
given, and how much of it a real model would have had to evaluate.

`merge_content` joins the content events such streaming yields back into one per
run, as a reader of the turn sees them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from boxmaker.core.wire.loop import ContentEvent, Event, UsageEvent
from boxmaker.loopd.demo import OFFSET, SPECIAL, CharTokenizer
from boxmaker.loopd.model import Generation, Interrupted, NoVocabulary, never

__all__ = ["OFFSET", "SPECIAL", "ScriptedModel", "merge_content", "usage_of"]

Reply = str | Callable[[str], str]


class ScriptedModel(CharTokenizer, NoVocabulary):
    def __init__(
        self,
        replies: Sequence[Reply] = (),
        chat_template: str | None = None,
        pace_s: float = 0.0,
        serial: bool = False,
        busy: bool = False,
    ) -> None:
        self.replies: list[Reply] = list(replies)
        self.pace_s = pace_s  # a pause after each token: a reply that takes its time
        self.busy = busy  # the pause spent computing, as a real model spends a core
        # one generation at a time for every session, its text handed out under the
        # lock, as the real model does
        self._serial = threading.Lock() if serial else None
        self.returned: list[float] = []  # when each generation returned (monotonic)
        self.chat_template = chat_template
        self.prompts: list[list[int]] = []
        self.evaluated: list[int] = []
        self._last: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def prompt_text(self, index: int = -1) -> str:
        """The text of a recorded prompt (tags shown as they are spelled)."""
        return self.detokenize(self.prompts[index])

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
        if self._serial is None:
            return self._generate(session, prompt, max_tokens, on_text, interrupted)
        with self._serial:
            return self._generate(session, prompt, max_tokens, on_text, interrupted)

    def _generate(
        self,
        session: str,
        prompt: list[int],
        max_tokens: int,
        on_text: Callable[[str], None],
        interrupted: Interrupted,
    ) -> Generation:
        with self._lock:
            before = self._last.get(session, [])
            reused = 0
            for a, b in zip(before, prompt, strict=False):
                if a != b:
                    break
                reused += 1
            self.prompts.append(list(prompt))
            self.evaluated.append(len(prompt) - reused)
            if not self.replies:
                raise AssertionError("the scripted model has no reply left")
            reply = self.replies.pop(0)
            text = reply(self.detokenize(prompt)) if callable(reply) else reply
            ids = self.tokenize(text, special=False)[:max_tokens]
            self._last[session] = list(prompt) + ids
        made: list[int] = []
        for token in ids:
            if made and interrupted():
                break
            made.append(token)
            on_text(self.detokenize([token]))
            if self.pace_s:
                _pause(self.pace_s, self.busy)
        cut = len(made) < len(ids)
        with self._lock:
            self._last[session] = list(prompt) + made
            self.returned.append(time.monotonic())
        return Generation(
            ids=tuple(made),
            text=self.detokenize(made),
            prompt_tokens=len(prompt),
            evaluated=len(prompt) - reused,
            finished=not cut and len(ids) < max_tokens,
            interrupted=cut,
        )


def merge_content(events: Sequence[Event]) -> list[Event]:
    """`events`, each run of consecutive content events joined into one, without the
    usage events (the status line's figures; `usage_of` keeps them)."""
    merged: list[Event] = []
    for event in events:
        if isinstance(event, UsageEvent):
            continue
        if isinstance(event, ContentEvent) and merged and isinstance(merged[-1], ContentEvent):
            merged[-1] = ContentEvent(text=merged[-1].text + event.text)
        else:
            merged.append(event)
    return merged


def usage_of(events: Sequence[Event]) -> list[UsageEvent]:
    """The usage events among `events`, one for each reply of the model, in order."""
    return [event for event in events if isinstance(event, UsageEvent)]


def _pause(seconds: float, busy: bool) -> None:
    if not busy:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
