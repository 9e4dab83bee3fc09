"""loopd.toml's GPU keys planned against the build and the machine (boxmaker.core.model.offload).

Each rule of the module docstring, one test or more; the log readers on the very
lines llama.cpp 0.3.36's vendored sources write.
"""

from __future__ import annotations

from typing import Any

import pytest

from boxmaker.core.model.offload import (
    ALL_LAYERS,
    Backend,
    Device,
    Offload,
    OffloadError,
    does_not_fit,
    offloaded_layers,
    plan_offload,
    too_big,
)

GIB = 1024**3
CPU = Device("CPU", "AMD EPYC", "CPU", 20 * GIB, 24 * GIB)
H200 = Device("CUDA0", "NVIDIA H200", "GPU", 139 * GIB, 140 * GIB)
CPU_BUILD = Backend(gpu_offload=False, devices=(CPU,))
GPU_BUILD_NO_DEVICE = Backend(gpu_offload=True, devices=(CPU,))
GPU_BOX = Backend(gpu_offload=True, devices=(H200, CPU))
DEFAULTS: dict[str, Any] = {
    "gpu_layers": "auto",
    "flash_attn": "auto",
    "kv_type": "f16",
    "batch": 512,
    "ubatch": 512,
}


def plan(backend: Backend, **keys: Any) -> Offload:
    return plan_offload(backend, **{**DEFAULTS, **keys})


# rule 1: gpu_layers


def test_auto_puts_every_layer_on_the_gpu_of_a_gpu_box() -> None:
    assert plan(GPU_BOX).gpu_layers == ALL_LAYERS


@pytest.mark.parametrize("backend", [CPU_BUILD, GPU_BUILD_NO_DEVICE])
def test_auto_runs_on_the_cpu_without_a_gpu(backend: Backend) -> None:
    offload = plan(backend)
    assert offload.gpu_layers == 0
    assert offload == Offload(0, False, "f16", 512, 512)  # as before the keys existed


@pytest.mark.parametrize("layers", [1, 40, "all"])
def test_the_gpu_asked_of_a_cpu_build_is_refused_with_the_rebuild(layers: int | str) -> None:
    with pytest.raises(OffloadError) as raised:
        plan(CPU_BUILD, gpu_layers=layers)
    line = str(raised.value)
    assert f"[model] gpu_layers = {layers!r}" in line
    assert "no GPU backend" in line
    assert "scripts/build-llama-cpp --gpu cuda" in line
    assert line.endswith("see runbook.md#loopd-gpu-settings")
    assert "\n" not in line


def test_the_gpu_asked_where_no_device_is_present_is_refused() -> None:
    with pytest.raises(OffloadError, match="no GPU device is present"):
        plan(GPU_BUILD_NO_DEVICE, gpu_layers="all")


def test_zero_layers_runs_on_the_cpu_even_on_a_gpu_box() -> None:
    offload = plan(GPU_BOX, gpu_layers=0)
    assert offload.gpu_layers == 0
    assert not offload.flash_attn


def test_a_count_of_layers_is_passed_through() -> None:
    assert plan(GPU_BOX, gpu_layers=20).gpu_layers == 20
    assert plan(GPU_BOX, gpu_layers="all").gpu_layers == ALL_LAYERS


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(OffloadError, match="a count of 0 or more"):
        plan(GPU_BOX, gpu_layers=-2)


def test_an_integrated_gpu_counts_as_a_gpu() -> None:
    igpu = Backend(True, (Device("Vulkan0", "Radeon 780M", "IGPU", GIB, 2 * GIB), CPU))
    assert plan(igpu).gpu_layers == ALL_LAYERS


def test_an_accelerator_is_not_a_gpu() -> None:
    accel = Backend(True, (Device("BLAS", "OpenBLAS", "ACCEL", 0, 0), CPU))
    assert plan(accel).gpu_layers == 0


# rule 2: flash_attn


def test_flash_attention_is_on_where_a_gpu_is_used() -> None:
    assert plan(GPU_BOX).flash_attn
    assert plan(GPU_BOX, gpu_layers=3).flash_attn


def test_flash_attention_is_on_for_a_quantized_cache_on_the_cpu() -> None:
    assert plan(CPU_BUILD, kv_type="q8_0").flash_attn


@pytest.mark.parametrize(("switch", "expected"), [("on", True), ("off", False)])
def test_flash_attention_as_written(switch: str, expected: bool) -> None:
    assert plan(GPU_BOX, flash_attn=switch).flash_attn is expected
    assert plan(CPU_BUILD, flash_attn=switch).flash_attn is expected


# rule 3: kv_type


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_a_quantized_cache_without_flash_attention_is_refused_naming_both_keys(
    kv_type: str,
) -> None:
    with pytest.raises(OffloadError) as raised:
        plan(GPU_BOX, kv_type=kv_type, flash_attn="off")
    line = str(raised.value)
    assert f'kv_type = "{kv_type}"' in line
    assert 'flash_attn = "off"' in line
    assert line.endswith("see runbook.md#loopd-gpu-settings")


def test_an_f16_cache_runs_without_flash_attention() -> None:
    assert plan(GPU_BOX, flash_attn="off").kv_type == "f16"


# rule 4: batch and ubatch


