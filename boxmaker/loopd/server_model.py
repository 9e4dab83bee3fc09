"""A model served by llama-server, driven by token ids (issue 41, `[model] backend`).

I/O: loads the model file's vocabulary here (llama-cpp-python, `vocab_only`: no
weights), and talks to the server over `ServerLink`. Everything of a turn but the
forward passes stays in loopd: the template, the dialect, the markers, neutralising,
tokenizing and the session log. A prompt crosses the link as token ids only
(`core.model.served`), so the guarantee of docs/markers.md holds as in-process: what a
tool result spells is tokenized here as plain text. The reply comes back as ids, each
turned into text here as `LlamaModel` does it, so the log holds the same ids and text
whichever backend made them.

At start, `check_server` holds the server to the same vocabulary: its `n_vocab`, and
its tokenizing of a probe (every marker of the vocabulary, with and without special
parsing, and plain text) equal to this file's. A server of another model is refused
(runbook.md#loopd-backend-mismatch).

One generation at a time, as in-process: the turn loop's callers wait on one lock.
Each session keeps to one of the server's slots where it has several (`id_slot`), the
least recently used slot given to a new one, so a session's next turn finds its own
prefix in the slot's cache.
"""

from __future__ import annotations

import codecs
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from boxmaker.core.errors import StartupError
from boxmaker.core.model.named_templates import ChosenTemplate
from boxmaker.core.model.sampling import Sampling
from boxmaker.core.model.served import ServedReplyError, completion_body, read_event
from boxmaker.core.runbook import Runbook
from boxmaker.loopd.adapter import Adapter
from boxmaker.loopd.llama_load import load_llama
from boxmaker.loopd.markers import Marker
from boxmaker.loopd.model import (
    ContextFullError,
    Generation,
    ModelUnavailableError,
    VocabularyParts,
)
from boxmaker.loopd.server_link import ServerLink, ServerUnreachableError

PROBE_TEXT = "Hello, wörld! 12 345\n\t<b>ünïcode</b> 你好 🙂 a  b"


