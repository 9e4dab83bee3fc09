"""Sampling settings: what the model's family ships with, under what the owner sets. Pure.

A model is sampled as its makers recommend where loopd knows the family (the
GGUF's `general.architecture`), and with loopd's general defaults otherwise;
every key the owner sets in `[model]` of loopd.toml wins over both.

    family (architecture)             temperature  top_p  top_k  repeat_penalty
    Qwen3.5 (qwen35, qwen35moe)       1.0          0.95   20     1.0 (none)
    Qwen3 (qwen3, qwen3moe), thinking 0.6          0.95   20     1.0 (none)
    anything else                     0.7          0.95   40     1.1
    the embedded model, shipped       0.0 (greedy) 0.95   40     1.0 (none)
      adapter on (`adapted`)

(The Qwen figures are those of their model cards for thinking mode. The embedded
Gemma 3 270M with boxmaker's adapter was trained to copy paths, commands and facts
exactly; on the held-out eval, greedy with no repeat penalty made more right calls
than 0.7 with 1.1, 68 % against 62 %, and more grounded answers, 64 % against 50 %:
docs/performance.md, issue 39.)
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
ADAPTED = Sampling(temperature=0.0, top_p=0.95, top_k=40, repeat_penalty=1.0)
FAMILIES: dict[str, Sampling] = {
    "qwen35": _QWEN35,
    "qwen35moe": _QWEN35,
    "qwen3": _QWEN3,
    "qwen3moe": _QWEN3,
}


def sampling_for(
    architecture: str | None,
    *,
    adapted: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    repeat_penalty: float | None = None,
) -> Sampling:
    """The family's defaults (or the general ones; the embedded model's with its shipped
    adapter where `adapted`), with every setting the owner gave."""
    base = ADAPTED if adapted else FAMILIES.get(architecture or "", GENERAL)
    return replace(
        base,
        temperature=base.temperature if temperature is None else temperature,
        top_p=base.top_p if top_p is None else top_p,
        top_k=base.top_k if top_k is None else top_k,
        repeat_penalty=base.repeat_penalty if repeat_penalty is None else repeat_penalty,
    )
