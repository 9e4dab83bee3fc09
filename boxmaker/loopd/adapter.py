"""The LoRA adapter loopd applies to its model: which file it is, and whether it may be used.

I/O: opens the adapter file once per check, hashes it (sha256, streamed) and reads its
GGUF header and metadata (bounded); llama.cpp loads it later (`loopd.model`, with
llama-cpp-python's `lora_path`). The rules, in the order `check_adapter` follows them:

1. **Which file** (`resolve`, from `[model] adapter` and `[model] path`): "auto", the
   default, is the adapter boxmaker ships for the embedded model when `[model] path`
   is empty (the embedded model), and none for any other model; "none" or "" is none;
   any other value is the path of the owner's own adapter file.
2. **The shipped adapter** is package data, `boxmaker/loopd/data/embedded-lora.gguf`
   (EMBEDDED_ADAPTER_NAME), and its sha256 must be EMBEDDED_ADAPTER_SHA256. A missing
   file or another digest is refused, in one line saying to reinstall or to set
   `[model] adapter = "none"`: loopd never runs the embedded model without the adapter
   it ships unless the owner says so.
3. **Every adapter is hostile input**, as a model file is (the shipped one too, after
   its digest): only its header and metadata are read here, at most METADATA_BYTES
   bytes of them and METADATA_KEYS keys (an array is skipped, its elements counted in
   the bytes; an array of arrays is refused); a value's text is escaped wherever it is
   said (`core.display.escape.escape_arguments`). It must be a GGUF file (version 2 or 3) whose
   `general.type` is "adapter" and `adapter.type` "lora", as llama.cpp's
   `llama_adapter_lora_init` requires, and whose `general.architecture` is the
   model's (llama.cpp refuses a mismatch too, with less to say). The tensors are left
   to llama.cpp, in the probe child first (`loopd.probe`), so that a file that crashes
   it stops the probe, not loopd.
4. **What passed is an `Adapter`**, built only here: its path, sha256 and
   architecture. `describe` names it where the model is named (`loopd probe`, `loopd
   check` and so `bxctl model check`, and `bxctl status`): its file name and the first
   SHORT_SHA256 hex digits of its sha256, or "none".

Every refusal is a `StartupError`: one line, the file named, what to do, and
runbook.md#loopd-adapter-refused.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.errors import StartupError
from boxmaker.core.runbook import Runbook

__all__ = [
    "EMBEDDED_ADAPTER_NAME",
    "EMBEDDED_ADAPTER_SHA256",
    "Adapter",
    "AdapterFile",
    "check_adapter",
    "describe",
    "read_metadata",
    "resolve",
    "shipped_adapter",
]

EMBEDDED_ADAPTER_NAME = "embedded-lora.gguf"
# `sha256sum boxmaker/loopd/data/embedded-lora.gguf`: the adapter `scripts/train-embedded`
# made with its default settings (seed 1, 3,128 conversations of generator v10b, 391
# steps, one epoch; issue 39, run 12)
EMBEDDED_ADAPTER_SHA256 = "fef4e8f4af57d87c82f07270e1f828cb67ba74ba2bebc12134f31af341b4d24c"
DATA = Path(__file__).with_name("data")  # the package data folder the shipped file is in

AUTO = "auto"
NONE = ("none", "")
SHORT_SHA256 = 12
METADATA_BYTES = 1 << 20  # rule 3: the header and metadata read, at most
METADATA_KEYS = 1024
POINTER = Runbook.LOOPD_ADAPTER_REFUSED.pointer
_SHIPPED_FIX = 'reinstall boxmaker, or set [model] adapter = "none" to run the model without it'
_OWNERS_FIX = (
    'name a LoRA adapter GGUF file made for this model in [model] adapter, or set it to "none"'
)

# GGUF value types (gguf.h `enum gguf_type`) that are scalars: their struct format
_SCALARS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING = 8
_ARRAY = 9

Value = str | int | float | bool


@dataclass(frozen=True)
class AdapterFile:
    """The adapter loopd.toml asks for (rule 1), not yet checked."""

    path: Path
    sha256: str | None  # the digest it must have: the shipped adapter's; None: the owner's


def shipped_adapter() -> AdapterFile:
    """The adapter boxmaker ships for the embedded model (rule 2)."""
    return AdapterFile(DATA / EMBEDDED_ADAPTER_NAME, EMBEDDED_ADAPTER_SHA256)


def resolve(adapter: str, model_path: str) -> AdapterFile | None:
    """Rule 1: the adapter `[model] adapter` names for the model `[model] path` names."""
    if adapter == AUTO:
        return shipped_adapter() if not model_path else None
    if adapter in NONE:
        return None
    return AdapterFile(Path(adapter), None)


_SEAL = object()


@dataclass(frozen=True)
class Adapter:
    """An adapter file that passed `check_adapter` (rule 4); built only by it."""

    path: Path
    sha256: str
    architecture: str
    shipped: bool
    _seal: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._seal is not _SEAL:
            raise TypeError("an Adapter is built only by boxmaker.loopd.adapter.check_adapter")

    def describe(self) -> str:
        """Its file name and short sha256, escaped: `NAME sha256 0123456789ab`."""
        return f"{escape_arguments(self.path.name)} sha256 {self.sha256[:SHORT_SHA256]}"


def describe(adapter: Adapter | None) -> str:
    """What `loopd probe`, `loopd check` and `bxctl status` say of the adapter."""
    return "none" if adapter is None else adapter.describe()


def check_adapter(file: AdapterFile, architecture: str | None) -> Adapter:
    """Rules 2 and 3 for `file` and a model of `architecture` (None: not compared, for
    the check loopd makes before the probe child, which compares); StartupError, one
    line with its pointer, when it is refused. The shipped adapter's digest is checked
    before anything of it is read; the owner's file is hashed after its metadata passed
    (a model file named by mistake is refused without reading it whole)."""
    shown = escape_arguments(str(file.path))
    shipped = file.sha256 is not None
    what = f"the embedded model's adapter {shown}" if shipped else f"the adapter {shown}"
    fix = _SHIPPED_FIX if shipped else _OWNERS_FIX
    if not file.path.is_file():  # never open a FIFO or a device: it could block
        state = "does not exist" if not file.path.exists() else "is not a file"
        missing = " (this install lacks it)" if shipped and state == "does not exist" else ""
        raise StartupError(f"{what} {state}{missing}: {fix}; {POINTER}")
    try:
        with file.path.open("rb") as stream:
            digest = hashlib.file_digest(stream, "sha256").hexdigest() if shipped else ""
            if file.sha256 is not None and digest != file.sha256:
                raise StartupError(
                    f"{what} has sha256 {digest[:SHORT_SHA256]}, not the "
                    f"{file.sha256[:SHORT_SHA256]} this boxmaker ships (damaged or replaced): "
                    f"{fix}; {POINTER}"
                )
            stream.seek(0)
            metadata = read_metadata(stream, _wrong)
            problem = _problem(metadata, architecture)
            if problem is None and not shipped:
                stream.seek(0)
                digest = hashlib.file_digest(stream, "sha256").hexdigest()
    except OSError as exc:
        why = escape_arguments(exc.strerror or type(exc).__name__)
        raise StartupError(f"{what} cannot be read ({why}): {fix}; {POINTER}") from exc
    except ValueError as exc:
        raise StartupError(f"{what} is not a GGUF adapter file ({exc}): {fix}; {POINTER}") from exc
    made_for = metadata.get("general.architecture")
    if problem is not None or not isinstance(made_for, str):  # the second: _problem's too
        raise StartupError(f"{what} {problem or 'names no architecture'}: {fix}; {POINTER}")
    return Adapter(file.path, digest, made_for, shipped, _SEAL)


_REQUIRED = {"general.type": "adapter", "adapter.type": "lora"}


def _wrong(key: str, value: Value) -> bool:
    """Whether a required key has another value: no need to read on."""
    return key in _REQUIRED and value != _REQUIRED[key]


def _problem(metadata: dict[str, Value], architecture: str | None) -> str | None:
    """Rule 3's metadata checks: what is wrong with the adapter (escaped), or None."""
    for key, wanted in _REQUIRED.items():
        if metadata.get(key) != wanted:
            return (
                f"is not a LoRA adapter (its {key} is {_said(metadata.get(key))}, not {wanted!r})"
            )
    made_for = metadata.get("general.architecture")
    if not isinstance(made_for, str):
        return f"names no architecture (its general.architecture is {_said(made_for)})"
    if architecture is not None and made_for != architecture:
        model = _said(architecture)
        return f"was made for the architecture {_said(made_for)}, and the model is {model}"
    return None


