"""A real model whose tool calls are written for it: for the tests of long sessions.

The embedded Gemma 3 270M is a base model: it cannot call tools. `ForcedModel`
wraps a loaded `LlamaModel`: when `force` returns a text for a prompt (given as
text), that text is the reply, as token ids of the real vocabulary, streamed as
the real model streams; any other prompt is the real model's to answer (its
summaries and answers are its own). Everything else (tokenizing, the context,
the KV cache, a session's saved state) is the real model's. It proves the path
with real token counts, not the quality of what the model writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from boxmaker.loopd.model import Generation, Interrupted, LlamaModel, Wrapping, never


class ForcedModel(Wrapping):
    inner: LlamaModel  # its own llama, for `_spelled`

    def __init__(self, model: LlamaModel, force: Callable[[str], str | None]) -> None:
        self.inner = model
        self.force = force
        self.forced = 0  # replies written for the model
        self.prompts: list[list[int]] = []

    def _spelled(self, ids: Sequence[int]) -> str:
        """The text of `ids` with special tokens spelled (`<start_of_turn>`), as `force`
        reads prompts (the model's own detokenize renders them as nothing)."""
        data: bytes = self.inner._llm.detokenize(list(ids), special=True)
        return data.decode("utf-8", errors="replace")

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
        self.prompts.append(list(prompt))
        text = self.force(self._spelled(prompt[-400:]))
        if text is None:
            return self.inner.generate(
                session,
                prompt,
                max_tokens=max_tokens,
                stop=stop,
                on_text=on_text,
                interrupted=interrupted,
            )
        self.forced += 1
        ids = self.inner.tokenize(text, special=False)[:max_tokens]
        written = self.inner.detokenize(ids)
        on_text(written)
        return Generation(tuple(ids), written, len(prompt), 0, len(ids) < max_tokens)
