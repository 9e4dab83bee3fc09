"""loopd.toml's context keys and the turn's budgets: `[model] context` (0 = what fits) and
`memory_mib`, `[turn] compact_at`, `summary_tokens` and `keep_turns`, validated in
`boxmaker.loopd.config`, resolved at start (`startup.resolve_context`, `core.model.context_fit`)
from the metadata the probe child read (`loopd.probe`; remembered with a passed probe,
`loopd.probe_cache`), and handed to the turn loop (`main.turn_limits`) and to the model
(`startup.load_model`).

The real pieces, where a test needs them: the embedded model's file (its metadata, read
as loopd reads it, the vocabulary loaded alone), a full load of it, and `loopd probe`
as a real process, refusing a context before any weight loads, or saying the one it
chose. The offload is planned against a build without a GPU (`NO_GPU`), and the probe
is told to run without one: the context's cost depends on it (`core.model.context_fit`),
and these figures must not change on a machine with a GPU. I/O: temporary homes and
loopd.toml files, the embedded model, child processes.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support.llama import require_llama_cpp

from boxmaker.core.errors import ConfigError, StartupError
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.context_fit import ContextFit
from boxmaker.core.model.dialect import from_format
from boxmaker.core.model.offload import Backend
from boxmaker.core.model.reasoning import ReasoningMarkers
from boxmaker.loopd import probe_cache, startup
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.main import reasons, turn_limits
from boxmaker.loopd.model import CPU_ONLY, embedded_model_path
from boxmaker.loopd.placement import from_argument, plan
from boxmaker.loopd.probe import METADATA, REFUSED, ProbeResult, judge, probe_command
from boxmaker.loopd.probe_cache import record_path, remember, remembered_metadata
from boxmaker.loopd.startup import load_model, resolve_context

MIB = 1024 * 1024
LOOPD = Path(sys.executable).with_name("loopd")
NO_GPU = Backend(gpu_offload=False, devices=())
CPU_KEYS = {"gpu_layers": 0, "flash_attn": "off"}  # what NO_GPU plans, for a real loopd
GEMMA3_270M = {  # the embedded model's, as llama.cpp gives them
    "general.architecture": "gemma3",
    "gemma3.context_length": "32768",
    "gemma3.block_count": "18",
    "gemma3.attention.head_count": "4",
    "gemma3.attention.head_count_kv": "1",
    "gemma3.attention.key_length": "256",
    "gemma3.attention.value_length": "256",
    "gemma3.attention.sliding_window": "512",
}
# a token of its context on the CPU without flash attention: the KV cache, then two
# caches' cells and masks, the token id and four heads of scores (core.model.context_fit)
GEMMA3_KV = 18432
GEMMA3_OTHER = 2 * 148 + 4 + 2 * 512 * 4 + 512 * 4 * 6  # 16,684
NO_ATTENTION = {  # a hybrid with no attention layer: its KV cache is 0 bytes
    "general.architecture": "qwen35moe",
    "qwen35moe.context_length": "16777216",
    "qwen35moe.block_count": "3",
    "qwen35moe.attention.head_count": "4",
    "qwen35moe.attention.head_count_kv": "2",
    "qwen35moe.attention.key_length": "16",
    "qwen35moe.full_attention_interval": "4",
}


def config_of(tmp_path: Path, settings: dict[str, Any]) -> LoopdConfig:
    path = tmp_path / "loopd.toml"
    path.write_text(tomli_w.dumps({"paths": {"home": str(tmp_path / "home")}, **settings}))
    return load_config(path, {})


def resolve(config: LoopdConfig, metadata: Mapping[str, str] | None = None) -> ContextFit:
    """`resolve_context` as loopd calls it, with the offload planned on NO_GPU."""
    return resolve_context(config, metadata, plan(config, NO_GPU))


def test_the_defaults() -> None:
    config = load_config(None, {})
    assert (config.model.context, config.model.memory_mib) == (0, 4096)
    turn = config.turn
    assert (turn.compact_at, turn.summary_tokens, turn.keep_turns) == (0.85, 0, 2)


@pytest.mark.parametrize(
    ("body", "key", "said"),
    [
        ("[model]\ncontext = 255", "model.context", "give 0 (the model's trained context"),
        ("[model]\ncontext = 1", "model.context", "or at least 256"),
        ("[model]\ncontext = -256", "model.context", "or at least 256"),
        ('[model]\ncontext = "auto"', "model.context", "integer"),
        ("[model]\nmemory_mib = 0", "model.memory_mib", "greater than or equal to 1"),
        ("[turn]\ncompact_at = 0", "turn.compact_at", "greater than 0"),
        ("[turn]\ncompact_at = 1.01", "turn.compact_at", "less than or equal to 1"),
        ("[turn]\nsummary_tokens = -1", "turn.summary_tokens", "greater than or equal to 0"),
        ("[turn]\nkeep_turns = 0", "turn.keep_turns", "greater than or equal to 1"),
    ],
    ids=[
        "context-255",
        "context-1",
        "context-negative",
        "context-text",
        "memory-0",
        "compact-at-0",
        "compact-at-past-1",
        "summary-negative",
        "keep-no-turns",
    ],
)
def test_a_key_out_of_bounds_is_a_config_error_naming_it(
    tmp_path: Path, body: str, key: str, said: str
) -> None:
    path = tmp_path / "loopd.toml"
    path.write_text(body + "\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    assert f"`{key}`" in str(raised.value)
    assert said in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("model", "turn"),
    [
        ({"context": 0}, {"compact_at": 1.0}),
        ({"context": 256, "memory_mib": 1}, {"compact_at": 0.01, "keep_turns": 1}),
        ({"context": 262144}, {"summary_tokens": 0}),
    ],
    ids=["zero-and-all-of-it", "the-smallest", "large"],
)
def test_the_bounds_accept_what_they_name(
    tmp_path: Path, model: dict[str, Any], turn: dict[str, Any]
) -> None:
    config = config_of(tmp_path, {"model": model, "turn": turn})
    assert config.model.model_dump(include=set(model)) == model
    assert config.turn.model_dump(include=set(turn)) == turn


# turn_limits: every budget from the resolved context


@pytest.mark.parametrize(
    ("turn", "context", "summary", "result"),
    [
        ({}, 32768, 4096, 4096),
        ({"summary_tokens": 300, "result_tokens": 200}, 32768, 300, 200),
        ({"summary_tokens": 50_000}, 32768, 8192, 4096),
        ({}, 4096, 512, 512),
    ],
    ids=["an-eighth-by-default", "as-set", "never-past-a-quarter", "a-smaller-context"],
)
def test_turn_limits_follow_the_resolved_context(
    tmp_path: Path, turn: dict[str, Any], context: int, summary: int, result: int
) -> None:
    config = config_of(tmp_path, {"turn": turn})  # [model] context = 0: resolved by loopd
    limits = turn_limits(config, context)
    assert limits.context == context
    assert (limits.summary_tokens, limits.result_tokens) == (summary, result)
    assert limits.max_tokens == min(65_536, context)
    assert limits.reply_tokens == min(16_384, context)


@pytest.mark.parametrize(
    ("model", "reasoning", "context", "reply"),
    [
        ({}, True, 32768, 16_384),
        ({}, False, 32768, 1_024),
        ({}, False, 512, 512),
        ({"max_tokens": 16_384}, False, 32768, 16_384),
        ({"max_tokens": 300}, True, 32768, 300),
    ],
    ids=[
        "a-reasoning-model-keeps-16384",
        "a-plain-model-gets-1024",
        "never-past-the-context",
        "the-owners-value-wins-for-a-plain-model",
        "the-owners-value-wins-for-a-reasoning-model",
    ],
)
def test_a_replys_budget_is_sized_to_the_model(
    tmp_path: Path, model: dict[str, Any], reasoning: bool, context: int, reply: int
) -> None:
    limits = turn_limits(config_of(tmp_path, {"model": model}), context, reasoning)
    assert limits.reply_tokens == reply
    assert limits.max_tokens == min(65_536, context)  # a turn's budget is the same


def test_whether_a_model_reasons_comes_from_its_dialect() -> None:
    gemma = from_format(GEMMA)
    assert not reasons(from_format(GEMMA))
    assert not reasons(gemma)
    assert reasons(replace(gemma, reasoning=ReasoningMarkers("<think>", "</think>")))


def test_turn_limits_pass_the_compaction_keys(tmp_path: Path) -> None:
    config = config_of(tmp_path, {"turn": {"compact_at": 0.5, "keep_turns": 5}})
    limits = turn_limits(config, 8192)
    assert (limits.compact_at, limits.keep_turns) == (0.5, 5)


def test_turn_limits_without_a_resolved_context(tmp_path: Path) -> None:
    assert turn_limits(config_of(tmp_path, {"model": {"context": 8192}})).context == 8192
    with pytest.raises(ValueError, match="resolved context"):
        turn_limits(config_of(tmp_path, {}))  # context = 0: only the metadata says


# resolve_context: the one log line, or the refusal naming the key


def test_the_context_is_said_at_start_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopd")
    fit = resolve(config_of(tmp_path, {"model": {"memory_mib": 100}}), GEMMA3_270M)
    assert (fit.context, fit.saved_bytes) == (2816, 100 * MIB - 2816 * (GEMMA3_KV + GEMMA3_OTHER))
    assert [r.getMessage() for r in caplog.records if "event=context" in r.getMessage()] == [
        "event=context context=2816 trained=32768 kv_mib=50 other_mib=45 memory_mib=100 "
        "saved_mib=5 (what fits memory_mib; the trained context is 32768)"
    ]


def test_a_huge_trained_context_is_capped_and_the_line_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopd")
    assert resolve(config_of(tmp_path, {}), NO_ATTENTION).context == 1048576
    (line,) = [r.getMessage() for r in caplog.records if "event=context" in r.getMessage()]
    assert line == (
        "event=context context=1048576 trained=16777216 kv_mib=0 other_mib=152 "
        "memory_mib=4096 saved_mib=3944 (loopd's most; the trained context is 16777216)"
    )


def test_a_trained_context_llama_cpp_cannot_count_stops_loopd_naming_the_key(
    tmp_path: Path,
) -> None:
    hostile = {**NO_ATTENTION, "qwen35moe.context_length": "2147483648"}  # issue 38's
    with pytest.raises(StartupError) as raised:
        resolve(config_of(tmp_path, {}), hostile)
    assert str(raised.value) == (
        "the model's trained context, qwen35moe.context_length = 2147483648, is more than "
        "llama.cpp counts (2147483647 tokens): llama-cpp-python cannot tokenize with it; "
        "the file is damaged or hostile"
    )


def test_metadata_without_the_counts_is_said_in_the_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopd")
    metadata = {"general.architecture": "gemma3", "gemma3.context_length": "8192"}
    assert resolve(config_of(tmp_path, {}), metadata).context == 8192
    (line,) = [r.getMessage() for r in caplog.records if "event=context" in r.getMessage()]
    assert "kv_mib=unknown other_mib=unknown" in line
    assert "the metadata lacks the layer and head counts" in line


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"context": 40960},
            "[model] context = 40960 is more than the model's trained context (32768 tokens):"
            " set it to 32768 or less, or to 0 for what fits",
        ),
        (
            # q8_0 turns flash attention on: 9,792 + 2,348 bytes a token, 380 MiB
            {"context": 32768, "memory_mib": 512, "kv_type": "q8_0"},
            None,
        ),
        (
            {"context": 32768, "memory_mib": 512},
            "[model] context = 32768 needs 1098 MiB (the KV cache at kv_type f16 576, "
            "llama.cpp's other per-token state 522), more than [model] memory_mib = 512: set "
            "memory_mib to 1098 or more, or [model] context to 15104 or less (0: what fits)",
        ),
    ],
    ids=["past-trained", "quantized-fits", "past-memory"],
)
def test_a_context_loopd_cannot_honour_stops_it_in_one_line(
    tmp_path: Path, model: dict[str, Any], message: str | None
) -> None:
    config = config_of(tmp_path, {"model": model})
    if message is None:
        assert resolve(config, GEMMA3_270M).context == model["context"]
        return
    with pytest.raises(StartupError) as raised:
        resolve(config, GEMMA3_270M)
    assert str(raised.value) == message


def test_a_context_past_loopds_most_is_refused_even_where_the_model_says_more(
    tmp_path: Path,
) -> None:
    config = config_of(tmp_path, {"model": {"context": 2097152}})
    metadata = {"general.architecture": "x", "x.context_length": "16777216"}
    with pytest.raises(StartupError) as raised:
        resolve(config, metadata)
    assert str(raised.value) == (
        "[model] context = 2097152 is more than loopd's most (1048576 tokens): set it to "
        "1048576 or less, or to 0 for what fits"
    )


# the probe child reads the metadata, and resolves the context before it loads


def test_the_child_is_given_the_context_as_set_and_the_memory() -> None:
    command = probe_command(Path("/m.gguf"), 2, 0, 4096, CPU_ONLY)
    assert command[-5:-1] == ["/m.gguf", "2", "0", "4096"]
    assert from_argument(command[-1]) == CPU_ONLY


def test_the_childs_metadata_and_refusal_are_read_back() -> None:
    line = METADATA + '{"general.architecture": "gemma3", "gemma3.context_length": "32768"}'
    passed = judge(0, f"{line}\nplaced: CPU\n4\n", "", 1.0)
    assert passed.problem is None
    assert passed.metadata == {"general.architecture": "gemma3", "gemma3.context_length": "32768"}
    refusal = "[model] context = 65536 is more than the model's trained context (32768 tokens)"
    refused = judge(REFUSED, f"{line}\n", f"llama noise\nrefused: {refusal}\n", 1.0)
    assert refused.problem == refusal  # as the child said it: no other words around it
    assert refused.tokens == 0
    assert judge(0, METADATA + "[1]\n4\n", "", 1.0).metadata is None  # not an object
    assert judge(0, "4\n", "", 1.0).metadata is None


def test_a_passed_probe_keeps_the_metadata_for_the_next_start(tmp_path: Path) -> None:
    home = tmp_path / "home"
    remember(home, "k", 4, 0.5, metadata=GEMMA3_270M)
    assert remembered_metadata(home, "k") == GEMMA3_270M
    assert remembered_metadata(home, "other") is None
    remember(home, "k", 4, 0.5)
    assert remembered_metadata(home, "k") is None


def test_serve_resolves_from_the_remembered_metadata_and_probes_again_for_new_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)  # never read here: the child's metadata stands
    lib = tmp_path / "libllama.so"
    lib.write_bytes(b"\x7fELF one build")
    monkeypatch.setattr(probe_cache, "_libraries", lambda: [lib])
    children: list[list[str]] = []

    def run_probe(command: list[str], timeout_s: float = 0) -> ProbeResult:
        children.append(command)
        return ProbeResult(4, 0.5, None, metadata=GEMMA3_270M)

    monkeypatch.setattr(startup, "run_probe", run_probe)
    config = config_of(tmp_path, {"model": {"path": str(model), "memory_mib": 100}})
    startup.probe(config, again=False)
    remembered = startup.probe(config, again=False)
    assert len(children) == 1
    assert resolve(config, remembered.metadata).context == 2816
    other = config_of(tmp_path, {"model": {"path": str(model), "memory_mib": 200}})
    startup.probe(other, again=False)  # another memory_mib may be another context
    assert len(children) == 2
    monkeypatch.setattr(probe_cache, "PROBE_CODE", ("boxmaker.core.model.offload",))
    startup.probe(other, again=False)  # other rules of what fits: probe again
    assert len(children) == 3


# the real file


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_llama_cpp("the context tests on the embedded model")
    return embedded_model_path(tmp_path_factory.mktemp("context-home"))


def with_model(tmp_path: Path, embedded: Path, model: dict[str, Any]) -> LoopdConfig:
    return config_of(tmp_path, {"model": {"path": str(embedded), "threads": 1, **model}})


@pytest.mark.model
def test_the_embedded_model_gets_its_trained_context_from_its_own_file(
    tmp_path: Path, embedded: Path
) -> None:
    fit = resolve(with_model(tmp_path, embedded, {}))  # read from the file
    assert (fit.context, fit.trained, fit.kv_bytes_per_token) == (32768, 32768, GEMMA3_KV)
    assert fit.other_bytes_per_token == GEMMA3_OTHER  # its sliding window: two caches
    assert (fit.kv_bytes, fit.other_bytes) == (576 * MIB, 32768 * GEMMA3_OTHER)
    assert fit.saved_bytes == (4096 - 576) * MIB - 32768 * GEMMA3_OTHER


@pytest.mark.model
@pytest.mark.slow
def test_the_model_is_loaded_at_the_resolved_context_with_the_rest_for_saved_sessions(
    tmp_path: Path, embedded: Path
) -> None:
    config = with_model(tmp_path, embedded, {"memory_mib": 20})  # 20 MiB: 512 tokens
    model = load_model(config, plan(config, NO_GPU))
    assert model._llm.n_ctx() == 512
    assert model.saved_bytes == 20 * MIB - 512 * (GEMMA3_KV + GEMMA3_OTHER)


def loopd_probe(tmp_path: Path, model: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "loopd.toml"
    config.write_text(tomli_w.dumps({"paths": {"home": str(tmp_path / "home")}, "model": model}))
    return subprocess.run(
        [str(LOOPD), "probe", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.model
@pytest.mark.slow
def test_loopd_probe_says_the_context_it_chose_and_remembers_the_metadata(
    tmp_path: Path, embedded: Path
) -> None:
    model = {"path": str(embedded), "threads": 1, "memory_mib": 20, **CPU_KEYS}
    done = loopd_probe(tmp_path, model)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "loopd: context=512 trained=32768 kv_mib=9 other_mib=9 memory_mib=20 saved_mib=2 "
        "(what fits memory_mib; the trained context is 32768)"
    ) in done.stdout.splitlines()
    (line,) = [line for line in done.stderr.splitlines() if "event=context" in line]
    assert line.endswith(
        "event=context context=512 trained=32768 kv_mib=9 other_mib=9 memory_mib=20 "
        "saved_mib=2 (what fits memory_mib; the trained context is 32768)"
    )
    record = json.loads(record_path(tmp_path / "home").read_text())
    assert record["metadata"]["gemma3.context_length"] == "32768"
    assert not any(key.startswith("tokenizer.") for key in record["metadata"])


@pytest.mark.model
@pytest.mark.slow
def test_loopd_probe_refuses_a_context_past_the_trained_one_before_it_loads(
    tmp_path: Path, embedded: Path
) -> None:
    done = loopd_probe(tmp_path, {"path": str(embedded), "context": 65536})
    assert done.returncode == 1, done.stdout + done.stderr
    said = "[model] context = 65536 is more than the model's trained context (32768 tokens)"
    assert len([line for line in done.stderr.splitlines() if said in line]) == 1, done.stderr
    assert "the model answered" not in done.stdout
    assert not record_path(tmp_path / "home").exists()  # no probe ran, none passed
