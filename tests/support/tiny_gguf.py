"""Tiny GGUF models for tests: random weights, a real vocabulary and a real chat template.

No model hub is reachable from the tests, so a test that needs "a Qwen3 model" or
"a Qwen3.5 MoE model" builds one with `write_tiny_model`: it proves the path (the
pinned llama-cpp-python loads the file, reads the template back, tokenizes the
markers, generates), never the quality; what such a model says is noise.

Rules, in the order the code follows them:

1. The vocabulary is copied, never made up: every `tokenizer.*` key of a
   vocabulary-only GGUF (scripts/fetch-vocabularies fetches them from the pinned
   llama-cpp-python's source package), with its GGUF type, except the chat
   templates (`tokenizer.chat_template`, `tokenizer.chat_template.<name>` and
   `tokenizer.chat_templates`), which are the templates given.
2. An architecture is one row of `ARCHITECTURES`: its hyperparameters and its
   tensors, named and shaped as the vendored llama.cpp creates them
   (src/models/<arch>.cpp, `load_arch_hparams` and `load_arch_tensors`). The loader
   refuses a file that lacks a tensor it creates or holds one it does not, so the
   row is the whole model. Names come from gguf's own table (`TENSOR_NAMES`).
3. Shapes are written in ggml order (ne0 first), as llama.cpp's `create_tensor`
   spells them; numpy's order is the reverse.
4. Norm weights are ones, `ssm_a` is -1 (it stands for -exp(A_log)), every other
   tensor is normal * 0.02, drawn in row order from one numpy Generator seeded with
   `seed`: the same seed, vocabulary and template give the same bytes.
5. `token_embd` is f16 (the vocabulary makes it the one large tensor, and the output
   layer is tied to it, as in the small Qwen models); every other tensor is f32.
6. Named templates (`named_templates`, name to template) are written as
   convert_hf_to_gguf.py writes a Hugging Face `chat_template` list of `{name,
   template}`: through gguf's own `GGUFWriter.add_chat_template`, the template given
   as `default`, each other under `tokenizer.chat_template.<name>`, their names in
   `tokenizer.chat_templates` (a Hermes 2 Pro or Hermes 3 file: `tool_use`). gguf
   lists the names from a set: with more than one, their order (so rule 4's same
   bytes) may change between runs.
7. Any other metadata (`metadata`, key to string) is written as given, after the
   rest, raw: a key may be a named template gguf's writer would not let through
   (`tokenizer.chat_template.` and a name holding ESC or a newline), or
   `general.name` holding terminal controls. A hostile file is written this way.
8. `layers` and `context` replace the row's layer count and trained context
   (`<arch>.block_count`, `<arch>.context_length`, written as gguf writes them); the
   tensors follow the count. A qwen35moe of fewer layers than its
   `full_attention_interval` has no attention layer: a hostile file's shape.

I/O: reads the vocabulary file, writes the model file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGUFReader, GGUFValueType, GGUFWriter

TOKENIZER_PREFIX = "tokenizer."
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"
CHAT_TEMPLATES_KEY = "tokenizer.chat_templates"  # the names of the named ones
TOKENS_KEY = "tokenizer.ggml.tokens"
WEIGHT_SCALE = 0.02


class Fill(StrEnum):
    """What a tensor holds (rule 4)."""

    normal = "normal"
    ones = "ones"
    minus_ones = "minus_ones"


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a tiny model: its GGUF name, ggml shape (ne0 first) and filling."""

    name: str
    shape: tuple[int, ...]
    fill: Fill = Fill.normal


@dataclass(frozen=True)
class VocabularyField:
    """One `tokenizer.*` key of a vocabulary file, with its GGUF type (and item type)."""

    name: str
    value: Any
    type: GGUFValueType
    sub_type: GGUFValueType | None


@dataclass(frozen=True)
class Architecture:
    """A row of ARCHITECTURES: how to write its hyperparameters, and its tensors."""

    add_hyperparameters: Callable[[GGUFWriter, int, int], None]  # given layers, context
    tensors: Callable[[int, int], list[TensorSpec]]  # given the vocabulary's size, layers
    layers: int  # unless `write_tiny_model` is given another count (rule 8)


def _name(tensor: MODEL_TENSOR, bid: int | None = None, suffix: str | None = "weight") -> str:
    base = TENSOR_NAMES[tensor].format(bid=bid)
    return base if suffix is None else f"{base}.{suffix}"


def _norm(tensor: MODEL_TENSOR, size: int, bid: int | None = None) -> TensorSpec:
    return TensorSpec(_name(tensor, bid), (size,), Fill.ones)


# ---- qwen3 (dense): src/models/qwen3.cpp -----------------------------------------

