"""The context loopd gives the model: `[model] context` and `memory_mib` against its metadata.

Pure; no I/O. loopd reads the GGUF file's metadata (llama.cpp's own reading of it, the
vocabulary loaded alone) and `fit_context` turns it and the keys into the context
llama.cpp is given, the KV cache that takes, and what is left of `memory_mib` for
saved sessions; or refuses at start in one line naming the key and what to set.

The KV cache of one token, over the layers that have one (`kv_bytes_per_token`):

    layers * head_count_kv * (key_length + value_length) * the element size of kv_type

from `<arch>.block_count`, `<arch>.attention.head_count_kv` (else `head_count`: no
grouped-query attention), `<arch>.attention.key_length` (else `embedding_length //
head_count`) and `<arch>.attention.value_length` (else the key length), `<arch>`
being `general.architecture`; the element sizes are `core.offload.KV_ELEMENT_BYTES`.
A hybrid model (Qwen3.5, Qwen3-Next: `<arch>.full_attention_interval`) has a KV
cache only in its attention layers, one in every `interval`: `block_count //
interval` of them count (none: a KV cache of 0 bytes); its recurrent layers hold a
fixed state instead, whatever the context. Where a model gives its KV heads per
layer (an array, which llama.cpp's metadata leaves out), `head_count` over every
layer stands in: more than the cache takes, so the context chosen is smaller than
what fits, never larger. loopd keeps the full cache of sliding-window layers
(`swa_full`), so they count in full: Gemma 3 270M's 18 layers at 18,432 bytes a
token, 576 MiB at its trained 32,768 (llama.cpp's own count at load agrees).

The rules:

1. `context = 0` (the default): the trained context (`<arch>.context_length`),
   bounded by the largest multiple of 256 tokens whose KV cache fits `memory_mib`.
   Without the layer and head counts, the trained context alone (the KV cache's
   size unknown); without the trained context, 4096 stands for it. A `memory_mib`
   that holds no 256 tokens is refused, naming `[model] memory_mib`.
2. `context > 0`: as given; above the trained context, or with a KV cache larger
   than `memory_mib`, it is refused, naming `[model] context` (and `memory_mib`).
   What the metadata does not say is not checked.
3. What is left of `memory_mib` after the live KV cache is the saved sessions'
   budget (`saved_bytes`); None where the KV cache's size is unknown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from boxmaker.core.errors import ConfigError
from boxmaker.core.offload import KV_ELEMENT_BYTES, MIB, KvType

CONTEXT_STEP = 256  # context = 0 chooses a multiple of this; a context set is at least it
FALLBACK_CONTEXT = 4096  # the trained context of a model whose metadata names none


class ContextFitError(ConfigError):
    """`[model] context` or `memory_mib` cannot be honoured (one line naming the key)."""


@dataclass(frozen=True)
class ContextFit:
    """The context llama.cpp is given, and the memory it takes."""

    context: int  # tokens
    trained: int | None  # <arch>.context_length; None: the metadata names none
    kv_bytes_per_token: float | None  # None: the metadata lacks the counts
    kv_bytes: int | None  # the live KV cache at `context`
    saved_bytes: int | None  # memory_mib less the live KV cache: the saved sessions'
    why: str  # how `context` was chosen, a phrase

    def describe(self, memory_mib: int) -> str:
        """`context=N trained=T kv_mib=K memory_mib=M saved_mib=S` and the why: loopd's
        start-up log line (`event=context`) and `bxctl model check`'s context fact."""
        trained = self.trained if self.trained is not None else "unknown"
        kv = math.ceil(self.kv_bytes / MIB) if self.kv_bytes is not None else "unknown"
        saved = self.saved_bytes // MIB if self.saved_bytes is not None else "unknown"
        return (
            f"context={self.context} trained={trained} kv_mib={kv} memory_mib={memory_mib} "
            f"saved_mib={saved} ({self.why})"
        )


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


