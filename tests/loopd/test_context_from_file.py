"""The context loopd gives a model whose metadata asks for the moon, read from real files
(issue 38): tiny qwen35moe GGUFs written by `support.tiny_gguf`, their trained
context and layer count as a hostile file would set them, resolved as loopd resolves
them and run through a real `loopd probe`.

The files (a real Qwen3.5 vocabulary and template; 4 layers make one attention layer,
3 make none, `full_attention_interval` being 4):

    issue-38        3 layers, context_length 2^31: refused by rule 0 of core.model.context_fit,
                    naming the key, before any weight loads
    no-attention    3 layers, context_length 2^21: capped at loopd's most, 2^20; its KV
                    cache is 0 bytes, its cells are not. The pinned llama.cpp then aborts
                    at the first decode of a hybrid without attention (GGML_ASSERT(buffer),
                    `llama_kv_cache::set_input_k_idxs`): the probe turns that into a
                    one-line refusal at start
    one-attention   4 layers, context_length 2^21: what fits memory_mib on the CPU without
                    flash attention, capped at 2^20 with it; the probe loads it at that
                    context, generates, and loopd says the context and why
    tiny            4 layers, context_length 4096: its trained context

2^21 and not more: llama-cpp-python's tokenizer zeroes a buffer of the trained context
for every call on a loaded model (`_internals.LlamaModel.tokenize`), 8 MiB here. The
offload is planned on a build without a GPU (`NO_GPU`) and the probe is told the same
keys, so the figures do not change on a machine with one. I/O: temporary files and
homes, child processes, the vocabulary cache.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import VocabularyField, read_vocabulary, write_tiny_model

from boxmaker.core.errors import StartupError
from boxmaker.core.model.offload import Backend
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.placement import plan
from boxmaker.loopd.probe_cache import record_path
from boxmaker.loopd.startup import resolve_context

require_llama_cpp("the context tests on tiny model files")

pytestmark = [pytest.mark.model, pytest.mark.slow]

LOOPD = Path(sys.executable).with_name("loopd")
TEMPLATES = Path(__file__).parents[1] / "fixtures" / "chat_templates"
NO_GPU = Backend(gpu_offload=False, devices=())
CPU_KEYS = {"gpu_layers": 0, "flash_attn": "off"}  # what NO_GPU plans
HUGE = 2**21
FILES = {  # name: (layers, context_length)
    "issue-38": (3, 2**31),
    "no-attention": (3, HUGE),
    "one-attention": (4, HUGE),
    "tiny": (4, 4096),
}


@pytest.fixture(scope="module")
def fields() -> Sequence[VocabularyField]:
    return read_vocabulary(fetch_vocabularies() / "ggml-vocab-qwen35.gguf")


@pytest.fixture(scope="module")
def models(
    tmp_path_factory: pytest.TempPathFactory, fields: Sequence[VocabularyField]
) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("moon")
    template = (TEMPLATES / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
    return {
        name: write_tiny_model(
            where / f"{name}.gguf",
            arch="qwen35moe",
            vocabulary=fields,
            chat_template=template,
            layers=layers,
            context=context,
        )
        for name, (layers, context) in FILES.items()
    }


def config_for(tmp_path: Path, model: dict[str, Any]) -> Path:
    path = tmp_path / "loopd.toml"
    home = str(tmp_path / "home")
    path.write_text(tomli_w.dumps({"paths": {"home": home}, "model": {"threads": 1, **model}}))
    return path


def loaded(tmp_path: Path, model: dict[str, Any]) -> LoopdConfig:
    return load_config(config_for(tmp_path, model), {})


@pytest.mark.parametrize(
    ("name", "keys", "said"),
    [
        (
            "no-attention",
            CPU_KEYS,
            "context=1048576 trained=2097152 kv_mib=0 other_mib=152 memory_mib=4096 "
            "saved_mib=3944 (loopd's most; the trained context is 2097152)",
        ),
        (
            "one-attention",  # 14,616 bytes a token: 128 of KV cache, the rest scores
            CPU_KEYS,
            "context=293632 trained=2097152 kv_mib=36 other_mib=4058 memory_mib=4096 "
            "saved_mib=3 (what fits memory_mib; the trained context is 2097152)",
        ),
        (
            "one-attention",  # 1,304 bytes a token
            {"gpu_layers": 0, "flash_attn": "on"},
            "context=1048576 trained=2097152 kv_mib=128 other_mib=1176 memory_mib=4096 "
            "saved_mib=2792 (loopd's most; the trained context is 2097152)",
        ),
        (
            "tiny",
            CPU_KEYS,
            "context=4096 trained=4096 kv_mib=1 other_mib=57 memory_mib=4096 saved_mib=4038 "
            "(the trained context; it fits memory_mib)",
        ),
    ],
    ids=["no-attention", "one-attention", "one-attention-flash", "tiny"],
)
def test_the_context_read_from_the_file_is_bounded_and_says_why(
    tmp_path: Path, models: dict[str, Path], name: str, keys: dict[str, Any], said: str
) -> None:
    config = loaded(tmp_path, {"path": str(models[name]), **keys})
    fit = resolve_context(config, None, plan(config, NO_GPU))  # read as loopd reads it
    assert fit.describe(config.model.memory_mib) == said


def test_issue_38s_file_is_refused_naming_the_key(tmp_path: Path, models: dict[str, Path]) -> None:
    config = loaded(tmp_path, {"path": str(models["issue-38"]), **CPU_KEYS})
    with pytest.raises(StartupError) as raised:
        resolve_context(config, None, plan(config, NO_GPU))
    assert str(raised.value) == (
        "the model's trained context, qwen35moe.context_length = 2147483648, is more than "
        "llama.cpp counts (2147483647 tokens): llama-cpp-python cannot tokenize with it; "
        "the file is damaged or hostile"
    )


def loopd_probe(tmp_path: Path, model: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LOOPD), "probe", "--config", str(config_for(tmp_path, model))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("loopd ERROR ")]


def test_loopd_probe_refuses_issue_38s_file_at_start_in_one_line(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    done = loopd_probe(tmp_path, {"path": str(models["issue-38"]), **CPU_KEYS})
    assert done.returncode == 1, done.stdout + done.stderr
    assert errors(done) == [
        "loopd ERROR the model's trained context, qwen35moe.context_length = 2147483648, is "
        "more than llama.cpp counts (2147483647 tokens): llama-cpp-python cannot tokenize "
        "with it; the file is damaged or hostile"
    ]
    assert "the model answered" not in done.stdout
    assert not record_path(tmp_path / "home").exists()  # no probe passed


def test_loopd_probe_runs_a_capped_context_and_says_why(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    keys = {"gpu_layers": 0, "flash_attn": "on"}
    done = loopd_probe(tmp_path, {"path": str(models["one-attention"]), **keys})
    assert done.returncode == 0, done.stdout + done.stderr
    said = (
        "context=1048576 trained=2097152 kv_mib=128 other_mib=1176 memory_mib=4096 "
        "saved_mib=2792 (loopd's most; the trained context is 2097152)"
    )
    assert f"loopd: {said}" in done.stdout.splitlines()
    (line,) = [line for line in done.stderr.splitlines() if "event=context " in line]
    assert line.endswith(f"event=context {said}")


def test_loopd_probe_refuses_a_hybrid_without_attention_at_start_in_one_line(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    # the context is capped; the pinned llama.cpp aborts on the model at its first decode
    done = loopd_probe(tmp_path, {"path": str(models["no-attention"]), **CPU_KEYS})
    assert done.returncode == 1, done.stdout + done.stderr
    (error,) = errors(done)
    assert "the model crashed with SIGABRT while generating its first tokens" in error
    assert error.endswith("see runbook.md#loopd-model-crashed")