QWEN3_EMBD = 64
QWEN3_LAYERS = 2
QWEN3_HEADS = 4
QWEN3_KV_HEADS = 2
QWEN3_HEAD_DIM = 16
QWEN3_FF = 128
CONTEXT = 4096


def _qwen3_hyperparameters(writer: GGUFWriter, layers: int, context: int) -> None:
    writer.add_context_length(context)
    writer.add_embedding_length(QWEN3_EMBD)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(QWEN3_FF)
    writer.add_head_count(QWEN3_HEADS)
    writer.add_head_count_kv(QWEN3_KV_HEADS)
    writer.add_key_length(QWEN3_HEAD_DIM)
    writer.add_value_length(QWEN3_HEAD_DIM)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)


def _qwen3_tensors(n_vocab: int, layers: int) -> list[TensorSpec]:
    embd, head, q_dim = QWEN3_EMBD, QWEN3_HEAD_DIM, QWEN3_HEADS * QWEN3_HEAD_DIM
    kv_dim = QWEN3_KV_HEADS * QWEN3_HEAD_DIM
    specs = [
        TensorSpec(_name(MODEL_TENSOR.TOKEN_EMBD), (embd, n_vocab)),
        _norm(MODEL_TENSOR.OUTPUT_NORM, embd),
    ]
    for bid in range(layers):
        specs += [
            _norm(MODEL_TENSOR.ATTN_NORM, embd, bid),
            TensorSpec(_name(MODEL_TENSOR.ATTN_Q, bid), (embd, q_dim)),
            TensorSpec(_name(MODEL_TENSOR.ATTN_K, bid), (embd, kv_dim)),
            TensorSpec(_name(MODEL_TENSOR.ATTN_V, bid), (embd, kv_dim)),
            TensorSpec(_name(MODEL_TENSOR.ATTN_OUT, bid), (q_dim, embd)),
            _norm(MODEL_TENSOR.ATTN_K_NORM, head, bid),
            _norm(MODEL_TENSOR.ATTN_Q_NORM, head, bid),
            _norm(MODEL_TENSOR.FFN_NORM, embd, bid),
            TensorSpec(_name(MODEL_TENSOR.FFN_GATE, bid), (embd, QWEN3_FF)),
            TensorSpec(_name(MODEL_TENSOR.FFN_DOWN, bid), (QWEN3_FF, embd)),
            TensorSpec(_name(MODEL_TENSOR.FFN_UP, bid), (embd, QWEN3_FF)),
        ]
    return specs


# ---- qwen35moe (Gated DeltaNet + full attention, MoE): src/models/qwen35moe.cpp ----
# Layer i is linear attention (recurrent) unless (i + 1) % full_attention_interval
# == 0, as in the real model (3 linear layers to 1 full one). Linear layers: key
# heads are ssm.group_count of ssm.state_size, value heads ssm.time_step_rank of
# ssm.state_size, and ssm.inner_size must be their product (the graph divides it
# by the value heads, the loader shapes by the state size).

Q35_EMBD = 64
Q35_LAYERS = 4
Q35_FULL_ATTENTION_INTERVAL = 4
Q35_HEADS = 4
Q35_KV_HEADS = 2
Q35_HEAD_DIM = 16
Q35_ROPE_DIMS = 8  # partial rotary, like the real model's 64 of 256
Q35_ROPE_SECTIONS = (2, 1, 1, 0)  # interleaved M-RoPE; they add up to ROPE_DIMS / 2
Q35_EXPERTS = 4
Q35_EXPERTS_USED = 2
Q35_EXPERT_FF = 32
Q35_SHARED_EXPERT_FF = 32
Q35_CONV_KERNEL = 4
Q35_STATE = 16  # head size of the linear attention's keys and values
Q35_K_HEADS = 2
Q35_V_HEADS = 4
Q35_INNER = Q35_STATE * Q35_V_HEADS


def _qwen35moe_hyperparameters(writer: GGUFWriter, layers: int, context: int) -> None:
    writer.add_context_length(context)
    writer.add_embedding_length(Q35_EMBD)
    writer.add_block_count(layers)
    writer.add_head_count(Q35_HEADS)
    writer.add_head_count_kv(Q35_KV_HEADS)
    writer.add_key_length(Q35_HEAD_DIM)
    writer.add_value_length(Q35_HEAD_DIM)
    writer.add_rope_dimension_count(Q35_ROPE_DIMS)
    writer.add_rope_dimension_sections(list(Q35_ROPE_SECTIONS))
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_expert_count(Q35_EXPERTS)
    writer.add_expert_used_count(Q35_EXPERTS_USED)
    writer.add_expert_feed_forward_length(Q35_EXPERT_FF)
    writer.add_expert_shared_feed_forward_length(Q35_SHARED_EXPERT_FF)
    writer.add_ssm_conv_kernel(Q35_CONV_KERNEL)
    writer.add_ssm_state_size(Q35_STATE)
    writer.add_ssm_group_count(Q35_K_HEADS)
    writer.add_ssm_time_step_rank(Q35_V_HEADS)
    writer.add_ssm_inner_size(Q35_INNER)
    writer.add_full_attention_interval(Q35_FULL_ATTENTION_INTERVAL)