def _said(value: Value | None) -> str:
    """A metadata value as a refusal quotes it: escaped, at most 60 characters."""
    if value is None:
        return "missing"
    text = repr(value)
    return escape_arguments(text if len(text) <= 60 else text[:57] + "...")


# ---- the GGUF header and metadata (rule 3) -----------------------------------------


class _Bounded:
    """Reads from `stream`, at most `budget` bytes in all (ValueError past them)."""

    def __init__(self, stream: BinaryIO, budget: int) -> None:
        self._stream = stream
        self._left = budget

    def take(self, count: int) -> bytes:
        if count > self._left:
            raise ValueError(f"its metadata is longer than the {METADATA_BYTES} bytes loopd reads")
        data = self._stream.read(count)
        if len(data) != count:
            raise ValueError("it ends inside its metadata")
        self._left -= count
        return data

    def number(self, form: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(form, self.take(struct.calcsize(form)))[0]
        return value

    def count(self) -> int:
        return int(self.number("<Q"))

    def text(self) -> str:
        return self.take(self.count()).decode("utf-8", errors="replace")


def read_metadata(
    stream: BinaryIO, stop: Callable[[str, Value], bool] | None = None
) -> dict[str, Value]:
    """The scalar metadata of the GGUF file `stream` reads from its start (arrays are
    skipped), within rule 3's bounds; ValueError, saying what is wrong, escaped. With
    `stop`, what was read up to the first key and value for which it is true (a model
    file named as an adapter says so in its first keys, long before its vocabulary)."""
    reader = _Bounded(stream, METADATA_BYTES)
    if reader.take(4) != b"GGUF":
        raise ValueError("it does not start with GGUF")
    version = reader.number("<I")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}, not 2 or 3")
    reader.count()  # the tensors: llama.cpp's to read
    keys = reader.count()
    if keys > METADATA_KEYS:
        raise ValueError(f"{keys} metadata keys, more than the {METADATA_KEYS} loopd reads")
    found: dict[str, Value] = {}
    for _ in range(keys):
        key = reader.text()
        kind = int(reader.number("<I"))
        if key in found:
            raise ValueError(f"it holds the key {escape_arguments(key)!r} twice")
        if kind == _ARRAY:
            _skip_array(reader)
            continue
        value = _value(reader, kind)
        found[key] = value
        if stop is not None and stop(key, value):
            break
    return found


def _value(reader: _Bounded, kind: int) -> Value:
    if kind == _STRING:
        return reader.text()
    form = _SCALARS.get(kind)
    if form is None:
        raise ValueError(f"a value of unknown type {kind}")
    return reader.number(form)


def _skip_array(reader: _Bounded) -> None:
    kind = int(reader.number("<I"))
    length = reader.count()
    if kind == _STRING:
        for _ in range(length):  # each at least 8 bytes: the budget ends the loop
            reader.text()
        return
    form = _SCALARS.get(kind)
    if form is None:
        raise ValueError(f"an array of type {kind}")
    size = struct.calcsize(form)
    if length > METADATA_BYTES // size:
        raise ValueError(f"its metadata is longer than the {METADATA_BYTES} bytes loopd reads")
    reader.take(length * size)
