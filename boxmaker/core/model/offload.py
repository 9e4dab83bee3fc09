"""Where the model runs: loopd.toml's GPU keys against what the build and machine have.

Pure; no I/O. loopd reads the backend (`boxmaker.loopd.backend`) and the keys, and
`plan_offload` turns them into the settings llama-cpp-python is given, or refuses
at start in one line naming the keys and the runbook entry. The rules:

1. `gpu_layers = "auto"` (the default): every layer on the GPU when the build has a
   GPU backend and a GPU device is present, else none. "all", or a number above 0,
   on a build without a GPU backend, or with no GPU device, is refused: the owner
   asked for the GPU and would otherwise get the CPU without a word.
2. `flash_attn = "auto"`: on where a GPU is used or the KV cache is quantized, else
   off (the CPU build as before). "on" and "off" are as written.
3. `kv_type` (`f16`, `q8_0`, `q4_0`) is the type of both the K and the V cache. A
   quantized V cache needs flash attention: `kv_type` other than f16 with
   `flash_attn = "off"` is refused, naming both keys.
4. `ubatch` above `batch` is refused (llama.cpp would quietly cut it to `batch`).
5. Several GPUs (local, or rpc-servers' devices): llama.cpp splits the layers over
   them by their free memory. `tensor_split` gives each its share instead (as many
   numbers as GPU devices at most, not all zero), `split_mode` how ("layer", the
   default; "row": each layer's rows over the GPUs; "none": all on `main_gpu`), and
   `main_gpu` the device index for "none" and for "row"'s small tensors. Any of them
   set on a run that offloads no layer, or naming a device past the last, is refused.

`offloaded_layers` reads llama.cpp's own count from its load log, and
`does_not_fit` tells a load that failed for want of device or host memory, so the
probe can say what fits instead of "could not be loaded".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from boxmaker.core.errors import ConfigError
from boxmaker.core.runbook import Runbook

GPU_SETTINGS_POINTER = Runbook.LOOPD_GPU_SETTINGS.pointer
TOO_BIG_POINTER = Runbook.LOOPD_MODEL_TOO_BIG.pointer
ALL_LAYERS = -1  # llama.cpp's n_gpu_layers for every layer
KV_TYPES = ("f16", "q8_0", "q4_0")
# bytes an element of the KV cache takes: ggml's blocks of 32 (q8_0: 32 bytes and an
# f16 scale; q4_0: 16 bytes and the scale)
KV_ELEMENT_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
GPU_KINDS = ("GPU", "IGPU")
MIB = 1024 * 1024

GpuLayers = int | Literal["auto", "all"]
Switch = Literal["auto", "on", "off"]
KvType = Literal["f16", "q8_0", "q4_0"]
SplitMode = Literal["layer", "row", "none"]

# llama.cpp's load log, src/llama-model.cpp: "load_tensors: offloaded 25/25 layers to GPU"
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# what llama.cpp and ggml write when an allocation fails (src/llama-model.cpp,
# src/llama-kv-cache.cpp, src/llama-context.cpp, ggml/src/ggml-cuda/ggml-cuda.cu)
_NO_MEMORY = re.compile(
    r"unable to allocate \S+ buffer|failed to allocate buffer for kv cache"
    r"|failed to allocate compute (?:pp |tg )?buffers|cudaMalloc failed: out of memory"
    r"|out of memory",
    re.IGNORECASE,
)


class OffloadError(ConfigError):
    """The GPU keys ask for what this build or machine cannot do (one line, with pointer)."""


@dataclass(frozen=True)
class Device:
    """One of ggml's devices, as `ggml_backend_dev_*` describe it."""

    name: str  # "CUDA0", "CPU"
    description: str  # "NVIDIA H200", the CPU's model name
    kind: str  # "CPU", "GPU", "IGPU", "ACCEL"
    free: int  # bytes
    total: int


@dataclass(frozen=True)
class Backend:
    """What the installed llama-cpp-python build can run on, on this machine."""

    gpu_offload: bool  # llama_supports_gpu_offload(): the build has a GPU backend
    devices: tuple[Device, ...]

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind in GPU_KINDS)

    def describe(self) -> str:
        """One line: the backend and each GPU with its memory, or "CPU only"."""
        if not self.gpu_offload:
            return "backend CPU (this build has no GPU backend)"
        if not self.gpus:
            return "backend GPU-capable build, but no GPU device found (CPU only)"
        shown = ", ".join(
            f"{d.name} {d.description} ({d.free // MIB} MiB free of {d.total // MIB} MiB)"
            for d in self.gpus
        )
        return f"backend GPU: {shown}"


@dataclass(frozen=True)
class Offload:
    """What llama-cpp-python's `Llama` is given."""

    gpu_layers: int  # n_gpu_layers: ALL_LAYERS, 0, or a count
    flash_attn: bool
    kv_type: KvType
    batch: int
    ubatch: int
    rpc: tuple[str, ...] = ()  # llama.cpp rpc-servers whose devices hold layers
    split_mode: SplitMode = "layer"
    main_gpu: int = 0
    tensor_split: tuple[float, ...] = ()  # empty: by the devices' free memory

    def describe(self) -> str:
        layers = {ALL_LAYERS: "all", 0: "none"}.get(self.gpu_layers, str(self.gpu_layers))
        servers = f", rpc {' '.join(self.rpc)}" if self.rpc else ""
        split = ""
        if (self.split_mode, self.main_gpu, self.tensor_split) != ("layer", 0, ()):
            shares = ",".join(f"{share:g}" for share in self.tensor_split) or "by memory"
            split = f", split {self.split_mode} main_gpu {self.main_gpu} tensor_split {shares}"
        return (
            f"gpu_layers {layers}, flash_attn {'on' if self.flash_attn else 'off'}, "
            f"kv_type {self.kv_type}, batch {self.batch}, ubatch {self.ubatch}{servers}{split}"
        )