def _qwen35moe_tensors(n_vocab: int, layers: int) -> list[TensorSpec]:
    embd, head = Q35_EMBD, Q35_HEAD_DIM
    kv_dim = Q35_KV_HEADS * head
    key_dim, value_dim = Q35_STATE * Q35_K_HEADS, Q35_STATE * Q35_V_HEADS
    specs = [
        TensorSpec(_name(MODEL_TENSOR.TOKEN_EMBD), (embd, n_vocab)),
        _norm(MODEL_TENSOR.OUTPUT_NORM, embd),
    ]
    for bid in range(layers):
        specs += [
            _norm(MODEL_TENSOR.ATTN_NORM, embd, bid),
            _norm(MODEL_TENSOR.ATTN_POST_NORM, embd, bid),
        ]
        if (bid + 1) % Q35_FULL_ATTENTION_INTERVAL == 0:
            specs += [  # full attention; the query projection also yields its gate
                TensorSpec(_name(MODEL_TENSOR.ATTN_Q, bid), (embd, Q35_HEADS * head * 2)),
                TensorSpec(_name(MODEL_TENSOR.ATTN_K, bid), (embd, kv_dim)),
                TensorSpec(_name(MODEL_TENSOR.ATTN_V, bid), (embd, kv_dim)),
                TensorSpec(_name(MODEL_TENSOR.ATTN_OUT, bid), (Q35_HEADS * head, embd)),
                _norm(MODEL_TENSOR.ATTN_Q_NORM, head, bid),
                _norm(MODEL_TENSOR.ATTN_K_NORM, head, bid),
            ]
        else:
            specs += [  # Gated DeltaNet
                TensorSpec(_name(MODEL_TENSOR.ATTN_QKV, bid), (embd, key_dim * 2 + value_dim)),
                TensorSpec(_name(MODEL_TENSOR.ATTN_GATE, bid), (embd, value_dim)),
                TensorSpec(
                    _name(MODEL_TENSOR.SSM_CONV1D, bid),
                    (Q35_CONV_KERNEL, key_dim * 2 + value_dim),
                ),
                TensorSpec(_name(MODEL_TENSOR.SSM_DT, bid, "bias"), (Q35_V_HEADS,)),
                TensorSpec(_name(MODEL_TENSOR.SSM_A, bid, None), (Q35_V_HEADS,), Fill.minus_ones),
                TensorSpec(_name(MODEL_TENSOR.SSM_BETA, bid), (embd, Q35_V_HEADS)),
                TensorSpec(_name(MODEL_TENSOR.SSM_ALPHA, bid), (embd, Q35_V_HEADS)),
                _norm(MODEL_TENSOR.SSM_NORM, Q35_STATE, bid),
                TensorSpec(_name(MODEL_TENSOR.SSM_OUT, bid), (value_dim, embd)),
            ]
        specs += [  # routed experts, then the shared expert and its gate
            TensorSpec(_name(MODEL_TENSOR.FFN_GATE_INP, bid), (embd, Q35_EXPERTS)),
            TensorSpec(_name(MODEL_TENSOR.FFN_DOWN_EXP, bid), (Q35_EXPERT_FF, embd, Q35_EXPERTS)),
            TensorSpec(_name(MODEL_TENSOR.FFN_GATE_EXP, bid), (embd, Q35_EXPERT_FF, Q35_EXPERTS)),
            TensorSpec(_name(MODEL_TENSOR.FFN_UP_EXP, bid), (embd, Q35_EXPERT_FF, Q35_EXPERTS)),
            TensorSpec(_name(MODEL_TENSOR.FFN_GATE_INP_SHEXP, bid), (embd,)),
            TensorSpec(_name(MODEL_TENSOR.FFN_GATE_SHEXP, bid), (embd, Q35_SHARED_EXPERT_FF)),
            TensorSpec(_name(MODEL_TENSOR.FFN_UP_SHEXP, bid), (embd, Q35_SHARED_EXPERT_FF)),
            TensorSpec(_name(MODEL_TENSOR.FFN_DOWN_SHEXP, bid), (Q35_SHARED_EXPERT_FF, embd)),
        ]
    return specs


