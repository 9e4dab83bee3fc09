"""The embedded model's turn ends by itself: with `[model] max_tokens` left at its
default, a model with no reasoning gets PLAIN_REPLY_TOKENS a reply
(`loopd.main.turn_limits`), so the base model's runaway reply (it writes out its
system prompt again and again) ends within 60 s on 2 CPU cores (docs/models.md,
"Budgets and sampling"). The real model, so marked `model` and `slow`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.llama import require_llama_cpp

from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.wire.loop import TurnDone
from boxmaker.loopd.config import load_config
from boxmaker.loopd.main import PLAIN_REPLY_TOKENS, reasons, turn_limits
from boxmaker.loopd.model import LlamaModel, Sampling, embedded_model_path
from boxmaker.testing.daemons import running_loopd
from boxmaker.testing.recording_model import RecordingModel

require_llama_cpp("the embedded model's budget test")

pytestmark = [pytest.mark.model, pytest.mark.slow]

CONTEXT = 4096


def test_the_embedded_models_reply_ends_within_a_minute(tmp_path: Path) -> None:
    home = tmp_path / "model-home"
    config = load_config(None, {"BOXMAKER_HOME": str(home)})
    assert config.model.max_tokens == 0  # the default: sized to the model
    limits = turn_limits(config, CONTEXT, reasons(from_format(GEMMA)))
    assert limits.reply_tokens == PLAIN_REPLY_TOKENS
    llama = LlamaModel(
        embedded_model_path(home), context=CONTEXT, threads=2, seed=1234, sampling=Sampling()
    )
    model = RecordingModel(llama)
    with running_loopd(tmp_path, model, limits=limits) as loopd:
        answers = loopd.turn("m1", "Hello! In one sentence, who are you?", timeout_s=60)
    assert isinstance(answers[-1].message, TurnDone)
    assert sum(len(call.generation.ids) for call in model.calls) <= PLAIN_REPLY_TOKENS
    assert model.calls[-1].ended - model.calls[0].started < 60