def plan_offload(
    backend: Backend,
    *,
    gpu_layers: GpuLayers,
    flash_attn: Switch,
    kv_type: KvType,
    batch: int,
    ubatch: int,
    rpc: tuple[str, ...] = (),
    split_mode: SplitMode = "layer",
    main_gpu: int = 0,
    tensor_split: tuple[float, ...] = (),
) -> Offload:
    """The settings for `Llama`, by the rules above (`rpc`: the rpc-servers whose devices
    `backend` lists among its GPUs); OffloadError when refused."""
    has_gpu = backend.gpu_offload and bool(backend.gpus)
    if gpu_layers == "auto":
        layers = ALL_LAYERS if has_gpu else 0
    else:
        layers = ALL_LAYERS if gpu_layers == "all" else gpu_layers
        if layers != 0 and not has_gpu:
            why = (
                "this llama-cpp-python build has no GPU backend (rebuild it with "
                "scripts/build-llama-cpp --gpu cuda)"
                if not backend.gpu_offload
                else "no GPU device is present (is the NVIDIA driver loaded? nvidia-smi)"
            )
            raise OffloadError(
                f"[model] gpu_layers = {gpu_layers!r} asks for the GPU, but {why}; set "
                f'gpu_layers = 0 to run on the CPU, or "auto"; {GPU_SETTINGS_POINTER}'
            )
        if layers < ALL_LAYERS:
            raise OffloadError(
                f"[model] gpu_layers = {gpu_layers}: give a count of 0 or more, "
                f'"all" or "auto"; {GPU_SETTINGS_POINTER}'
            )
    if kv_type != "f16" and flash_attn == "off":
        raise OffloadError(
            f'[model] kv_type = "{kv_type}" needs flash attention, and flash_attn = "off": '
            f'set flash_attn to "auto" or "on", or kv_type to "f16"; {GPU_SETTINGS_POINTER}'
        )
    if ubatch > batch:
        raise OffloadError(
            f"[model] ubatch = {ubatch} is larger than batch = {batch}: a micro-batch is "
            f"part of a batch; lower ubatch or raise batch; {GPU_SETTINGS_POINTER}"
        )
    split = (split_mode, main_gpu, tensor_split)
    if split != ("layer", 0, ()):
        _check_split(len(backend.gpus) if layers != 0 else 0, split_mode, main_gpu, tensor_split)
    attention = {"on": True, "off": False}.get(flash_attn, layers != 0 or kv_type != "f16")
    return Offload(
        layers, attention, kv_type, batch, ubatch, rpc, split_mode, main_gpu, tensor_split
    )


def _check_split(
    gpus: int, split_mode: SplitMode, main_gpu: int, tensor_split: tuple[float, ...]
) -> None:
    """Rule 5, for `gpus` devices that hold layers (0: none offloaded)."""
    keys = "[model] split_mode, main_gpu and tensor_split"
    if gpus == 0:
        raise OffloadError(
            f"{keys} place layers on GPUs, and no layer is offloaded (gpu_layers, or no GPU "
            f"and no rpc_servers): leave them out; {GPU_SETTINGS_POINTER}"
        )
    if main_gpu >= gpus:
        raise OffloadError(
            f"[model] main_gpu = {main_gpu} names a device past the last: there are {gpus} "
            f"(0 to {gpus - 1}); {GPU_SETTINGS_POINTER}"
        )
    if len(tensor_split) > gpus:
        raise OffloadError(
            f"[model] tensor_split gives {len(tensor_split)} shares for {gpus} devices: "
            f"give at most one a device; {GPU_SETTINGS_POINTER}"
        )
    if tensor_split and (min(tensor_split) < 0 or sum(tensor_split) <= 0):
        raise OffloadError(
            f"[model] tensor_split: each share 0 or more, not all 0; {GPU_SETTINGS_POINTER}"
        )


def offloaded_layers(log: str) -> tuple[int, int] | None:
    """(offloaded, of) from llama.cpp's load log; None where it printed no count (a
    build without a GPU backend prints none: nothing was offloaded)."""
    found = _OFFLOADED.findall(log)
    if not found:
        return None
    done, total = found[-1]
    return int(done), int(total)


def does_not_fit(log: str) -> bool:
    """Whether a failed load's log says an allocation failed (device or host memory)."""
    return _NO_MEMORY.search(log) is not None


def too_big(detail: str) -> str:
    """The one line for a model that does not fit, `detail` being llama.cpp's own words."""
    return (
        f"the model does not fit the memory it was given ({detail}): offload fewer layers "
        '([model] gpu_layers), a smaller KV cache ([model] kv_type = "q8_0" or "q4_0", or a '
        f"smaller context), or a smaller quantization of the model; {TOO_BIG_POINTER}"
    )