ARCHITECTURES: Mapping[str, Architecture] = {
    "qwen3": Architecture(_qwen3_hyperparameters, _qwen3_tensors, QWEN3_LAYERS),
    "qwen35moe": Architecture(_qwen35moe_hyperparameters, _qwen35moe_tensors, Q35_LAYERS),
}


class _ArrayReader(GGUFReader):
    """GGUFReader parsing a plain-array view of its memory map: the same values, faster.

    GGUFReader slices `self.data` a few times for every string, and a slice of an
    `np.memmap` runs Python code of its own (`__array_finalize__`, `__getitem__`):
    for a 151,936-token vocabulary that is 17 s of a 2-core machine, against 6 s
    over the same memory viewed as an `np.ndarray`. Should a later gguf stop setting
    `self.data`, this only stops being faster.
    """

    @property  # type: ignore[override]  # an ndarray where the base says memmap
    def data(self) -> np.ndarray[Any, Any]:
        return self._array

    @data.setter
    def data(self, value: np.ndarray[Any, Any]) -> None:
        self._array = value.view(np.ndarray)


def read_vocabulary(path: Path) -> list[VocabularyField]:
    """Every `tokenizer.*` key of a GGUF file but the chat templates, in file order."""
    reader = _ArrayReader(path)
    fields: list[VocabularyField] = []
    for field in reader.fields.values():
        if not field.name.startswith(TOKENIZER_PREFIX) or _is_template_key(field.name):
            continue
        kind = field.types[0]
        if kind is GGUFValueType.ARRAY and len(field.types) != 2:
            raise ValueError(f"{path}: {field.name} is a nested array, which this cannot copy")
        sub_type = field.types[1] if kind is GGUFValueType.ARRAY else None
        fields.append(VocabularyField(field.name, field.contents(), kind, sub_type))
    if not any(field.name == TOKENS_KEY for field in fields):
        raise ValueError(f"{path}: no {TOKENS_KEY}; not a vocabulary file")
    return fields


def _is_template_key(name: str) -> bool:
    return name in (CHAT_TEMPLATE_KEY, CHAT_TEMPLATES_KEY) or name.startswith(
        CHAT_TEMPLATE_KEY + "."
    )


def _fill(spec: TensorSpec, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    shape = tuple(reversed(spec.shape))  # rule 3: numpy's order
    if spec.fill is Fill.ones:
        return np.ones(shape, dtype=np.float32)
    if spec.fill is Fill.minus_ones:
        return np.full(shape, -1.0, dtype=np.float32)
    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(WEIGHT_SCALE)
    if spec.name == _name(MODEL_TENSOR.TOKEN_EMBD):
        return values.astype(np.float16)  # rule 5
    return values


def write_tiny_model(
    path: Path,
    *,
    arch: str,
    vocabulary: Path | Sequence[VocabularyField],
    chat_template: str,
    named_templates: Mapping[str, str] | None = None,
    metadata: Mapping[str, str] | None = None,
    layers: int | None = None,
    context: int = CONTEXT,
    seed: int = 0,
) -> Path:
    """Write a tiny `arch` model to `path` and return `path`.

    `vocabulary` is a vocabulary-only GGUF file, or what `read_vocabulary` read from
    one (reading is the slow part: pass the fields to build several models).
    `named_templates` are written beside `chat_template`, the default (rule 6);
    `metadata`, raw, after everything else (rule 7). `layers` (None: the row's) and
    `context` are the model's layer count and trained context (rule 8).
    """
    architecture = ARCHITECTURES.get(arch)
    if architecture is None:
        raise ValueError(f"no tiny model for {arch!r}; there are {sorted(ARCHITECTURES)}")
    fields = read_vocabulary(vocabulary) if isinstance(vocabulary, Path) else vocabulary
    tokens = next(field.value for field in fields if field.name == TOKENS_KEY)

    writer = GGUFWriter(path, arch)
    writer.add_name(f"tiny-{arch}")
    count = architecture.layers if layers is None else layers
    architecture.add_hyperparameters(writer, count, context)
    for field in fields:
        writer.add_key_value(field.name, field.value, field.type, sub_type=field.sub_type)
    if named_templates:
        if "default" in named_templates:
            raise ValueError("the default template is `chat_template`, not a named one")
        writer.add_chat_template(
            [
                {"name": "default", "template": chat_template},
                *({"name": name, "template": text} for name, text in named_templates.items()),
            ]
        )
    else:
        writer.add_chat_template(chat_template)
    for key, value in (metadata or {}).items():
        writer.add_key_value(key, value, GGUFValueType.STRING)
    rng = np.random.default_rng(seed)
    for spec in architecture.tensors(len(tokens), count):
        writer.add_tensor(spec.name, _fill(spec, rng))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
