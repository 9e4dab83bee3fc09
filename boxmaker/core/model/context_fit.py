"""The context loopd gives the model: `[model] context` and `memory_mib` against its metadata.

Pure; no I/O. loopd reads the GGUF file's metadata (llama.cpp's own reading of it, the
vocabulary loaded alone) and `fit_context` turns it, the keys and the `Offload` loopd
planned into the context llama.cpp is given, what that context takes, and what is
left of `memory_mib` for saved sessions; or refuses at start in one line naming the
key and what to set. The metadata is hostile input: a count can be anything, and a
context is never taken from it unbounded.

What one token of context takes (`token_cost`), as the vendored llama.cpp of the
pinned llama-cpp-python (0.3.36) allocates it. First the KV cache
(`kv_bytes_per_token`):

    layers * head_count_kv * (key_length + value_length) * the element size of kv_type

from `<arch>.block_count`, `<arch>.attention.head_count_kv` (else `head_count`: no
grouped-query attention), `<arch>.attention.key_length` (else `embedding_length //
head_count`) and `<arch>.attention.value_length` (else the key length), `<arch>`
being `general.architecture`; the element sizes are `core.model.offload.KV_ELEMENT_BYTES`.
A hybrid model (Qwen3.5, Qwen3-Next: `<arch>.full_attention_interval`) has a KV
cache only in its attention layers, one in every `interval`: `block_count //
interval` of them count (none: a KV cache of 0 bytes); its recurrent layers hold a
fixed state per sequence instead (`llama_memory_recurrent`, one cell for
llama-cpp-python's one sequence), whatever the context. Where a model gives its KV
heads per layer (an array, which llama.cpp's metadata leaves out), `head_count`
over every layer stands in: more than the cache takes, so the context chosen is
smaller than what fits, never larger. loopd keeps the full cache of sliding-window
layers (`swa_full`), so they count in full: Gemma 3 270M's 18 layers at 18,432
bytes a token, 576 MiB at its trained 32,768 (llama.cpp's own count at load agrees).

Then the rest of llama.cpp's state that grows with the context (`other`):

- Each KV cache's cells, even one over no layer (src/llama-kv-cells.h,
  `llama_kv_cells::resize`, called for every cell by `llama_kv_cache`'s
  constructor): a position, a shift, a 2D position and token (`llama_kv_cell_ext`)
  and a 256-bit set of sequences (`LLAMA_MAX_SEQ`), 52 bytes; and, once a cell is
  used, a node in `used` and one in `seq_pos[0]` (std::set, 48 bytes each in
  glibc's malloc): `CELL_BYTES`. A sliding-window model has two caches
  (`llama_kv_cache_iswa`, the window's as large as the context under `swa_full`);
  the metadata says so by `<arch>.attention.sliding_window`. A hybrid with no
  attention layer still has its cache of cells: that is what a `context_length`
  of 2^31 asked for, 104 GiB.
- The attention mask of one ubatch (src/llama-graph.cpp, `build_attn_inp_kq_mask`:
  context x ubatch, f16 with flash attention, else f32), one per cache, in the
  compute buffer that `llama_context::sched_reserve` sizes for the full context
  (`llama_kv_cache::init_full`); with layers on a GPU, a second copy there (the
  scheduler keeps inputs on the CPU). Without flash attention, also the scores
  of one layer (`llm_graph_context::build_attn_mha`: `kq`, context x ubatch x
  head_count f32, the softmax in place) and the f16 copy of them that the
  product with V converts them to (ggml-cpu's `ggml_graph_plan`, MUL_MAT's work
  size; cuBLAS converts the same): `SCORE_BYTES` a score. A model with no
  attention layer has neither. The ubatch is `[model] ubatch`, at most `batch`
  (`llama_context`'s `n_ubatch`); a context shorter than it has fewer, counted
  as if it had not (more, never less).
- llama-cpp-python's `input_ids`, a C int a token (`TOKEN_ID_BYTES`).

Not counted: what does not grow with the context (the weights, the output and
logits buffers of one batch, the recurrent state); llama-cpp-python's batch, whose
`llama_batch_init(n_batch, 0, n_ctx)` mallocs batch x context x 4 bytes of which
it writes one int a row (address space, not memory: 2 GiB at 512 x 2^20); loopd's
own copies of a prompt. Measured (llama-cpp-python on a 2-core CPU, a tiny qwen3
of 2 layers, 4 heads, 2 KV heads of 16, ubatch 512, its RSS filled to 8,000 and to
32,000 tokens): 14,764 bytes a token without flash attention against 14,744
counted here, 1,503 with it against 1,432; its KV cache alone is 256. The embedded
Gemma 3 270M (two caches), filled to 4,000 and 16,000 without flash attention:
35,817 against 35,116, of which the KV cache is 18,432.

The rules:

0. A trained context past 2^31 - 1 (`LLAMA_MOST_CONTEXT`) is refused, whatever the
   keys, naming the metadata key: llama.cpp keeps `<arch>.context_length` as 32 bits
   unsigned but hands it out signed (`llama_model_n_ctx_train`, int32), and
   llama-cpp-python sizes every tokenization of a loaded model by it
   (`_internals.LlamaModel.tokenize`: a zeroed buffer of that many tokens, every
   call), which fails on a negative size. No model is trained on two billion
   tokens: the file is damaged or hostile.
1. `context = 0` (the default): the trained context (`<arch>.context_length`),
   never more than `MOST_CONTEXT`, bounded by the largest multiple of 256 tokens
   whose cost fits `memory_mib`. Without the layer and head counts, the trained
   context alone, within `MOST_CONTEXT` (its cost unknown); without the trained
   context, 4096 stands for it. A `memory_mib` that holds no 256 tokens is
   refused, naming `[model] memory_mib`.
2. `context > 0`: as given; above the trained context, above `MOST_CONTEXT`, or
   costing more than `memory_mib`, it is refused, naming `[model] context` (and
   `memory_mib`). What the metadata does not say is not checked.
3. A context costs what llama.cpp allocates: llama_context rounds it up to a
   multiple of 256 (`GGML_PAD(n_ctx, 256)`), so a context set to 300 costs 512
   tokens. What is left of `memory_mib` after it is the saved sessions' budget
   (`saved_bytes`); None where the cost is unknown.

`MOST_CONTEXT` is 1,048,576 tokens (2^20): the longest trained context of the open
models loopd is for is about a million (Qwen2.5's 1M models: 1,010,000; Qwen3.5:
262,144, or 1,010,000 with YaRN). A context past it would be paid where
`memory_mib` does not look (the batch's address space above, loopd's own token
lists, hours of prefill on a CPU), and only a file that says it was trained on more
asks for it: what it gets is said, with the trained context beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from boxmaker.core.errors import ConfigError
from boxmaker.core.model.offload import KV_ELEMENT_BYTES, MIB, KvType, Offload

CONTEXT_STEP = 256  # context = 0 chooses a multiple of this; a context set is at least it
FALLBACK_CONTEXT = 4096  # the trained context of a model whose metadata names none
MOST_CONTEXT = 1 << 20  # 1,048,576: the most loopd gives (rules 1 and 2)
LLAMA_MOST_CONTEXT = (1 << 31) - 1  # the most trained context llama.cpp counts (rule 0)
CELL_BYTES = 52 + 2 * 48  # a KV cell: llama_kv_cells' vectors, and two set nodes once used
TOKEN_ID_BYTES = 4  # llama-cpp-python's input_ids: a C int
SCORE_BYTES = 4 + 2  # an attention score without flash attention: f32, and its f16 copy
MASK_BYTES = {True: 2, False: 4}  # an element of the mask, by flash attention (f16, f32)


class ContextFitError(ConfigError):
    """`[model] context` or `memory_mib` cannot be honoured, or the model's trained
    context cannot be (one line naming the key)."""


@dataclass(frozen=True)
class TokenCost:
    """What one token of context takes, in bytes: the KV cache, and the rest."""

    kv: float
    other: float

    @property
    def total(self) -> float:
        return self.kv + self.other


@dataclass(frozen=True)
class ContextFit:
    """The context llama.cpp is given, and the memory it takes."""

    context: int  # tokens
    trained: int | None  # <arch>.context_length; None: the metadata names none
    kv_bytes_per_token: float | None  # None: the metadata lacks the counts
    other_bytes_per_token: float | None  # llama.cpp's other per-token state; None: the same
    kv_bytes: int | None  # the live KV cache at `context` (rule 3)
    other_bytes: int | None  # the rest of what `context` takes (rule 3)
    saved_bytes: int | None  # memory_mib less both: the saved sessions'
    why: str  # how `context` was chosen, a phrase

    def describe(self, memory_mib: int) -> str:
        """`context=N trained=T kv_mib=K other_mib=O memory_mib=M saved_mib=S` and the why:
        loopd's start-up log line (`event=context`), `loopd probe`'s and `bxctl model
        check`'s context fact."""
        trained = self.trained if self.trained is not None else "unknown"
        saved = self.saved_bytes // MIB if self.saved_bytes is not None else "unknown"
        return (
            f"context={self.context} trained={trained} kv_mib={_mib(self.kv_bytes)} "
            f"other_mib={_mib(self.other_bytes)} memory_mib={memory_mib} saved_mib={saved} "
            f"({self.why})"
        )


