"""Sampling settings: what the model's family ships with, under what the owner sets. Pure.

A model is sampled as its makers recommend where loopd knows the family (the
GGUF's `general.architecture`), and with loopd's general defaults otherwise;
every key the owner sets in `[model]` of loopd.toml wins over both.

    family (architecture)             temperature  top_p  top_k  repeat_penalty
    Qwen3.5 (qwen35, qwen35moe)       1.0          0.95   20     1.0 (none)
    Qwen3 (qwen3, qwen3moe), thinking 0.6          0.95   20     1.0 (none)
    anything else                     0.7          0.95   40     1.1

(The Qwen figures are those of their model cards for thinking mode.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    repeat_penalty: float = 1.1


GENERAL = Sampling()
_QWEN35 = Sampling(temperature=1.0, top_p=0.95, top_k=20, repeat_penalty=1.0)
_QWEN3 = Sampling(temperature=0.6, top_p=0.95, top_k=20, repeat_penalty=1.0)
FAMILIES: dict[str, Sampling] = {
    "qwen35": _QWEN35,
    "qwen35moe": _QWEN35,
    "qwen3": _QWEN3,
    "qwen3moe": _QWEN3,
}


def sampling_for(
    architecture: str | None,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    repeat_penalty: float | None = None,
) -> Sampling:
    """The family's defaults (or the general ones), with every setting the owner gave."""
    base = FAMILIES.get(architecture or "", GENERAL)
    return replace(
        base,
        temperature=base.temperature if temperature is None else temperature,
        top_p=base.top_p if top_p is None else top_p,
        top_k=base.top_k if top_k is None else top_k,
        repeat_penalty=base.repeat_penalty if repeat_penalty is None else repeat_penalty,
    )
