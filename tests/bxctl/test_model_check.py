"""`bxctl model check PATH` on real files: the embedded default model, the small models
the tests build (`support.tiny_gguf`, a real Qwen vocabulary and template),
one written as a Hermes 2 Pro or Hermes 3 file is (the real default template, and the
real `tool_use` one beside it), one with that default alone, one whose `tool_use`
template does not compile, and a model whose template raises. Each runs the installed console scripts, as the
owner does: bxctl runs loopd's check in a child process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import read_vocabulary, write_tiny_model

from boxmaker.core.model.context_fit import kv_bytes_per_token

require_llama_cpp("the model check tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEMPLATES = Path(__file__).parents[1] / "fixtures" / "chat_templates"
BXCTL = str(Path(sys.executable).parent / "bxctl")
FACTS = (
    "model:",
    "architecture:",
    "adapter:",
    "chat template:",
    "templates:",
    "dialect:",
    "markers:",
    "prompt:",
    "scaffolding:",
    "memory:",
    "context:",
    "placement:",
)


def check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BXCTL, "model", "check", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("models")
    vocabularies = fetch_vocabularies()
    qwen2 = read_vocabulary(vocabularies / "ggml-vocab-qwen2.gguf")
    qwen35 = read_vocabulary(vocabularies / "ggml-vocab-qwen35.gguf")
    qwen3_template = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()
    qwen35_template = (TEMPLATES / "Qwen3.5-4B.jinja").read_text()
    hermes_default = (TEMPLATES / "NousResearch-Hermes-3-Llama-3.1-8B-default.jinja").read_text()
    hermes_tool_use = (TEMPLATES / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").read_text()
    return {
        "qwen3": write_tiny_model(
            where / "qwen3.gguf", arch="qwen3", vocabulary=qwen2, chat_template=qwen3_template
        ),
        "qwen35moe": write_tiny_model(
            where / "qwen35moe.gguf",
            arch="qwen35moe",
            vocabulary=qwen35,
            chat_template=qwen35_template,
        ),
        "hermes": write_tiny_model(
            where / "hermes.gguf",
            arch="qwen3",
            vocabulary=qwen2,
            chat_template=hermes_default,
            named_templates={"tool_use": hermes_tool_use},
        ),
        "hermes-default": write_tiny_model(
            where / "hermes-default.gguf",
            arch="qwen3",
            vocabulary=qwen2,
            chat_template=hermes_default,
        ),
        "tool-use-does-not-compile": write_tiny_model(
            where / "broken-tool-use.gguf",
            arch="qwen3",
            vocabulary=qwen2,
            chat_template=hermes_default,
            named_templates={"tool_use": "{% if %}"},
        ),
        "raises": write_tiny_model(
            where / "raises.gguf",
            arch="qwen3",
            vocabulary=qwen2,
            chat_template="{{ raise_exception('this template refuses everything') }}",
        ),
    }


def test_the_embedded_model_passes_with_every_line(tmp_path: Path) -> None:
    config = tmp_path / "loopd.toml"
    config.write_text(tomli_w.dumps({"paths": {"home": str(tmp_path / "home")}}))
    done = check("--config", config)  # no PATH: the model loopd.toml names, the embedded one
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":", 1)[0] + ":" for line in lines] == list(FACTS)
    assert "architecture: gemma3" in done.stdout
    assert "the gemma format (no template)" in done.stdout
    assert "marker self-test passed" in done.stdout
    assert [line for line in lines if line.startswith("context: context=32768 trained=32768 ")]
    assert "templates: none" in lines
    assert "scaffolding: the hand-written gemma format's own markers and role names" in lines
    # this machine's build has no GPU backend: the CPU, and what loopd would set
    assert "placement: backend CPU (this build has no GPU backend); gpu_layers none" in done.stdout


@pytest.mark.parametrize(
    ("name", "syntax", "reasoning"),
    [
        ("qwen3", "tool calls tagged_json", "reasoning <think> ... </think>\n"),
        ("qwen35moe", "tool calls xml", "reasoning <think> ... </think>, opened by the prompt"),
    ],
)
def test_a_small_qwen_model_passes_on_its_own_template(
    models: dict[str, Path], name: str, syntax: str, reasoning: str
) -> None:
    done = check(models[name])
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split(":", 1)[0] + ":" for line in done.stdout.splitlines()] == list(FACTS)
    assert f"architecture: {name}, trained context 4096 tokens" in done.stdout
    assert "chat template: the model's own chat template" in done.stdout
    assert syntax in done.stdout
    assert reasoning in done.stdout + "\n"
    assert "marker self-test passed" in done.stdout
    assert [
        line
        for line in done.stdout.splitlines()
        if line.startswith("context: context=4096 trained=4096 ")
    ]
    assert (
        "templates: default (tokenizer.chat_template); each compiled and rendered the sample "
        "conversation in loopd's sandbox"
    ) in done.stdout.splitlines()


def test_a_hermes_pair_of_templates_names_tool_use(models: dict[str, Path]) -> None:
    done = check(models["hermes"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":", 1)[0] + ":" for line in lines] == list(FACTS)
    assert (
        "chat template: the model's own chat template: tool_use "
        "(tokenizer.chat_template.tool_use), the one Hugging Face renders when tools are "
        "given; the file also holds default"
    ) in lines
    # the tool-use template writes the <tool_call> form and a tools block of its own
    assert "dialect: template, tool calls tagged_json, reasoning none" in lines
    assert "prompt: identical to the template's own rendering" in lines
    assert (
        "templates: default (tokenizer.chat_template), tool_use "
        "(tokenizer.chat_template.tool_use); each compiled and rendered the sample "
        "conversation in loopd's sandbox"
    ) in lines
    # what the file says to the model: the tool-use template's preamble, then role names
    (added,) = [line for line in lines if line.startswith("scaffolding: ")]
    assert added.startswith(
        'scaffolding: the template adds this text to every prompt: "system\\nYou are a '
        "function calling AI model. You are provided with function signatures within "
        "<tools></tools> XML tags."
    )
    assert added.endswith('</tool_call>" "system" "user" "assistant"')


def test_a_default_alone_is_named_and_its_missing_call_syntax_said(
    models: dict[str, Path],
) -> None:
    done = check(models["hermes-default"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":", 1)[0] + ":" for line in lines] == list(FACTS)
    assert (
        "chat template: the model's own chat template: default (tokenizer.chat_template)" in lines
    )
    assert (
        "dialect: template, tool calls tagged_json (the template shows no call syntax: "
        "loopd teaches tagged_json in the system text), reasoning none"
    ) in lines


def test_a_named_template_that_does_not_compile_is_refused_in_one_line(
    models: dict[str, Path],
) -> None:
    # llama-cpp-python no longer compiles it (loopd.llama_load): loopd's sandbox does
    done = check(models["tool-use-does-not-compile"])
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == "adapter: none"  # a PATH: "auto" is no adapter for it
    assert lines[3] == (
        "templates: default (tokenizer.chat_template), tool_use (tokenizer.chat_template.tool_use)"
    )
    (problem,) = lines[4:]
    assert problem.startswith(
        "problem: the model's chat template tool_use (tokenizer.chat_template.tool_use) cannot "
        "be used: the template does not compile: "
    )
    assert problem.endswith("see runbook.md#loopd-template-refused")
    assert "Traceback" not in done.stderr


def test_a_context_past_the_trained_one_is_a_problem_naming_the_key(
    models: dict[str, Path], tmp_path: Path
) -> None:
    config = tmp_path / "loopd.toml"
    config.write_text(tomli_w.dumps({"model": {"context": 8192}}))
    done = check(models["qwen3"], "--config", config)
    assert done.returncode == 1, done.stdout + done.stderr
    (problem,) = [line for line in done.stdout.splitlines() if line.startswith("problem:")]
    assert problem == (
        "problem: [model] context = 8192 is more than the model's trained context (4096 "
        "tokens): set it to 4096 or less, or to 0 for what fits"
    )


def test_a_template_that_raises_is_refused_with_its_pointer(models: dict[str, Path]) -> None:
    done = check(models["raises"])
    assert done.returncode == 1, done.stdout + done.stderr
    (problem,) = [line for line in done.stdout.splitlines() if line.startswith("problem:")]
    assert problem.startswith(
        "problem: the model's chat template default (tokenizer.chat_template) cannot be used: "
    )
    assert "this template refuses everything" in problem
    assert problem.endswith("see runbook.md#loopd-template-refused")


def test_a_file_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    done = check(tmp_path / "missing.gguf")
    assert done.returncode == 2
    (line,) = done.stdout.splitlines()
    assert "is not a file" in line
    assert line.endswith("see runbook.md#loopd-model-unreadable")


def test_a_file_that_cannot_be_read_is_one_line_with_its_pointer(tmp_path: Path) -> None:
    broken = tmp_path / "broken\x1b[2J.gguf"
    broken.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
    done = check(broken)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("loopd: ")
    assert "broken\\u001b[2J.gguf cannot be read as a GGUF model: " in line
    assert line.endswith("see runbook.md#loopd-model-unreadable")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        pytest.param(
            {
                "general.architecture": "llama",
                "llama.block_count": "32",
                "llama.attention.head_count": "32",
                "llama.attention.head_count_kv": "8",
                "llama.embedding_length": "4096",
            },
            32 * 8 * (128 + 128) * 2,
            id="dense-grouped-query",
        ),
        pytest.param(
            {
                "general.architecture": "qwen35moe",
                "qwen35moe.block_count": "40",
                "qwen35moe.attention.head_count": "16",
                "qwen35moe.attention.head_count_kv": "2",
                "qwen35moe.attention.key_length": "256",
                "qwen35moe.attention.value_length": "256",
                "qwen35moe.full_attention_interval": "4",
            },
            10 * 2 * 512 * 2,
            id="hybrid-counts-only-attention-layers",
        ),
        pytest.param({"general.architecture": "x"}, None, id="unknown"),
    ],
)
def test_kv_cache_per_token(metadata: dict[str, str], expected: int | None) -> None:
    assert kv_bytes_per_token(metadata) == expected
    if expected is not None:  # ggml's blocks of 32: q8_0 34 bytes, q4_0 18
        assert kv_bytes_per_token(metadata, "q8_0") == expected / 2 * 34 / 32
        assert kv_bytes_per_token(metadata, "q4_0") == expected / 2 * 18 / 32


def test_gpu_keys_this_build_cannot_honour_exit_1_with_the_pointer(tmp_path: Path) -> None:
    config = tmp_path / "loopd.toml"
    home = str(tmp_path / "home")
    config.write_text(tomli_w.dumps({"paths": {"home": home}, "model": {"gpu_layers": 8}}))
    done = check("--config", config)
    assert done.returncode == 1, done.stdout + done.stderr
    problem = [line for line in done.stdout.splitlines() if line.startswith("problem:")]
    assert len(problem) == 1, done.stdout
    assert "[model] gpu_layers = 8 asks for the GPU" in problem[0]
    assert problem[0].endswith("see runbook.md#loopd-gpu-settings")