def kv_bytes_per_token(metadata: Mapping[str, object], kv_type: KvType = "f16") -> float | None:
    """The KV cache one token of context takes, over the layers with attention, its
    elements of `kv_type` (`[model] kv_type`); None where the counts are missing."""
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
    return layers * kv_heads * (key + value) * KV_ELEMENT_BYTES[kv_type]


def fit_context(
    metadata: Mapping[str, object], *, context: int, memory_mib: int, kv_type: KvType
) -> ContextFit:
    """The context for `[model] context` (0: what fits) and `memory_mib`, by the rules
    above; ContextFitError when refused."""
    trained = trained_context(metadata)
    per_token = kv_bytes_per_token(metadata, kv_type)
    if context == 0:
        return _what_fits(trained, per_token, memory_mib, kv_type)
    return _as_set(context, trained, per_token, memory_mib, kv_type)


def _what_fits(
    trained: int | None, per_token: float | None, memory_mib: int, kv_type: KvType
) -> ContextFit:
    """Rule 1: `context = 0`."""
    bound = trained if trained is not None else FALLBACK_CONTEXT
    if per_token is None:
        why = (
            "the trained context; the KV cache's size is unknown: the metadata lacks "
            "the layer and head counts"
            if trained is not None
            else f"{FALLBACK_CONTEXT}: the metadata names neither the trained context "
            "nor the layer and head counts"
        )
        return ContextFit(bound, trained, None, None, None, why)
    memory = memory_mib * MIB
    fits = _largest(memory, per_token)
    if fits == 0:
        step = math.ceil(per_token * CONTEXT_STEP / MIB)
        raise ContextFitError(
            f"[model] memory_mib = {memory_mib} holds no {CONTEXT_STEP} tokens of KV cache "
            f"({step} MiB at kv_type {kv_type}): set memory_mib to {step} or more"
        )
    chosen = bound if fits is None else min(bound, fits)
    if chosen < bound:
        why = "what fits memory_mib; " + (
            f"the trained context is {trained}"
            if trained is not None
            else f"the metadata names no trained context ({FALLBACK_CONTEXT} stands for it)"
        )
    elif trained is None:
        why = f"{FALLBACK_CONTEXT}: the metadata names no trained context; its KV cache fits"
    else:
        why = "the trained context; its KV cache fits memory_mib"
    return _fitted(chosen, trained, per_token, memory, why)


def _as_set(
    context: int, trained: int | None, per_token: float | None, memory_mib: int, kv_type: KvType
) -> ContextFit:
    """Rule 2: `context > 0`."""
    if trained is not None and context > trained:
        raise ContextFitError(
            f"[model] context = {context} is more than the model's trained context "
            f"({trained} tokens): set it to {trained} or less, or to 0 for what fits"
        )
    if per_token is None:
        why = "as set; the KV cache's size is unknown: the metadata lacks the layer and head counts"
        return ContextFit(context, trained, None, None, None, why)
    memory = memory_mib * MIB
    needed = math.ceil(context * per_token)
    if needed > memory:
        need_mib = math.ceil(needed / MIB)
        fits = _largest(memory, per_token)
        lower = f", or [model] context to {fits} or less (0: what fits)" if fits else ""
        raise ContextFitError(
            f"[model] context = {context} needs {need_mib} MiB of KV cache at kv_type "
            f"{kv_type}, more than [model] memory_mib = {memory_mib}: set memory_mib to "
            f"{need_mib} or more{lower}"
        )
    return _fitted(context, trained, per_token, memory, "as set")


def _largest(memory: int, per_token: float) -> int | None:
    """The largest multiple of CONTEXT_STEP tokens whose KV cache fits `memory` bytes;
    None: any (no layer has a KV cache)."""
    if per_token == 0:
        return None
    return int(memory // (per_token * CONTEXT_STEP)) * CONTEXT_STEP


def _fitted(
    context: int, trained: int | None, per_token: float, memory: int, why: str
) -> ContextFit:
    kv = math.ceil(context * per_token)
    return ContextFit(context, trained, per_token, kv, memory - kv, why)