def _mib(size: int | None) -> int | str:
    return math.ceil(size / MIB) if size is not None else "unknown"


def _count(metadata: Mapping[str, object], key: str) -> int | None:
    """A positive count from the metadata (llama.cpp gives text, gguf numbers); None
    when absent or not one."""
    value = metadata.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    return value if isinstance(value, int) and value > 0 else None


def _architecture(metadata: Mapping[str, object]) -> str:
    arch = metadata.get("general.architecture")
    return arch if isinstance(arch, str) else ""


def trained_context(metadata: Mapping[str, object]) -> int | None:
    """`<arch>.context_length`; None where the metadata names none."""
    return _count(metadata, f"{_architecture(metadata)}.context_length")


@dataclass(frozen=True)
class _Shape:
    """The counts the cost of a token depends on."""

    attention_layers: int  # the layers with a KV cache (0: a hybrid with none)
    heads: int
    kv_heads: int
    key: int
    value: int
    caches: int  # KV caches, each with a cell per token: 2 with a sliding window


def _shape(metadata: Mapping[str, object]) -> _Shape | None:
    arch = _architecture(metadata)

    def number(key: str) -> int | None:
        return _count(metadata, f"{arch}.{key}")

    layers = number("block_count")
    heads = number("attention.head_count")
    kv_heads = number("attention.head_count_kv") or heads
    embedding = number("embedding_length")
    key = number("attention.key_length") or (embedding // heads if embedding and heads else None)
    value = number("attention.value_length") or key
    if not layers or not kv_heads or not key or not value:
        return None
    interval = number("full_attention_interval")
    if interval:  # hybrid: one attention layer in every `interval`
        layers = layers // interval
    caches = 2 if number("attention.sliding_window") else 1
    return _Shape(layers, heads or kv_heads, kv_heads, key, value, caches)


def kv_bytes_per_token(metadata: Mapping[str, object], kv_type: KvType = "f16") -> float | None:
    """The KV cache one token of context takes, over the layers with attention, its
    elements of `kv_type` (`[model] kv_type`); None where the counts are missing."""
    shape = _shape(metadata)
    if shape is None:
        return None
    return (
        shape.attention_layers
        * shape.kv_heads
        * (shape.key + shape.value)
        * KV_ELEMENT_BYTES[kv_type]
    )


def token_cost(metadata: Mapping[str, object], offload: Offload) -> TokenCost | None:
    """What one token of context takes with `offload` (its kv_type, flash_attn, batch,
    ubatch and gpu_layers), by the count above; None where the counts are missing."""
    shape = _shape(metadata)
    kv = kv_bytes_per_token(metadata, offload.kv_type)
    if shape is None or kv is None:
        return None
    other = shape.caches * CELL_BYTES + TOKEN_ID_BYTES
    if shape.attention_layers:
        ubatch = min(offload.ubatch, offload.batch)
        copies = 2 if offload.gpu_layers != 0 else 1
        other += ubatch * shape.caches * MASK_BYTES[offload.flash_attn] * copies
        if not offload.flash_attn:
            other += ubatch * shape.heads * SCORE_BYTES
    return TokenCost(kv, other)


def fit_context(
    metadata: Mapping[str, object], *, context: int, memory_mib: int, offload: Offload
) -> ContextFit:
    """The context for `[model] context` (0: what fits) and `memory_mib` with `offload`,
    by the rules above; ContextFitError when refused."""
    trained = trained_context(metadata)
    if trained is not None and trained > LLAMA_MOST_CONTEXT:
        raise ContextFitError(
            f"the model's trained context, {_architecture(metadata)}.context_length = "
            f"{trained}, is more than llama.cpp counts ({LLAMA_MOST_CONTEXT} tokens): "
            "llama-cpp-python cannot tokenize with it; the file is damaged or hostile"
        )
    cost = token_cost(metadata, offload)
    if context == 0:
        return _what_fits(trained, cost, memory_mib, offload.kv_type)
    return _as_set(context, trained, cost, memory_mib, offload.kv_type)


def _what_fits(
    trained: int | None, cost: TokenCost | None, memory_mib: int, kv_type: KvType
) -> ContextFit:
    """Rule 1: `context = 0`."""
    bound = min(trained if trained is not None else FALLBACK_CONTEXT, MOST_CONTEXT)
    capped = trained is not None and trained > MOST_CONTEXT
    if cost is None:
        unknown = "its cost is unknown: the metadata lacks the layer and head counts"
        if capped:
            why = f"loopd's most; the trained context is {trained}, and {unknown}"
        elif trained is not None:
            why = f"the trained context; {unknown}"
        else:
            why = (
                f"{FALLBACK_CONTEXT}: the metadata names neither the trained context "
                "nor the layer and head counts"
            )
        return ContextFit(bound, trained, None, None, None, None, None, why)
    memory = memory_mib * MIB
    fits = _largest(memory, cost)
    if fits == 0:
        step = math.ceil(cost.total * CONTEXT_STEP / MIB)
        raise ContextFitError(
            f"[model] memory_mib = {memory_mib} holds no {CONTEXT_STEP} tokens of context "
            f"({step} MiB: the KV cache at kv_type {kv_type} and llama.cpp's other "
            f"per-token state): set memory_mib to {step} or more"
        )
    chosen = min(bound, fits)
    if chosen < bound:
        why = "what fits memory_mib; " + (
            f"the trained context is {trained}"
            if trained is not None
            else f"the metadata names no trained context ({FALLBACK_CONTEXT} stands for it)"
        )
    elif capped:
        why = f"loopd's most; the trained context is {trained}"
    elif trained is None:
        why = f"{FALLBACK_CONTEXT}: the metadata names no trained context; it fits memory_mib"
    else:
        why = "the trained context; it fits memory_mib"
    return _fitted(chosen, trained, cost, memory, why)


def _as_set(
    context: int, trained: int | None, cost: TokenCost | None, memory_mib: int, kv_type: KvType
) -> ContextFit:
    """Rule 2: `context > 0`."""
    if trained is not None and context > trained:
        raise ContextFitError(
            f"[model] context = {context} is more than the model's trained context "
            f"({trained} tokens): set it to {trained} or less, or to 0 for what fits"
        )
    if context > MOST_CONTEXT:
        raise ContextFitError(
            f"[model] context = {context} is more than loopd's most ({MOST_CONTEXT} "
            f"tokens): set it to {MOST_CONTEXT} or less, or to 0 for what fits"
        )
    if cost is None:
        why = "as set; its cost is unknown: the metadata lacks the layer and head counts"
        return ContextFit(context, trained, None, None, None, None, None, why)
    memory = memory_mib * MIB
    kv, other = _bytes(context, cost)
    if kv + other > memory:
        need_mib = math.ceil((kv + other) / MIB)
        fits = _largest(memory, cost)
        lower = f", or [model] context to {fits} or less (0: what fits)" if fits else ""
        raise ContextFitError(
            f"[model] context = {context} needs {need_mib} MiB (the KV cache at kv_type "
            f"{kv_type} {_mib(kv)}, llama.cpp's other per-token state {_mib(other)}), more "
            f"than [model] memory_mib = {memory_mib}: set memory_mib to {need_mib} or "
            f"more{lower}"
        )
    return _fitted(context, trained, cost, memory, "as set")


def _bytes(context: int, cost: TokenCost) -> tuple[int, int]:
    """Rule 3: the KV cache and the rest at `context`, as llama.cpp allocates it:
    rounded up to a multiple of 256 tokens."""
    held = -(-context // CONTEXT_STEP) * CONTEXT_STEP
    return math.ceil(held * cost.kv), math.ceil(held * cost.other)


def _largest(memory: int, cost: TokenCost) -> int:
    """The largest multiple of CONTEXT_STEP tokens that costs at most `memory` bytes."""
    tokens = int(memory // (cost.total * CONTEXT_STEP)) * CONTEXT_STEP
    while tokens and sum(_bytes(tokens, cost)) > memory:  # the rounding up of each part
        tokens -= CONTEXT_STEP
    return tokens


def _fitted(
    context: int, trained: int | None, cost: TokenCost, memory: int, why: str
) -> ContextFit:
    kv, other = _bytes(context, cost)
    return ContextFit(context, trained, cost.kv, cost.other, kv, other, memory - kv - other, why)
