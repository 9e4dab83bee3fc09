"""The context loopd gives the model (boxmaker.core.model.context_fit): each rule of the module
docstring over real metadata shapes and hostile ones, the cost of a token part by part,
the refusals word for word, and a property.

GEMMA3_270M is the embedded model's metadata as llama.cpp gives it (text values; the
file's own `llama_model_loader` dump agrees, and tests/loopd/test_loopd_config.py
reads the real file and checks the same figures). QWEN35 has the shape of the owner's
Qwen3.5 35B-A3B: a hybrid whose KV cache is in one layer of every four. NO_ATTENTION
is a qwen35moe whose 3 layers are all recurrent (fewer than its interval of 4),
trained, it says, on 2^24 tokens; ISSUE_38 is the same saying 2^31, the hostile file
of issue 38.

The expected costs are written out from llama.cpp's own terms (the module docstring
names the source of each): cells 52 + 2 x 48 bytes per cache, 4 for the token id,
the mask ubatch x (4, or 2 with flash attention) per cache (twice with a GPU), and
without flash attention ubatch x head_count x (4 + 2) for the scores.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxmaker.core.model.context_fit import (
    CONTEXT_STEP,
    LLAMA_MOST_CONTEXT,
    MOST_CONTEXT,
    ContextFit,
    ContextFitError,
    TokenCost,
    fit_context,
    kv_bytes_per_token,
    token_cost,
    trained_context,
)
from boxmaker.core.model.offload import ALL_LAYERS, KvType, Offload

MIB = 1024 * 1024
CPU = Offload(gpu_layers=0, flash_attn=False, kv_type="f16", batch=512, ubatch=512)
CPU_FLASH = Offload(gpu_layers=0, flash_attn=True, kv_type="f16", batch=512, ubatch=512)
GPU = Offload(gpu_layers=ALL_LAYERS, flash_attn=True, kv_type="f16", batch=512, ubatch=512)
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
# two caches (a sliding window): their cells and masks; four heads of scores
GEMMA3_OTHER = 2 * (52 + 96) + 4 + 512 * 2 * 4 + 512 * 4 * 6  # 16,684
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
QWEN35_OTHER = (52 + 96) + 4 + 512 * 4 + 512 * 16 * 6  # 51,352
NO_ATTENTION = {
    "general.architecture": "qwen35moe",
    "qwen35moe.context_length": str(2**24),
    "qwen35moe.block_count": "3",
    "qwen35moe.embedding_length": "64",
    "qwen35moe.attention.head_count": "4",
    "qwen35moe.attention.head_count_kv": "2",
    "qwen35moe.attention.key_length": "16",
    "qwen35moe.attention.value_length": "16",
    "qwen35moe.full_attention_interval": "4",
}
NO_ATTENTION_OTHER = (52 + 96) + 4  # its cells and token ids: no mask, no scores
ISSUE_38 = {**NO_ATTENTION, "qwen35moe.context_length": str(2**31)}
NO_COUNTS = {"general.architecture": "gemma3", "gemma3.context_length": "32768"}
NO_TRAINED = {k: v for k, v in GEMMA3_270M.items() if k != "gemma3.context_length"}


def fit(
    metadata: Mapping[str, object],
    context: int = 0,
    memory_mib: int = 4096,
    offload: Offload = CPU,
) -> ContextFit:
    return fit_context(metadata, context=context, memory_mib=memory_mib, offload=offload)


def with_kv(offload: Offload, kv_type: KvType) -> Offload:
    return Offload(offload.gpu_layers, offload.flash_attn, kv_type, offload.batch, offload.ubatch)


@pytest.mark.parametrize(
    ("metadata", "kv_type", "expected"),
    [
        (GEMMA3_270M, "f16", GEMMA3_PER_TOKEN),
        (GEMMA3_270M, "q8_0", GEMMA3_PER_TOKEN / 2 * 34 / 32),
        (GEMMA3_270M, "q4_0", GEMMA3_PER_TOKEN / 2 * 18 / 32),
        (QWEN35, "f16", QWEN35_PER_TOKEN),
        # gguf's own reader gives numbers, not text
        ({k: int(v) if v.isdigit() else v for k, v in QWEN35.items()}, "f16", QWEN35_PER_TOKEN),
        (NO_ATTENTION, "f16", 0),
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
        "hybrid-without-attention",
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


@pytest.mark.parametrize(
    ("metadata", "offload", "kv", "other"),
    [
        (GEMMA3_270M, CPU, GEMMA3_PER_TOKEN, GEMMA3_OTHER),
        # flash attention: an f16 mask per cache, no scores
        (GEMMA3_270M, CPU_FLASH, GEMMA3_PER_TOKEN, 2 * 148 + 4 + 512 * 2 * 2),
        # on a GPU, the mask again there
        (GEMMA3_270M, GPU, GEMMA3_PER_TOKEN, 2 * 148 + 4 + 512 * 2 * 2 * 2),
        (GEMMA3_270M, with_kv(CPU_FLASH, "q8_0"), 9792, 2 * 148 + 4 + 512 * 2 * 2),
        # the ubatch is at most the batch (llama_context's n_ubatch)
        (GEMMA3_270M, Offload(0, False, "f16", 128, 512), GEMMA3_PER_TOKEN, 300 + 128 * 32),
        (QWEN35, CPU, QWEN35_PER_TOKEN, QWEN35_OTHER),
        (QWEN35, CPU_FLASH, QWEN35_PER_TOKEN, 148 + 4 + 512 * 2),
        (NO_ATTENTION, CPU, 0, NO_ATTENTION_OTHER),
        (NO_ATTENTION, GPU, 0, NO_ATTENTION_OTHER),
    ],
    ids=[
        "gemma3-cpu",
        "gemma3-flash",
        "gemma3-gpu",
        "gemma3-q8_0-flash",
        "gemma3-small-batch",
        "qwen35-cpu",
        "qwen35-flash",
        "no-attention-cpu",
        "no-attention-gpu",
    ],
)
def test_the_cost_of_one_token_counts_llama_cpps_other_state(
    metadata: Mapping[str, object], offload: Offload, kv: float, other: float
) -> None:
    assert token_cost(metadata, offload) == TokenCost(kv, other)


def test_without_the_counts_the_cost_is_unknown() -> None:
    assert token_cost(NO_COUNTS, CPU) is None


def test_the_trained_context_is_the_architectures() -> None:
    assert trained_context(GEMMA3_270M) == 32768
    assert trained_context({**GEMMA3_270M, "general.architecture": "llama"}) is None
    assert trained_context(NO_TRAINED) is None
    assert trained_context(ISSUE_38) == 2**31


# rule 0: a trained context llama.cpp cannot count


@pytest.mark.parametrize("trained", [2**31, 2**32 - 1, 2**40], ids=["2^31", "2^32-1", "2^40"])
@pytest.mark.parametrize("context", [0, 4096], ids=["what-fits", "as-set"])
def test_a_trained_context_past_32_bits_is_refused_naming_the_key(
    trained: int, context: int
) -> None:
    with pytest.raises(ContextFitError) as raised:
        fit({**ISSUE_38, "qwen35moe.context_length": str(trained)}, context=context)
    assert str(raised.value) == (
        f"the model's trained context, qwen35moe.context_length = {trained}, is more than "
        "llama.cpp counts (2147483647 tokens): llama-cpp-python cannot tokenize with it; "
        "the file is damaged or hostile"
    )


def test_a_trained_context_of_2_to_the_31_less_1_is_only_capped() -> None:
    got = fit({**ISSUE_38, "qwen35moe.context_length": str(2**31 - 1)})
    assert (got.context, got.why) == (
        MOST_CONTEXT,
        "loopd's most; the trained context is 2147483647",
    )


# rule 1: context = 0


def test_the_embedded_model_gets_its_trained_context_at_the_default_memory() -> None:
    got = fit(GEMMA3_270M)
    other = 32768 * GEMMA3_OTHER  # 521.4 MiB
    assert got == ContextFit(
        context=32768,
        trained=32768,
        kv_bytes_per_token=GEMMA3_PER_TOKEN,
        other_bytes_per_token=GEMMA3_OTHER,
        kv_bytes=576 * MIB,
        other_bytes=other,
        saved_bytes=(4096 - 576) * MIB - other,
        why="the trained context; it fits memory_mib",
    )
    assert got.describe(4096) == (
        "context=32768 trained=32768 kv_mib=576 other_mib=522 memory_mib=4096 saved_mib=2998 "
        "(the trained context; it fits memory_mib)"
    )


def test_a_hybrid_without_attention_is_capped_and_says_why() -> None:
    got = fit(NO_ATTENTION)
    assert (got.context, got.trained, got.kv_bytes) == (MOST_CONTEXT, 2**24, 0)
    assert got.other_bytes == MOST_CONTEXT * NO_ATTENTION_OTHER
    assert got.describe(4096) == (
        "context=1048576 trained=16777216 kv_mib=0 other_mib=152 memory_mib=4096 "
        "saved_mib=3944 (loopd's most; the trained context is 16777216)"
    )
    # less memory than the cap takes: what fits, as for any model
    small = fit(NO_ATTENTION, memory_mib=100)  # 100 MiB / (152 B x 256) = 2,694.7 steps
    assert small.context == 2694 * CONTEXT_STEP
    assert small.why == "what fits memory_mib; the trained context is 16777216"


def test_a_hybrid_with_an_attention_layer_and_a_huge_trained_context_gets_what_fits() -> None:
    one_layer = {**NO_ATTENTION, "qwen35moe.block_count": "4"}  # the tiny qwen35moe's shape
    per_token = 1 * 2 * (16 + 16) * 2 + 148 + 4 + 512 * 4 + 512 * 4 * 6  # 14,616
    got = fit(one_layer)
    assert got.context == 4096 * MIB // (per_token * CONTEXT_STEP) * CONTEXT_STEP  # 293,632
    assert got.why == "what fits memory_mib; the trained context is 16777216"
    flash = fit(one_layer, offload=CPU_FLASH)  # 1,304 bytes a token: 3.3 million fit
    assert (flash.context, flash.why) == (
        MOST_CONTEXT,
        "loopd's most; the trained context is 16777216",
    )


@pytest.mark.parametrize(
    ("metadata", "memory_mib", "offload", "context"),
    [
        (GEMMA3_270M, 100, CPU, 2816),  # 100 MiB / 35,116 B = 2,986.0 tokens
        (GEMMA3_270M, 9, CPU, 256),
        (GEMMA3_270M, 100, CPU_FLASH, 4864),  # 100 MiB / 20,780 B = 5,046.1
        (QWEN35, 4096, CPU, 59648),  # 4 GiB / 71,832 B = 59,791.8
        (QWEN35, 4096, CPU_FLASH, 198144),  # 4 GiB / 21,656 B = 198,327.0
        (QWEN35, 4096, with_kv(GPU, "q8_0"), 262144),  # 12,984 B: the trained context fits
    ],
    ids=[
        "gemma3-small-memory",
        "gemma3-just-256",
        "gemma3-flash",
        "qwen35-cpu",
        "qwen35-flash",
        "qwen35-gpu-q8_0",
    ],
)
def test_a_memory_smaller_than_the_trained_contexts_cost_bounds_it(
    metadata: Mapping[str, object], memory_mib: int, offload: Offload, context: int
) -> None:
    got = fit(metadata, memory_mib=memory_mib, offload=offload)
    assert got.context == context
    assert got.kv_bytes is not None
    assert got.other_bytes is not None
    assert got.saved_bytes == memory_mib * MIB - got.kv_bytes - got.other_bytes >= 0
    if context < int(str(metadata[f"{metadata['general.architecture']}.context_length"])):
        assert got.why.startswith("what fits memory_mib; the trained context is ")
        cost = token_cost(metadata, offload)
        assert cost is not None
        assert (context + CONTEXT_STEP) * cost.total > memory_mib * MIB


def test_the_hybrids_figures() -> None:
    assert fit(QWEN35).describe(4096) == (
        "context=59648 trained=262144 kv_mib=1165 other_mib=2922 memory_mib=4096 saved_mib=9 "
        "(what fits memory_mib; the trained context is 262144)"
    )


def test_without_the_counts_the_trained_context_alone_and_it_says_so() -> None:
    got = fit(NO_COUNTS, memory_mib=1)
    assert (got.context, got.trained, got.kv_bytes, got.saved_bytes) == (32768, 32768, None, None)
    assert got.describe(1) == (
        "context=32768 trained=32768 kv_mib=unknown other_mib=unknown memory_mib=1 "
        "saved_mib=unknown (the trained context; its cost is unknown: the metadata lacks "
        "the layer and head counts)"
    )


def test_without_the_counts_a_huge_trained_context_is_capped_too() -> None:
    got = fit({"general.architecture": "x", "x.context_length": str(2**24)})
    assert (got.context, got.trained, got.kv_bytes) == (MOST_CONTEXT, 2**24, None)
    assert got.why == (
        "loopd's most; the trained context is 16777216, and its cost is unknown: the "
        "metadata lacks the layer and head counts"
    )


def test_without_the_trained_context_either_4096() -> None:
    got = fit({"general.architecture": "mystery"})
    assert (got.context, got.trained, got.kv_bytes) == (4096, None, None)
    assert got.why.startswith("4096: the metadata names neither the trained context")


def test_without_the_trained_context_4096_stands_for_it_within_memory() -> None:
    got = fit(NO_TRAINED)
    assert (got.context, got.trained, got.kv_bytes) == (4096, None, 72 * MIB)
    assert got.other_bytes == 4096 * GEMMA3_OTHER
    assert got.why == "4096: the metadata names no trained context; it fits memory_mib"
    smaller = fit(NO_TRAINED, memory_mib=36)  # 36 MiB / 35,116 B = 1,074.9 tokens
    assert (smaller.context, smaller.kv_bytes) == (1024, 1024 * GEMMA3_PER_TOKEN)
    assert smaller.why == (
        "what fits memory_mib; the metadata names no trained context (4096 stands for it)"
    )


def test_a_memory_that_holds_no_256_tokens_is_refused() -> None:
    with pytest.raises(ContextFitError) as raised:
        fit(GEMMA3_270M, memory_mib=8)  # 256 tokens take 8.6 MiB
    assert str(raised.value) == (
        "[model] memory_mib = 8 holds no 256 tokens of context (9 MiB: the KV cache at "
        "kv_type f16 and llama.cpp's other per-token state): set memory_mib to 9 or more"
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
        assert got.saved_bytes == (4096 - kv_mib) * MIB - context * GEMMA3_OTHER


def test_a_context_costs_what_llama_cpp_allocates_a_multiple_of_256() -> None:
    got = fit(QWEN35, context=300)  # llama_context pads n_ctx to 512
    assert (got.kv_bytes, got.other_bytes) == (512 * QWEN35_PER_TOKEN, 512 * QWEN35_OTHER)


def test_a_context_set_without_the_counts_is_not_checked_against_memory() -> None:
    got = fit(NO_COUNTS, context=32768, memory_mib=1)
    assert (got.context, got.kv_bytes, got.other_bytes, got.saved_bytes) == (
        32768,
        None,
        None,
        None,
    )
    assert got.why.startswith("as set; its cost is unknown")
    assert fit({}, context=MOST_CONTEXT).context == MOST_CONTEXT  # no trained context to pass


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
            NO_ATTENTION,
            MOST_CONTEXT + 1,
            4096,
            "[model] context = 1048577 is more than loopd's most (1048576 tokens): set it to "
            "1048576 or less, or to 0 for what fits",
        ),
        (
            {},
            2**32 + 256,  # llama.cpp's n_ctx is 32 bits: it would have been 256
            4096,
            "[model] context = 4294967552 is more than loopd's most (1048576 tokens): set it "
            "to 1048576 or less, or to 0 for what fits",
        ),
        (
            GEMMA3_270M,
            32768,
            512,
            "[model] context = 32768 needs 1098 MiB (the KV cache at kv_type f16 576, "
            "llama.cpp's other per-token state 522), more than [model] memory_mib = 512: set "
            "memory_mib to 1098 or more, or [model] context to 15104 or less (0: what fits)",
        ),
        (
            GEMMA3_270M,
            1024,
            8,
            "[model] context = 1024 needs 35 MiB (the KV cache at kv_type f16 18, llama.cpp's "
            "other per-token state 17), more than [model] memory_mib = 8: set memory_mib to "
            "35 or more",
        ),
    ],
    ids=[
        "past-trained",
        "past-trained-no-counts",
        "past-loopds-most",
        "past-32-bits",
        "past-memory",
        "past-memory-not-even-256",
    ],
)
def test_a_context_that_cannot_be_honoured_is_refused_naming_the_key(
    metadata: Mapping[str, object], context: int, memory_mib: int, message: str
) -> None:
    with pytest.raises(ContextFitError) as raised:
        fit(metadata, context=context, memory_mib=memory_mib)
    assert str(raised.value) == message
    assert isinstance(raised.value, ValueError)


# the property: context = 0 never passes the trained context, loopd's most or memory_mib,
# and leaves no room for another 256 tokens unless it is at one of the first two


@given(
    layers=st.integers(1, 128),
    kv_heads=st.integers(1, 64),
    head=st.sampled_from([64, 80, 128, 256]),
    interval=st.sampled_from([None, 2, 4, 8, 200]),
    window=st.booleans(),
    trained=st.integers(256, LLAMA_MOST_CONTEXT),
    memory_mib=st.integers(1, 1 << 18),
    offload=st.sampled_from([CPU, CPU_FLASH, GPU, with_kv(GPU, "q4_0")]),
)
def test_what_fits_fits(
    layers: int,
    kv_heads: int,
    head: int,
    interval: int | None,
    window: bool,
    trained: int,
    memory_mib: int,
    offload: Offload,
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
    if window:
        metadata["a.attention.sliding_window"] = "512"
    cost = token_cost(metadata, offload)
    assert cost is not None
    assert cost.other >= 52 + 96 + 4  # every model has its cells and token ids
    memory = memory_mib * MIB
    bound = min(trained, MOST_CONTEXT)
    try:
        got = fit(metadata, memory_mib=memory_mib, offload=offload)
    except ContextFitError:
        assert cost.total * CONTEXT_STEP > memory
        return
    assert got.kv_bytes is not None
    assert got.other_bytes is not None
    assert got.saved_bytes is not None
    assert got.context <= bound
    assert got.kv_bytes + got.other_bytes <= memory
    assert got.saved_bytes == memory - got.kv_bytes - got.other_bytes
    assert got.context == bound or (got.context + CONTEXT_STEP) * cost.total > memory
    assert got.context == bound or got.context % CONTEXT_STEP == 0
    assert (got.context == MOST_CONTEXT < trained) == got.why.startswith("loopd's most")
