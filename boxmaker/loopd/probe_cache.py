"""A passed model probe, remembered, so `loopd serve` does not load the model twice.

I/O: stats of the files named below, /proc/cpuinfo, and the record file
`<home>/loop/probe-passed.json`. The probe (`loopd.probe`) exists because a
llama-cpp-python build made for another CPU, or a broken model file, crashes at
the first tokens; its answer depends on exactly these, and they are the key (a
SHA-256 over them):

    the Python that runs loopd (its real path)
    every shared library of the llama_cpp package (name, size, mtime, inode)
    the model file (real path, size, mtime, inode)
    the CPU (/proc/cpuinfo's model name and flags)
    the thread count

Rules: a record is written (atomically) only after a probe passed, by `loopd
probe` (which `bxctl install` runs) and by `loopd serve`; `serve` skips its
probe child when the record's key is this host's now. Any difference (a rebuilt
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
from pathlib import Path

from boxmaker.core.layout import Home
from boxmaker.ipc.files import write_atomic

RECORD = "probe-passed.json"
VERSION = "probe-key-1"


def record_path(home: Path) -> Path:
    return Home(home).loop_sessions.parent / RECORD


def probe_key(model: Path, threads: int) -> str:
    """The key of a probe of `model` with `threads` on this host, as it is now."""
    parts = [VERSION, os.path.realpath(sys.executable), f"threads={threads}"]
    parts += [_stat_line(path) for path in _libraries()]
    parts.append(_stat_line(Path(os.path.realpath(model))))
    parts += _cpu()
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def remembered(home: Path, key: str) -> tuple[int, float] | None:
    """(tokens, seconds) of the passed probe recorded under `key`; None if none is."""
    try:
        data = json.loads(record_path(home).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    tokens, seconds = data.get("tokens"), data.get("seconds")
    if not isinstance(tokens, int) or tokens <= 0 or not isinstance(seconds, int | float):
        return None
    return tokens, float(seconds)


def remember(home: Path, key: str, tokens: int, seconds: float) -> None:
    """Record a passed probe under `key` (OSError if the record cannot be written)."""
    path = record_path(home)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = {"key": key, "tokens": tokens, "seconds": round(seconds, 3)}
    write_atomic(path, json.dumps(data, sort_keys=True).encode() + b"\n")


def _libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: list[Path] = []
    for location in spec.submodule_search_locations:
        found += [p for p in Path(location).rglob("*.so*") if p.is_file()]
    return sorted(found)


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
