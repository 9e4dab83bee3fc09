"""LoRA adapter GGUF files for tests, written as llama.cpp's convert_lora_to_gguf.py writes them.

A test that needs "an adapter for this model" reads its targets from the base model
file (`base_targets`) and writes one with `write_lora`. The rules
come from the vendored llama.cpp of the pinned llama-cpp-python (0.3.36):
convert_lora_to_gguf.py writes the file, src/llama-adapter.cpp
(`llama_adapter_lora_init_impl`) reads and checks it, src/llama-graph.cpp
(`build_lora_mm`) applies it.

1. Metadata: `general.architecture` the base model's (gguf's `GGUFWriter` writes it
   first), `general.type` "adapter" (`add_type(GGUFType.ADAPTER)`, as `set_type`
   does), `adapter.type` "lora", `adapter.lora.alpha` a float32. llama.cpp refuses
   a file whose type, adapter type or architecture is not these; `general_type` and
   `adapter_type` write others, for the refusals' tests.
2. Tensors: for each base tensor NAME targeted (`blk.{i}.attn_q.weight`), the pair
   `NAME.lora_a` and `NAME.lora_b`, f32. The base tensor's ggml shape (ne0 first, as
   gguf's `GGUFReader` reports it) is [n_in, n_out]; in numpy order (the reverse, what
   `add_tensor` is given) `lora_a` is [rank, n_in] and `lora_b` [n_out, rank]. llama.cpp
   checks base ne0 == a.ne0, base ne1 == b.ne1 and a.ne1 == b.ne0. (`token_embd` is
   stored the other way round; it is not a target here.)
3. Effect: llama.cpp adds `scale * B @ (A @ x)` to the base tensor's product, where
   scale = alpha / rank (alpha 0: 1). With `zero_b` the pair adds exactly nothing.
4. Values: `lora_a` is normal * `a_scale`, `lora_b` zeros or normal * `b_scale`,
   drawn in target order from one numpy Generator seeded with `seed`: the same
   arguments give the same bytes.

I/O: reads the base model's header (memory-mapped), writes the adapter file.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from gguf import GGUFType, GGUFWriter, Keys

__all__ = ["base_targets", "tensor_shapes", "write_lora"]

ATTN_Q = "attn_q"


def base_targets(
    model: Path, kinds: Sequence[str] = (ATTN_Q,)
) -> tuple[str, dict[str, tuple[int, int]]]:
    """The base model's architecture, and its tensors `blk.{i}.{kind}.weight` for each
    kind, each with its ggml shape [n_in, n_out] (rule 2)."""
    architecture, shapes = tensor_shapes(model)
    wanted = tuple(f".{kind}.weight" for kind in kinds)
    targets = {
        name: (shape[0], shape[1])
        for name, shape in shapes.items()
        if name.startswith("blk.") and name.endswith(wanted) and len(shape) == 2
    }
    return architecture, targets


# GGUF value types (gguf.h) of a fixed size: their size in bytes
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def tensor_shapes(model: Path) -> tuple[str, dict[str, tuple[int, ...]]]:
    """A (trusted) GGUF file's architecture and its tensors' ggml shapes (ne0 first),
    read straight from its header: gguf's `GGUFReader` makes an object of every
    vocabulary entry first, 15 s for Gemma 3's 262,144 on a busy 2-core machine."""
    with model.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = 8  # past the magic and the version

        def number(form: str) -> int:
            nonlocal at
            (value,) = struct.unpack_from(form, data, at)
            at += struct.calcsize(form)
            return int(value)

        def text() -> str:
            nonlocal at
            length = number("<Q")
            at += length
            return data[at - length : at].decode("utf-8", errors="replace")

        tensors, keys = number("<Q"), number("<Q")
        architecture = ""
        for _ in range(keys):
            key, kind = text(), number("<I")
            if kind == _ARRAY:
                inner, count = number("<I"), number("<Q")
                if inner == _STRING:
                    for _ in range(count):
                        length = number("<Q")  # a length, then that many bytes
                        at += length
                else:
                    at += count * _SIZES[inner]
            elif kind == _STRING:
                value = text()
                if key == "general.architecture":
                    architecture = value
            else:
                at += _SIZES[kind]
        shapes: dict[str, tuple[int, ...]] = {}
        for _ in range(tensors):
            name, dims = text(), number("<I")
            shapes[name] = tuple(number("<Q") for _ in range(dims))
            at += 4 + 8  # its type and offset
        return architecture, shapes


def write_lora(
    path: Path,
    *,
    architecture: str,
    targets: Mapping[str, tuple[int, int]],
    rank: int = 4,
    alpha: float | None = None,
    zero_b: bool = False,
    a_scale: float = 0.5,
    b_scale: float = 0.5,
    seed: int = 0,
    general_type: str = GGUFType.ADAPTER,
    adapter_type: str = "lora",
) -> Path:
    """A LoRA adapter for the base tensors `targets` (name to ggml shape [n_in, n_out])
    of a model of `architecture`, by rules 1 to 4 (`alpha` None: the rank, scale 1)."""
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(path, architecture)
    writer.add_type(general_type)
    writer.add_string(Keys.Adapter.TYPE, adapter_type)
    writer.add_float32(Keys.Adapter.LORA_ALPHA, float(rank if alpha is None else alpha))
    for name, (n_in, n_out) in targets.items():
        lora_a = (rng.standard_normal((rank, n_in)) * a_scale).astype(np.float32)
        b = np.zeros((n_out, rank)) if zero_b else rng.standard_normal((n_out, rank)) * b_scale
        writer.add_tensor(f"{name}.lora_a", lora_a)
        writer.add_tensor(f"{name}.lora_b", b.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
