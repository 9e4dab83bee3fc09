"""Where loopd runs its model: loopd.toml's `[model]` GPU keys planned against the build.

I/O: reads the backend (`boxmaker.loopd.backend`: loads llama_cpp). The rules are
`boxmaker.core.model.offload`'s; this module turns a refusal into loopd's StartupError
and says, in one line, where the model went (the start-up log, `loopd probe`,
`bxctl status`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from boxmaker.core.errors import StartupError
from boxmaker.core.model.offload import Backend, Offload, OffloadError, plan_offload
from boxmaker.loopd.config import LoopdConfig


def plan(config: LoopdConfig, backend: Backend | None = None) -> Offload:
    """The offload for `config` on this build (`backend`: read now when None, after the
    rpc-servers of `[model] rpc_servers` are checked and registered: `loopd.rpc`);
    StartupError, one line with its runbook pointer, when refused."""
    from boxmaker.loopd.rpc import checked_endpoints, register_configured

    if backend is None:
        from boxmaker.loopd.backend import read_backend

        rpc = register_configured(config)
        backend = read_backend()
    else:  # read by the caller, after `register_configured`
        rpc = tuple(str(endpoint) for endpoint in checked_endpoints(config))
    settings = config.model
    try:
        return plan_offload(
            backend,
            gpu_layers=settings.gpu_layers,
            flash_attn=settings.flash_attn,
            kv_type=settings.kv_type,
            batch=settings.batch,
            ubatch=settings.ubatch,
            rpc=rpc,
            split_mode=settings.split_mode,
            main_gpu=settings.main_gpu,
            tensor_split=tuple(settings.tensor_split),
        )
    except OffloadError as exc:
        raise StartupError(str(exc)) from exc


def placement(backend: Backend, offload: Offload, offloaded: tuple[int, int] | None) -> str:
    """One line: the backend, the settings, and llama.cpp's count of layers offloaded."""
    if offloaded is None or not backend.gpu_offload:  # (the RPC client alone counts 0/N)
        layers = "no layer offloaded (no GPU backend)"
    else:
        layers = f"offloaded {offloaded[0]}/{offloaded[1]} layers"
    return f"{backend.describe()}; {offload.describe()}; {layers}"


def to_argument(offload: Offload) -> str:
    """`offload` as the probe child's argument (JSON)."""
    return json.dumps(
        {
            "gpu_layers": offload.gpu_layers,
            "flash_attn": offload.flash_attn,
            "kv_type": offload.kv_type,
            "batch": offload.batch,
            "ubatch": offload.ubatch,
            "rpc": list(offload.rpc),
            "split_mode": offload.split_mode,
            "main_gpu": offload.main_gpu,
            "tensor_split": list(offload.tensor_split),
        },
        sort_keys=True,
    )


def from_argument(argument: str) -> Offload:
    """The probe child's side of `to_argument`."""
    data = json.loads(argument)
    return Offload(
        gpu_layers=int(data["gpu_layers"]),
        flash_attn=bool(data["flash_attn"]),
        kv_type=data["kv_type"],
        batch=int(data["batch"]),
        ubatch=int(data["ubatch"]),
        rpc=tuple(str(endpoint) for endpoint in data.get("rpc", [])),
        split_mode=data.get("split_mode", "layer"),
        main_gpu=int(data.get("main_gpu", 0)),
        tensor_split=tuple(float(share) for share in data.get("tensor_split", [])),
    )


def placement_line(stdout_lines: Sequence[str]) -> str:
    """The probe child's placement line (PLACED prefix removed; "" when none)."""
    for line in stdout_lines:
        if line.startswith(PLACED):
            return line[len(PLACED) :].strip()
    return ""


PLACED = "placed: "
