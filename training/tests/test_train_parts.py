"""The training run's pure parts: the shared prefix it caches, the export's tensor names."""

from __future__ import annotations

from typing import Any

import pytest

from training.export import gguf_name
from training.train import common_prefix


def _example(ids: list[int], own: list[int]) -> dict[str, Any]:
    return {"ids": ids, "own": own}


def test_the_common_prefix_stops_at_the_first_difference() -> None:
    rows = [
        _example([1, 2, 3, 4, 9, 9], [0, 0, 0, 0, 0, 1]),
        _example([1, 2, 3, 5, 9, 9], [0] * 5 + [1]),
    ]
    assert common_prefix(rows) == 3


def test_the_common_prefix_leaves_every_trained_token_a_predicting_position() -> None:
    # identical prompts up to the model's first token at index 3: the prefix may not
    # swallow index 2, whose hidden state predicts it
    rows = [_example([1, 2, 3, 4, 5], [0, 0, 0, 1, 1]), _example([1, 2, 3, 4, 6], [0, 0, 0, 1, 1])]
    assert common_prefix(rows) == 2


@pytest.mark.parametrize(
    ("peft", "gguf"),
    [
        (
            "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
            "blk.0.attn_q.weight.lora_a",
        ),
        (
            "base_model.model.model.layers.17.self_attn.o_proj.lora_B.weight",
            "blk.17.attn_output.weight.lora_b",
        ),
        (
            "base_model.model.model.layers.3.mlp.gate_proj.lora_A.weight",
            "blk.3.ffn_gate.weight.lora_a",
        ),
        (
            "base_model.model.model.layers.3.mlp.down_proj.lora_B.weight",
            "blk.3.ffn_down.weight.lora_b",
        ),
    ],
)
def test_peft_names_become_llama_cpp_names(peft: str, gguf: str) -> None:
    assert gguf_name(peft) == gguf


def test_a_matrix_the_export_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="not an adapted matrix"):
        gguf_name("base_model.model.model.embed_tokens.lora_A.weight")
