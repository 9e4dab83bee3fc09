"""Passed start-up checks, remembered: the model probe and the marker self-test.

`loopd serve` need not load the model twice (the probe child), nor tokenize
every marker twice (the marker self-test, about a second for Gemma), when the
same check passed before on the same everything.

I/O: stats of the files named below, /proc/cpuinfo, and the record file
`<home>/loop/probe-passed.json`. The probe (`loopd.probe`) exists because a
llama-cpp-python build made for another CPU, or a broken model file, crashes at
the first tokens; its answer depends on exactly these, and they are the key (a
SHA-256 over them):

    the Python that runs loopd (its real path)
    every shared library of the llama_cpp package (name, size, mtime, inode)
    the model file (real path, size, mtime, inode)
    the LoRA adapter file, the same way, or that there is none (`loopd.adapter`; its
      digest and metadata are checked at every start all the same)
    the CPU (/proc/cpuinfo's model name and flags)
    the thread count
    the load settings: `[model] context` and `memory_mib` as set, and the offload
    the bytes of `core/model/context_fit.py`, which turns those and the model's metadata
      into the context the probe loaded (so the same key is the same context)

A passed probe's record also holds the model's metadata as the child read it (the
vocabulary's `tokenizer.*` keys left out), so a start that skips the probe resolves
the context from it without reading the file in loopd's own process.

The marker self-test's answer depends on the model file, the llama.cpp build
(its tokenizer) and boxmaker's own code that lists and disarms markers, so its
key (`tags_key`) is the model and the libraries as above, plus the bytes of
those modules (`loopd/markers.py`, `core/sanitize/tags.py`, `core/model/chat_format.py`).
Its record is `<home>/loop/tags-passed.json`.

Rules: a record is written (atomically) only after its check passed: the probe
by `loopd probe` (which `bxctl install` runs) and by `loopd serve`, the marker
self-test by `loopd serve`; `serve` skips a check whose record's key is this
host's now. Any difference (a rebuilt
wheel, another model, the disk moved to another CPU) probes again; a record
that cannot be read or parsed is no record. The record is only ever a reason
to skip a check that passed before on the same everything, never to trust a
build that never passed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from boxmaker.core.home.layout import Home
from boxmaker.ipc.files import write_atomic

RECORD = "probe-passed.json"
TAGS_RECORD = "tags-passed.json"
VERSION = "probe-key-3"  # 3: the adapter
TAGS_VERSION = "tags-key-1"
TAGS_CODE = (
    "boxmaker.loopd.markers",
    "boxmaker.core.sanitize.tags",
    "boxmaker.core.model.chat_format",
)
PROBE_CODE = ("boxmaker.core.model.context_fit",)


def record_path(home: Path, record: str = RECORD) -> Path:
    return Home(home).loop_sessions.parent / record


def tags_key(model: Path) -> str:
    """The key of a marker self-test of `model` with this build and this code."""
    parts = [TAGS_VERSION, *(_stat_line(path) for path in _libraries())]
    parts.append(_stat_line(Path(os.path.realpath(model))))
    parts += _code(TAGS_CODE)
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def probe_key(model: Path, threads: int, settings: str = "", adapter: Path | None = None) -> str:
    """The key of a probe of `model` with `threads`, the load `settings` (context and
    memory_mib as set, and the offload, as text) and the LoRA `adapter` file (None:
    none) on this host, as it is now."""
    parts = [VERSION, os.path.realpath(sys.executable), f"threads={threads}", settings]
    parts += [_stat_line(path) for path in _libraries()]
    parts.append(_stat_line(Path(os.path.realpath(model))))
    applied = "none" if adapter is None else _stat_line(Path(os.path.realpath(adapter)))
    parts.append(f"adapter {applied}")
    parts += _cpu()
    parts += _code(PROBE_CODE)
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def remembered(home: Path, key: str, record: str = RECORD) -> tuple[int, float] | None:
    """(count, seconds) of the passed check recorded under `key`; None if none is."""
    try:
        data = json.loads(record_path(home, record).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    tokens, seconds = data.get("tokens"), data.get("seconds")
    if not isinstance(tokens, int) or tokens <= 0 or not isinstance(seconds, int | float):
        return None
    return tokens, float(seconds)


def remembered_metadata(home: Path, key: str) -> dict[str, str] | None:
    """The model's metadata a passed probe recorded under `key`; None if none is (no
    record for the key, or one without metadata)."""
    if remembered(home, key) is None:
        return None
    try:
        data = json.loads(record_path(home).read_bytes())
    except (OSError, ValueError):
        return None
    metadata = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return None
    return {str(k): v for k, v in metadata.items()}


def remember(
    home: Path,
    key: str,
    tokens: int,
    seconds: float,
    record: str = RECORD,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Record a passed check under `key`, with the model's `metadata` where given
    (OSError if the record cannot be written)."""
    path = record_path(home, record)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data: dict[str, object] = {"key": key, "tokens": tokens, "seconds": round(seconds, 3)}
    if metadata is not None:
        data["metadata"] = dict(metadata)
    write_atomic(path, json.dumps(data, sort_keys=True).encode() + b"\n")


def _libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: list[Path] = []
    for location in spec.submodule_search_locations:
        found += [p for p in Path(location).rglob("*.so*") if p.is_file()]
    return sorted(found)


def _code(modules: Sequence[str]) -> list[str]:
    """A line per module of boxmaker's own: its name and the sha256 of its bytes."""
    lines = []
    for module in modules:
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:
            spec = None
        origin = spec.origin if spec is not None else None
        data = Path(origin).read_bytes() if origin else b"missing"
        lines.append(f"{module} {hashlib.sha256(data).hexdigest()}")
    return lines


def _stat_line(path: Path) -> str:
    try:
        st = path.stat()
    except OSError as exc:
        return f"{path} unreadable {exc.errno}"
    return f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ino}"


def _cpu() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ["cpu unknown"]
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in ("model name", "flags", "Features") and name not in found:
            found[name] = " ".join(sorted(value.split())) if name != "model name" else value.strip()
    return [f"{name}: {value}" for name, value in sorted(found.items())] or ["cpu unknown"]
