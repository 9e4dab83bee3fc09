"""Sampling: the family's defaults where loopd knows it, the owner's settings over them."""

from __future__ import annotations

import pytest

from boxmaker.core.model.sampling import ADAPTED, GENERAL, Sampling, sampling_for


@pytest.mark.parametrize(
    ("architecture", "expected"),
    [
        pytest.param("qwen35moe", Sampling(1.0, 0.95, 20, 1.0), id="qwen35-moe-thinking"),
        pytest.param("qwen35", Sampling(1.0, 0.95, 20, 1.0), id="qwen35-dense"),
        pytest.param("qwen3", Sampling(0.6, 0.95, 20, 1.0), id="qwen3-thinking"),
        pytest.param("gemma3", GENERAL, id="unknown-family-general"),
        pytest.param(None, GENERAL, id="no-architecture"),
    ],
)
def test_each_family_gets_its_makers_defaults(architecture: str | None, expected: Sampling) -> None:
    assert sampling_for(architecture) == expected


def test_every_key_the_owner_sets_wins_and_only_those() -> None:
    chosen = sampling_for("qwen35moe", temperature=0.2, repeat_penalty=1.05)
    assert chosen == Sampling(temperature=0.2, top_p=0.95, top_k=20, repeat_penalty=1.05)
    assert sampling_for("qwen35moe", top_k=0).top_k == 0  # 0 is a setting, not "unset"


def test_the_embedded_model_with_its_adapter_is_greedy_unless_the_owner_says() -> None:
    assert sampling_for("gemma3", adapted=True) == ADAPTED
    assert (ADAPTED.temperature, ADAPTED.repeat_penalty) == (0.0, 1.0)
    assert sampling_for("gemma3", adapted=True, temperature=0.7).temperature == 0.7
    assert sampling_for("gemma3", adapted=False) == GENERAL