def test_a_micro_batch_larger_than_its_batch_is_refused() -> None:
    with pytest.raises(OffloadError, match=r"ubatch = 1024 is larger than batch = 512"):
        plan(GPU_BOX, ubatch=1024)


def test_batch_and_ubatch_are_passed_through() -> None:
    offload = plan(GPU_BOX, batch=2048, ubatch=512)
    assert (offload.batch, offload.ubatch) == (2048, 512)


# the descriptions and the log readers


def test_the_backend_line_names_each_gpu_and_its_memory() -> None:
    assert GPU_BOX.describe() == ("backend GPU: CUDA0 NVIDIA H200 (142336 MiB free of 143360 MiB)")
    assert "no GPU backend" in CPU_BUILD.describe()
    assert "no GPU device found" in GPU_BUILD_NO_DEVICE.describe()


def test_the_offload_line() -> None:
    assert plan(GPU_BOX, kv_type="q8_0").describe() == (
        "gpu_layers all, flash_attn on, kv_type q8_0, batch 512, ubatch 512"
    )
    assert plan(CPU_BUILD).describe().startswith("gpu_layers none, flash_attn off")


def test_llama_cpps_count_of_layers_offloaded() -> None:
    # src/llama-model.cpp: "%s: offloaded %d/%d layers to GPU\n"
    log = (
        "load_tensors: offloading output layer to GPU\n"
        "load_tensors: offloading 48 repeating layers to GPU\n"
        "load_tensors: offloaded 49/49 layers to GPU\n"
        "load_tensors:        CUDA0 model buffer size = 19000.00 MiB\n"
    )
    assert offloaded_layers(log) == (49, 49)
    assert offloaded_layers("load_tensors: offloaded 20/49 layers to GPU\n") == (20, 49)
    assert offloaded_layers("load_tensors: CPU_Mapped model buffer size = 240 MiB\n") is None


@pytest.mark.parametrize(
    "line",
    [
        # ggml/src/ggml-cuda/ggml-cuda.cu
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 20480.00 MiB on device 0: "
        "cudaMalloc failed: out of memory",
        # src/llama-model.cpp
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
        # src/llama-kv-cache.cpp
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer "
        "for kv cache",
        # src/llama-context.cpp
        "failed to allocate compute pp buffers",
    ],
)
def test_a_failed_allocation_is_told_apart(line: str) -> None:
    assert does_not_fit(f"some log\n{line}\nTraceback ...\n")


def test_other_failures_are_not_called_too_big() -> None:
    assert not does_not_fit("llama_model_load: error loading model: unknown architecture 'x'")
    assert not does_not_fit("gguf_init_from_file: failed to read magic")


def test_the_too_big_line_says_what_to_lower() -> None:
    line = too_big("unable to allocate CUDA0 buffer")
    for key in ("gpu_layers", "kv_type", "context"):
        assert key in line
    assert "(unable to allocate CUDA0 buffer)" in line
    assert line.endswith("see runbook.md#loopd-model-too-big")


# rule 5: several GPUs, or rpc-servers' devices

RPC_A = Device("RPC0", "127.0.0.1:50052", "GPU", 20 * GIB, 24 * GIB)
RPC_B = Device("RPC1", "127.0.0.1:50053", "GPU", 20 * GIB, 24 * GIB)
TWO_RPC = Backend(gpu_offload=True, devices=(CPU, RPC_A, RPC_B))


def test_rpc_servers_devices_take_every_layer_split_by_memory() -> None:
    offload = plan(TWO_RPC, rpc=("127.0.0.1:50052", "127.0.0.1:50053"))
    assert offload.gpu_layers == ALL_LAYERS
    assert (offload.split_mode, offload.main_gpu, offload.tensor_split) == ("layer", 0, ())
    assert offload.describe().endswith(", rpc 127.0.0.1:50052 127.0.0.1:50053")


def test_a_split_by_shares_is_planned_and_described() -> None:
    offload = plan(TWO_RPC, split_mode="row", main_gpu=1, tensor_split=(1.0, 3.0))
    assert (offload.split_mode, offload.main_gpu, offload.tensor_split) == ("row", 1, (1.0, 3.0))
    assert offload.describe().endswith(", split row main_gpu 1 tensor_split 1,3")


@pytest.mark.parametrize(
    ("backend", "keys", "why"),
    [
        (CPU_BUILD, {"tensor_split": (1.0,)}, "and no layer is offloaded"),
        (TWO_RPC, {"gpu_layers": 0, "split_mode": "none"}, "and no layer is offloaded"),
        (TWO_RPC, {"main_gpu": 2}, "main_gpu = 2 names a device past the last: there are 2"),
        (GPU_BOX, {"tensor_split": (1.0, 1.0)}, "gives 2 shares for 1 devices"),
        (TWO_RPC, {"tensor_split": (0.0, 0.0)}, "not all 0"),
        (TWO_RPC, {"tensor_split": (-1.0, 2.0)}, "each share 0 or more"),
    ],
)
def test_a_split_that_cannot_be_is_refused_in_one_line(
    backend: Backend, keys: dict[str, Any], why: str
) -> None:
    with pytest.raises(OffloadError) as raised:
        plan(backend, **keys)
    assert why in str(raised.value)
    assert str(raised.value).endswith("see runbook.md#loopd-gpu-settings")
