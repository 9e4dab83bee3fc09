"""Where loopd runs its model, on this machine's CPU build (issue 26).

The real pieces: the installed llama-cpp-python (a CPU build here: no GPU
backend), the embedded model loaded with loopd's offload settings, `loopd probe`
as a real process with a loopd.toml, and the probe's judgement of a child's
output in the words llama.cpp writes. That the settings reach llama.cpp is read
back from the `Llama`'s own context parameters, and a quantized KV cache with
flash attention really generates on the CPU. A GPU run is bench/gpu.py's.

Without llama-cpp-python these tests are skipped, loudly; with CI set they fail.
I/O: temporary homes and loopd.toml files, child processes, the embedded model.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support.llama import require_llama_cpp

from boxmaker.core.model.offload import ALL_LAYERS, Backend, Offload
from boxmaker.loopd.backend import read_backend
from boxmaker.loopd.config import load_config
from boxmaker.loopd.llama_load import LoadLog, load_llama
from boxmaker.loopd.model import CPU_ONLY, LlamaModel, Sampling, embedded_model_path
from boxmaker.loopd.placement import (
    PLACED,
    from_argument,
    placement,
    placement_line,
    plan,
    to_argument,
)
from boxmaker.loopd.probe import judge

require_llama_cpp("the placement tests")

LOOPD = Path(sys.executable).with_name("loopd")
THREADS = max(1, os.cpu_count() or 1)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedded_model_path(tmp_path_factory.mktemp("placement-home"))


def test_this_build_has_no_gpu_backend() -> None:
    import llama_cpp

    backend = read_backend()
    assert backend == Backend(False, ())
    # llama.cpp counts the RPC client (the wheel has it) as able to offload; with no
    # rpc-server registered and no GPU backend, loopd reads the CPU build
    assert llama_cpp.llama_supports_rpc()
    assert bool(llama_cpp.llama_supports_gpu_offload())


def test_loopds_plan_on_this_build_is_the_cpu_as_before(tmp_path: Path) -> None:
    config = load_config(None, {"BOXMAKER_HOME": str(tmp_path)})
    assert plan(config) == CPU_ONLY


def test_the_settings_reach_llama_cpp_and_a_quantized_cache_generates(model_path: Path) -> None:
    import llama_cpp

    offload = Offload(gpu_layers=0, flash_attn=True, kv_type="q8_0", batch=256, ubatch=128)
    model = LlamaModel(
        model_path, context=512, threads=THREADS, seed=1, sampling=Sampling(), offload=offload
    )
    params: Any = model._llm.context_params
    assert (params.type_k, params.type_v) == (llama_cpp.GGML_TYPE_Q8_0,) * 2
    assert params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert (params.n_batch, params.n_ubatch) == (256, 128)
    assert model._llm.model_params.n_gpu_layers == 0
    assert model.offloaded is None  # a CPU build prints no count: nothing offloaded
    prompt = model.tokenize("The sea is", special=False)
    made = model.generate("s", prompt, max_tokens=4, stop=set(), on_text=lambda _t: None)
    assert len(made.ids) == 4


def test_the_default_offload_is_llama_cpp_pythons_own_defaults(model_path: Path) -> None:
    import llama_cpp

    model = LlamaModel(model_path, context=512, threads=THREADS, seed=1, sampling=Sampling())
    params: Any = model._llm.context_params
    assert params.type_k == llama_cpp.GGML_TYPE_F16
    assert params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert model.offload == CPU_ONLY


def test_the_load_log_holds_what_llama_cpp_wrote_while_loading(model_path: Path) -> None:
    with LoadLog() as log:
        llm = load_llama(model_path, n_ctx=256)
    assert "gemma3" in log.text  # the loader's lines name the architecture
    del llm
    with LoadLog() as quiet:
        pass
    assert quiet.text == ""  # only what was written while it was open


def test_the_placement_line_names_the_backend_the_settings_and_the_count() -> None:
    line = placement(Backend(False, ()), CPU_ONLY, None)
    assert line == (
        "backend CPU (this build has no GPU backend); gpu_layers none, flash_attn off, "
        "kv_type f16, batch 512, ubatch 512; no layer offloaded (no GPU backend)"
    )
    gpu = Offload(ALL_LAYERS, True, "q8_0", 2048, 512)
    assert placement(Backend(True, ()), gpu, (49, 49)).endswith("; offloaded 49/49 layers")


@pytest.mark.parametrize(
    "offload",
    [CPU_ONLY, Offload(ALL_LAYERS, True, "q4_0", 2048, 256), Offload(12, False, "f16", 64, 64)],
)
def test_the_probe_child_gets_the_offload_loopd_planned(offload: Offload) -> None:
    assert from_argument(to_argument(offload)) == offload


def test_the_probe_reads_where_the_model_went() -> None:
    stdout = f"{PLACED}backend CPU (this build has no GPU backend); gpu_layers none\n4\n"
    result = judge(0, stdout, "", 1.0)
    assert (result.problem, result.tokens) == (None, 4)
    assert result.placed == "backend CPU (this build has no GPU backend); gpu_layers none"
    assert placement_line(["4"]) == ""


@pytest.mark.parametrize(
    "stderr",
    [
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 81920.00 MiB on device 0: "
        "cudaMalloc failed: out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 85899345920\n"
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
        "Traceback (most recent call last):\nValueError: Failed to load model from file\n",
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer "
        "for kv cache\nValueError: Failed to create llama_context\n",
    ],
    ids=["weights", "kv-cache"],
)
def test_a_model_that_does_not_fit_says_what_to_lower(stderr: str) -> None:
    result = judge(1, "", stderr, 3.0)
    assert result.problem is not None
    assert result.problem.startswith("the model does not fit the memory it was given (")
    assert "gpu_layers" in result.problem
    assert "kv_type" in result.problem
    assert result.problem.endswith("see runbook.md#loopd-model-too-big")
    assert "\n" not in result.problem


def probe(tmp_path: Path, model: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "loopd.toml"
    home = tmp_path / "home"
    config.write_text(tomli_w.dumps({"paths": {"home": str(home)}, "model": model}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOXMAKER_")}
    return subprocess.run(
        [str(LOOPD), "probe", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ({"gpu_layers": 4}, "[model] gpu_layers = 4 asks for the GPU, but this llama-cpp-python"),
        ({"gpu_layers": "all"}, "[model] gpu_layers = 'all' asks for the GPU"),
        ({"kv_type": "q4_0", "flash_attn": "off"}, 'kv_type = "q4_0" needs flash attention'),
        ({"batch": 128, "ubatch": 256}, "ubatch = 256 is larger than batch = 128"),
    ],
    ids=["layers-on-a-cpu-build", "all-on-a-cpu-build", "quantized-v-without-fa", "ubatch"],
)
def test_loopd_probe_refuses_what_it_cannot_honour_in_one_line(
    tmp_path: Path, model: dict[str, Any], said: str
) -> None:
    done = probe(tmp_path, model)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if said in line]
    assert len(lines) == 1, done.stderr
    assert lines[0].endswith("see runbook.md#loopd-gpu-settings")
    assert "the model answered" not in done.stdout


@pytest.mark.slow
def test_loopd_probe_says_where_the_model_went(tmp_path: Path) -> None:
    done = probe(tmp_path, {"kv_type": "q8_0", "context": 512})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "loopd: the model answered:" in done.stdout
    assert (
        "loopd: backend CPU (this build has no GPU backend); gpu_layers none, flash_attn on, "
        "kv_type q8_0, batch 512, ubatch 512; no layer offloaded (no GPU backend)"
    ) in done.stdout


@pytest.mark.parametrize(
    ("body", "key", "said"),
    [
        ("gpu_layers = -1", "model.gpu_layers", 'a count of layers (0 or more), "all" or "auto"'),
        ("gpu_layers = true", "model.gpu_layers", 'a count of layers (0 or more), "all" or "auto"'),
        ('gpu_layers = "most"', "model.gpu_layers", '"all" or "auto"'),
        ('kv_type = "q5_1"', "model.kv_type", "'f16', 'q8_0' or 'q4_0'"),
        ("flash_attn = true", "model.flash_attn", "'auto', 'on' or 'off'"),
        ("ubatch = 0", "model.ubatch", "greater than or equal to 1"),
    ],
)
def test_a_gpu_key_of_the_wrong_kind_is_a_config_error_naming_it(
    tmp_path: Path, body: str, key: str, said: str
) -> None:
    from boxmaker.core.errors import ConfigError

    path = tmp_path / "loopd.toml"
    path.write_text(f"[model]\n{body}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, {})
    assert f"`{key}`" in str(raised.value)
    assert said in str(raised.value)


@pytest.mark.parametrize(
    ("body", "expected"),
    [("", "auto"), ("gpu_layers = 0", 0), ("gpu_layers = 30", 30), ('gpu_layers = "all"', "all")],
)
def test_the_gpu_keys_accepted(tmp_path: Path, body: str, expected: object) -> None:
    path = tmp_path / "loopd.toml"
    path.write_text(f'[model]\n{body}\nkv_type = "q8_0"\nbatch = 2048\nubatch = 256\n')
    model = load_config(path, {}).model
    assert model.gpu_layers == expected
    assert (model.kv_type, model.batch, model.ubatch, model.flash_attn) == (
        "q8_0",
        2048,
        256,
        "auto",
    )
