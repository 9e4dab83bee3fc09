"""The context loopd gives the model (boxmaker.core.context_fit): each rule of the module
docstring over real metadata shapes, the refusals word for word, and a property.

GEMMA3_270M is the embedded model's metadata as llama.cpp gives it (text values; the
file's own `llama_model_loader` dump agrees, and tests/loopd/test_loopd_config.py
reads the real file and checks the same figures). QWEN35 has the shape of the owner's Qwen3.5
35B-A3B: a hybrid whose KV cache is in one layer of every four.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.context_fit import (
    CONTEXT_STEP,
    ContextFit,
    ContextFitError,
    fit_context,
    kv_bytes_per_token,
    trained_context,
)
from boxmaker.core.offload import KvType

MIB = 1024 * 1024
GEMMA3_270M = {
    "general.architecture": "gemma3",
    "gemma3.context_length": "32768",
    "gemma3.embedding_length": "640",
    "gemma3.block_count": "18",
    "gemma3.attention.head_count": "4",
    "gemma3.attention.head_count_kv": "1",
    "gemma3.attention.key_length": "256",
    "gemma3.attention.value_length": "256",
    "gemma3.attention.sliding_window": "512",
}
GEMMA3_PER_TOKEN = 18 * 1 * (256 + 256) * 2  # 18,432 bytes: 576 MiB at 32,768 tokens
QWEN35 = {
    "general.architecture": "qwen35moe",
    "qwen35moe.context_length": "262144",
    "qwen35moe.block_count": "40",
    "qwen35moe.embedding_length": "2048",
    "qwen35moe.attention.head_count": "16",
    "qwen35moe.attention.head_count_kv": "2",
    "qwen35moe.attention.key_length": "256",
    "qwen35moe.attention.value_length": "256",
    "qwen35moe.full_attention_interval": "4",
}
QWEN35_PER_TOKEN = 10 * 2 * (256 + 256) * 2  # 20,480 bytes: 40 layers, 10 with attention
NO_COUNTS = {"general.architecture": "gemma3", "gemma3.context_length": "32768"}
NO_TRAINED = {k: v for k, v in GEMMA3_270M.items() if k != "gemma3.context_length"}


def fit(
    metadata: Mapping[str, object], context: int = 0, memory_mib: int = 4096, kv: KvType = "f16"
) -> ContextFit:
    return fit_context(metadata, context=context, memory_mib=memory_mib, kv_type=kv)


@pytest.mark.parametrize(
    ("metadata", "kv_type", "expected"),
    [
        (GEMMA3_270M, "f16", GEMMA3_PER_TOKEN),
        (GEMMA3_270M, "q8_0", GEMMA3_PER_TOKEN / 2 * 34 / 32),
        (GEMMA3_270M, "q4_0", GEMMA3_PER_TOKEN / 2 * 18 / 32),
        (QWEN35, "f16", QWEN35_PER_TOKEN),
        # gguf's own reader gives numbers, not text
        ({k: int(v) if v.isdigit() else v for k, v in QWEN35.items()}, "f16", QWEN35_PER_TOKEN),
        # no key_length: embedding_length // head_count; no value_length: the key's
        (
            {"general.architecture": "llama", "llama.block_count": "32"}
            | {"llama.attention.head_count": "32", "llama.embedding_length": "4096"},
            "f16",
            32 * 32 * (128 + 128) * 2,
        ),
        (NO_COUNTS, "f16", None),
        ({**GEMMA3_270M, "gemma3.block_count": "many"}, "f16", None),
        ({}, "f16", None),
    ],
    ids=[
        "gemma3-f16",
        "gemma3-q8_0",
        "gemma3-q4_0",
        "hybrid-counts-attention-layers-only",
        "hybrid-numbers",
        "no-head-lengths-no-kv-heads",
        "no-counts",
        "a-count-not-a-number",
        "empty",
    ],
)
def test_the_kv_cache_of_one_token(
    metadata: Mapping[str, object], kv_type: KvType, expected: float | None
) -> None:
    assert kv_bytes_per_token(metadata, kv_type) == expected


def test_the_trained_context_is_the_architectures() -> None:
    assert trained_context(GEMMA3_270M) == 32768
    assert trained_context({**GEMMA3_270M, "general.architecture": "llama"}) is None
    assert trained_context(NO_TRAINED) is None


# rule 1: context = 0


def test_the_embedded_model_gets_its_trained_context_at_the_default_memory() -> None:
    got = fit(GEMMA3_270M)
    assert got == ContextFit(
        context=32768,
        trained=32768,
        kv_bytes_per_token=GEMMA3_PER_TOKEN,
        kv_bytes=576 * MIB,
        saved_bytes=(4096 - 576) * MIB,
        why="the trained context; its KV cache fits memory_mib",
    )
    assert got.describe(4096) == (
        "context=32768 trained=32768 kv_mib=576 memory_mib=4096 saved_mib=3520 "
        "(the trained context; its KV cache fits memory_mib)"
    )


@pytest.mark.parametrize(
    ("metadata", "memory_mib", "kv_type", "context"),
    [
        (GEMMA3_270M, 100, "f16", 5632),  # 100 MiB / 18,432 B = 5,688.9 tokens
        (GEMMA3_270M, 5, "f16", 256),
        (QWEN35, 4096, "f16", 209664),  # 4 GiB / 20,480 B = 209,715.2
        (QWEN35, 4096, "q8_0", 262144),  # 10,880 B a token: the trained context fits
    ],
    ids=["gemma3-small-memory", "gemma3-just-256", "qwen35-f16", "qwen35-q8_0"],
)
def test_a_memory_smaller_than_the_trained_contexts_cache_bounds_it(
    metadata: Mapping[str, object], memory_mib: int, kv_type: KvType, context: int
) -> None:
    got = fit(metadata, memory_mib=memory_mib, kv=kv_type)
    assert got.context == context
    assert got.kv_bytes is not None
    assert got.saved_bytes == memory_mib * MIB - got.kv_bytes >= 0
    if context < int(str(metadata[f"{metadata['general.architecture']}.context_length"])):
        assert got.why.startswith("what fits memory_mib; the trained context is ")
        assert (context + CONTEXT_STEP) * (got.kv_bytes_per_token or 0) > memory_mib * MIB


def test_the_hybrids_figures() -> None:
    assert fit(QWEN35).describe(4096) == (
        "context=209664 trained=262144 kv_mib=4095 memory_mib=4096 saved_mib=1 "
        "(what fits memory_mib; the trained context is 262144)"
    )


def test_without_the_counts_the_trained_context_alone_and_it_says_so() -> None:
    got = fit(NO_COUNTS, memory_mib=1)
    assert (got.context, got.trained, got.kv_bytes, got.saved_bytes) == (32768, 32768, None, None)
    assert got.describe(1) == (
        "context=32768 trained=32768 kv_mib=unknown memory_mib=1 saved_mib=unknown (the "
        "trained context; the KV cache's size is unknown: the metadata lacks the layer and "
        "head counts)"
    )


def test_without_the_trained_context_either_4096() -> None:
    got = fit({"general.architecture": "mystery"})
    assert (got.context, got.trained, got.kv_bytes) == (4096, None, None)
    assert got.why.startswith("4096: the metadata names neither the trained context")


def test_without_the_trained_context_4096_stands_for_it_within_memory() -> None:
    got = fit(NO_TRAINED)
    assert (got.context, got.trained, got.kv_bytes) == (4096, None, 72 * MIB)
    assert got.why == "4096: the metadata names no trained context; its KV cache fits"
    smaller = fit(NO_TRAINED, memory_mib=36)  # 36 MiB / 18,432 B = 2,048 tokens
    assert (smaller.context, smaller.kv_bytes, smaller.saved_bytes) == (2048, 36 * MIB, 0)
    assert smaller.why == (
        "what fits memory_mib; the metadata names no trained context (4096 stands for it)"
    )


def test_a_memory_that_holds_no_256_tokens_is_refused() -> None:
    with pytest.raises(ContextFitError) as raised:
        fit(GEMMA3_270M, memory_mib=4)  # 256 tokens take 4.5 MiB
    assert str(raised.value) == (
        "[model] memory_mib = 4 holds no 256 tokens of KV cache (5 MiB at kv_type f16): "
        "set memory_mib to 5 or more"
    )


# rule 2: context > 0


@pytest.mark.parametrize(
    ("metadata", "context", "kv_mib"),
    [(GEMMA3_270M, 8192, 144), (GEMMA3_270M, 32768, 576), (QWEN35, 300, None)],
    ids=["below-trained", "the-trained", "not-a-multiple-of-256"],
)
def test_a_context_set_is_used_as_given(
    metadata: Mapping[str, object], context: int, kv_mib: int | None
) -> None:
    got = fit(metadata, context=context)
    assert (got.context, got.why) == (context, "as set")
    if kv_mib is not None:
        assert got.kv_bytes == kv_mib * MIB
        assert got.saved_bytes == (4096 - kv_mib) * MIB


def test_a_context_set_without_the_counts_is_not_checked_against_memory() -> None:
    got = fit(NO_COUNTS, context=32768, memory_mib=1)
    assert (got.context, got.kv_bytes, got.saved_bytes) == (32768, None, None)
    assert got.why.startswith("as set; the KV cache's size is unknown")
    assert fit({}, context=1_000_000).context == 1_000_000  # no trained context to pass


@pytest.mark.parametrize(
    ("metadata", "context", "memory_mib", "message"),
    [
        (
            GEMMA3_270M,
            65536,
            4096,
            "[model] context = 65536 is more than the model's trained context (32768 tokens):"
            " set it to 32768 or less, or to 0 for what fits",
        ),
        (
            NO_COUNTS,
            32769,
            4096,
            "[model] context = 32769 is more than the model's trained context (32768 tokens):"
            " set it to 32768 or less, or to 0 for what fits",
        ),
        (
            GEMMA3_270M,
            32768,
            512,
            "[model] context = 32768 needs 576 MiB of KV cache at kv_type f16, more than "
            "[model] memory_mib = 512: set memory_mib to 576 or more, or [model] context to "
            "28928 or less (0: what fits)",
        ),
        (
            GEMMA3_270M,
            1024,
            4,
            "[model] context = 1024 needs 18 MiB of KV cache at kv_type f16, more than "
            "[model] memory_mib = 4: set memory_mib to 18 or more",
        ),
    ],
    ids=["past-trained", "past-trained-no-counts", "past-memory", "past-memory-not-even-256"],
)
def test_a_context_that_cannot_be_honoured_is_refused_naming_the_key(
    metadata: Mapping[str, object], context: int, memory_mib: int, message: str
) -> None:
    with pytest.raises(ContextFitError) as raised:
        fit(metadata, context=context, memory_mib=memory_mib)
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


# the property: context = 0 never passes the trained context or memory_mib, and leaves
# no room for another 256 tokens unless it is the trained context


@given(
    layers=st.integers(1, 128),
    kv_heads=st.integers(1, 64),
    head=st.sampled_from([64, 80, 128, 256]),
    interval=st.sampled_from([None, 2, 4, 8]),
    trained=st.integers(256, 1 << 20),
    memory_mib=st.integers(1, 1 << 18),
    kv_type=st.sampled_from(["f16", "q8_0", "q4_0"]),
)
def test_what_fits_fits(
    layers: int,
    kv_heads: int,
    head: int,
    interval: int | None,
    trained: int,
    memory_mib: int,
    kv_type: KvType,
) -> None:
    metadata = {
        "general.architecture": "a",
        "a.context_length": str(trained),
        "a.block_count": str(layers),
        "a.attention.head_count": str(kv_heads),
        "a.attention.key_length": str(head),
    }
    if interval is not None:
        metadata["a.full_attention_interval"] = str(interval)
    per_token = kv_bytes_per_token(metadata, kv_type)
    memory = memory_mib * MIB
    try:
        got = fit(metadata, memory_mib=memory_mib, kv=kv_type)
    except ContextFitError:
        assert per_token is not None
        assert per_token * CONTEXT_STEP > memory
        return
    assert per_token is not None
    if per_token == 0:  # a hybrid with fewer layers than its interval: no KV cache
        assert (got.context, got.kv_bytes, got.saved_bytes) == (trained, 0, memory)
        return
    assert got.kv_bytes is not None
    assert got.saved_bytes is not None
    assert got.context <= trained
    assert got.kv_bytes <= memory
    assert got.saved_bytes == memory - got.kv_bytes
    assert got.context == trained or (got.context + CONTEXT_STEP) * per_token > memory
    assert got.context == trained or got.context % CONTEXT_STEP == 0
