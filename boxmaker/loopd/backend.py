"""What the installed llama-cpp-python build runs on.

I/O: loads llama_cpp (and, with ctypes, the ggml libraries it ships) to ask ggml
for its backends (`ggml_backend_reg_count`, `_get`, `_name`) and devices:
`ggml_backend_dev_count`, `_get`, `_name`, `_description`, `_type` and `_memory`
(ggml/include/ggml-backend.h), which llama-cpp-python 0.3.36 does not bind.
(llama.cpp's log, and the load log that `loopd.model` reads its count of layers
offloaded from, are `boxmaker.loopd.llama_load`'s.) An rpc-server registered by
`loopd.rpc` is a device like a GPU's.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from boxmaker.core.model.offload import Backend, Device

# enum ggml_backend_dev_type, in order (ggml-backend.h)
_KINDS = ("CPU", "GPU", "IGPU", "ACCEL", "META")


def read_backend() -> Backend:
    """The build's GPU support and, for a build with a GPU backend, ggml's devices."""
    import llama_cpp

    gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
    if not gpu_offload:
        return Backend(False, ())  # a CPU build: nothing to place, nothing to ask ggml
    lib_dir = Path(llama_cpp.llama_cpp._base_path)
    ggml = ctypes.CDLL(str(lib_dir / "libggml.so"))
    base = ctypes.CDLL(str(lib_dir / "libggml-base.so"))
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(base, name).argtypes = [ctypes.c_void_p]
        getattr(base, name).restype = ctypes.c_char_p
    base.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    base.ggml_backend_dev_type.restype = ctypes.c_int
    base.ggml_backend_dev_memory.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    base.ggml_backend_dev_memory.restype = None
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    ggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    ggml.ggml_backend_reg_get.restype = ctypes.c_void_p
    base.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_name.restype = ctypes.c_char_p
    registries = [
        _text(base.ggml_backend_reg_name(ggml.ggml_backend_reg_get(index)))
        for index in range(ggml.ggml_backend_reg_count())
    ]
    devices = []
    for index in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        base.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = base.ggml_backend_dev_type(dev)
        devices.append(
            Device(
                name=_text(base.ggml_backend_dev_name(dev)),
                description=_text(base.ggml_backend_dev_description(dev)),
                kind=_KINDS[kind] if 0 <= kind < len(_KINDS) else f"type {kind}",
                free=free.value,
                total=total.value,
            )
        )
    # llama.cpp counts a build with the RPC backend as able to offload; without an
    # rpc-server registered (`loopd.rpc`) or a GPU backend of its own, it is a CPU build
    gpu_build = any(name != "CPU" and not name.startswith("RPC") for name in registries)
    rpc_devices = any(device.name.startswith("RPC") for device in devices)
    if not gpu_build and not rpc_devices:
        return Backend(False, ())  # the CPU build, as one without the RPC client reads
    return Backend(True, tuple(devices))


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", errors="replace").strip()