class ServerModel:
    """A GGUF model's vocabulary here, its forward passes on a llama-server."""

    def __init__(self, path: Path, *, link: ServerLink, seed: int, sampling: Sampling) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self._lock = threading.Lock()
        self._link = link
        self._seed = seed
        self._sampling = sampling
        self._vocab_llm: Any = load_llama(path, vocab_only=True)
        self._vocab = llama_cpp.llama_model_get_vocab(self._vocab_llm.model)
        parts = VocabularyParts.read(self._vocab_llm)
        self.template_choice: ChosenTemplate | None = parts.template_choice
        self.chat_template: str | None = parts.chat_template
        self.architecture: str | None = parts.architecture
        self.bos_text = parts.bos_text
        self.eos_text = parts.eos_text
        self.add_bos = parts.add_bos
        self.markers: tuple[Marker, ...] = parts.markers
        self.plain_tokens: tuple[str, ...] = parts.plain_tokens
        self.adapter: Adapter | None = None  # a LoRA adapter is the server's (its --lora)
        self.offloaded: tuple[int, int] | None = None
        self._shown: frozenset[int] = frozenset()
        self._eos: int = self._vocab_llm.token_eos()
        served = check_server(link, self)
        self.context = served.context
        self._slots: OrderedDict[str, int] = OrderedDict()  # session -> slot, least recent first
        self._slot_count = served.slots

    @property
    def sampling(self) -> Sampling:
        return self._sampling

    @sampling.setter
    def sampling(self, sampling: Sampling) -> None:
        self._sampling = sampling

    def show(self, texts: Sequence[str]) -> None:
        """As `LlamaModel.show`: these markers render as their text in replies."""
        ids = [self.tokenize(t, special=True) for t in texts]
        self._shown = frozenset(i[0] for i in ids if len(i) == 1)

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        with self._lock:
            ids: list[int] = self._vocab_llm.tokenize(
                text.encode("utf-8"), add_bos=False, special=special
            )
            return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        with self._lock:
            data: bytes = self._vocab_llm.detokenize(list(ids))
        return data.decode("utf-8", errors="replace")

    def n_vocab(self) -> int:
        count: int = self._llama_cpp.llama_vocab_n_tokens(self._vocab)
        return count

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
            room = self.context - len(prompt)
            if room <= 0:
                raise ContextFullError(f"the prompt ({len(prompt)} tokens) fills the context")
            body = completion_body(
                prompt,
                max_tokens=min(max_tokens, room),
                sampling=self._sampling,
                seed=self._seed,
                slot=self._slot_of(session),
            )
            out: list[int] = []
            pieces: list[str] = []
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            finished = ended = False
            evaluated = len(prompt)
            try:
                lines = self._link.stream("/completion", body)
            except ServerUnreachableError as exc:
                raise self._unavailable(exc) from exc
            try:
                for line in lines:
                    event = read_event(line)
                    if event is None:
                        continue
                    if event.evaluated is not None:
                        evaluated = event.evaluated
                    for token in event.tokens:
                        if token in stop or token == self._eos or self._is_eog(token):
                            finished = True
                            break
                        out.append(token)
                        piece = self._vocab_llm.detokenize(
                            [token], prev_tokens=out[:-1], special=token in self._shown
                        )
                        pieces.append(decoder.decode(piece))
                        if pieces[-1]:
                            on_text(pieces[-1])
                    if event.last or finished or len(out) >= max_tokens:
                        ended = True
                        break
            except (ServerUnreachableError, ServedReplyError) as exc:
                raise self._unavailable(exc) from exc
            finally:
                lines.close()  # the server stops a completion whose client left
            if not ended:
                raise self._unavailable(
                    ServerUnreachableError(
                        f"the server at {self._link.address} ended a completion without "
                        "its last event"
                    )
                )
            pieces.append(decoder.decode(b"", final=True))
            if pieces[-1]:
                on_text(pieces[-1])
            return Generation(tuple(out), "".join(pieces), len(prompt), evaluated, finished)

    @staticmethod
    def _unavailable(exc: Exception) -> ModelUnavailableError:
        return ModelUnavailableError(f"{exc}; {Runbook.LOOPD_BACKEND_UNREACHABLE.pointer}")

    def _is_eog(self, token: int) -> bool:
        return bool(self._llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def _slot_of(self, session: str) -> int | None:
        """The slot `session` keeps to (None: the server has one, or does not say)."""
        if self._slot_count <= 1:
            return None
        if session in self._slots:
            self._slots.move_to_end(session)
            return self._slots[session]
        used = set(self._slots.values())
        free = [slot for slot in range(self._slot_count) if slot not in used]
        if free:
            slot = free[0]
        else:
            _, slot = self._slots.popitem(last=False)
        self._slots[session] = slot
        return slot


class Served:
    """What `check_server` read of the server."""

    def __init__(self, context: int, slots: int) -> None:
        self.context = context
        self.slots = slots


def check_server(link: ServerLink, model: ServerModel) -> Served:
    """The server's context and slots, after holding its vocabulary to the model file's:
    StartupError (runbook.md#loopd-backend-mismatch) where they differ, or
    (runbook.md#loopd-backend-unreachable) where it cannot be asked."""
    where = link.address
    try:
        props = link.get("/props")
        models = link.get("/v1/models")
        probe = "".join(m.text for m in model.markers) + PROBE_TEXT
        special = link.post(
            "/tokenize", {"content": probe, "add_special": False, "parse_special": True}
        )
        plain = link.post(
            "/tokenize", {"content": probe, "add_special": False, "parse_special": False}
        )
    except ServerUnreachableError as exc:
        raise StartupError(f"{exc}; {Runbook.LOOPD_BACKEND_UNREACHABLE.pointer}") from exc
    problems = []
    served_vocab = _n_vocab(models)
    if served_vocab != model.n_vocab():
        problems.append(
            f"its vocabulary has {served_vocab} tokens, the model file's {model.n_vocab()}"
        )
    if _tokens(special) != model.tokenize(probe, special=True):
        problems.append("it tokenizes the markers differently")
    if _tokens(plain) != model.tokenize(probe, special=False):
        problems.append("it tokenizes plain text differently")
    if problems:
        raise StartupError(
            f"the server at {where} does not serve the model file loopd reads "
            f"({'; '.join(problems)}): start it with the same GGUF file; "
            f"{Runbook.LOOPD_BACKEND_MISMATCH.pointer}"
        )
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    context = settings.get("n_ctx") if isinstance(settings, dict) else None
    slots = props.get("total_slots", 1) if isinstance(props, dict) else 1
    if not isinstance(context, int) or context <= 0:
        raise StartupError(
            f"the server at {where} does not say its context (/props n_ctx); "
            f"{Runbook.LOOPD_BACKEND_MISMATCH.pointer}"
        )
    return Served(context, slots if isinstance(slots, int) and slots > 0 else 1)


def _n_vocab(models: Any) -> int | None:
    try:
        value = models["data"][0]["meta"]["n_vocab"]
    except (KeyError, IndexError, TypeError):
        return None
    return value if isinstance(value, int) else None


def _tokens(answer: Any) -> list[int] | None:
    tokens = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        return None
    return tokens


__all__ = ["ServedReplyError", "ServerModel", "check_server"]
