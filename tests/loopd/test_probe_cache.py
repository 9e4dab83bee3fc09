"""A passed probe is remembered by build, model and CPU, and only a match skips the child."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boxmaker.core.errors import StartupError
from boxmaker.loopd import probe_cache, startup
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.probe import ProbeResult
from boxmaker.loopd.probe_cache import probe_key, record_path, remember, remembered


@pytest.fixture
def config(tmp_path: Path) -> LoopdConfig:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 64)
    toml = tmp_path / "loopd.toml"
    toml.write_text(f'[paths]\nhome = "{tmp_path / "home"}"\n[model]\npath = "{model}"\n')
    return load_config(toml, {})


@pytest.fixture
def library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lib = tmp_path / "libllama.so"
    lib.write_bytes(b"\x7fELF one build")
    monkeypatch.setattr(probe_cache, "_libraries", lambda: [lib])
    return lib


def model_of(config: LoopdConfig) -> Path:
    return Path(config.model.path)


def test_the_key_changes_with_whatever_the_probe_s_answer_depends_on(
    config: LoopdConfig, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(config)
    first = probe_key(model, 2)
    assert probe_key(model, 2) == first
    assert probe_key(model, 3) != first  # threads
    library.write_bytes(b"\x7fELF another build!")  # a rebuilt wheel
    rebuilt = probe_key(model, 2)
    assert rebuilt != first
    model.write_bytes(b"GGUF" + b"\1" * 65)  # another model
    assert probe_key(model, 2) != rebuilt
    now = probe_key(model, 2)
    monkeypatch.setattr(probe_cache, "_cpu", lambda: ["flags: avx2 fma"])  # another CPU
    assert probe_key(model, 2) != now


def test_a_same_size_rewrite_of_the_model_changes_the_key(
    config: LoopdConfig, library: Path
) -> None:
    model = model_of(config)
    before = probe_key(model, 2)
    stat = model.stat()
    model.write_bytes(b"GGUF" + b"\2" * 64)  # same size
    os.utime(model, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even the same mtime
    replaced = model.with_name("new.gguf")
    replaced.write_bytes(model.read_bytes())
    os.utime(replaced, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    replaced.replace(model)  # a new inode
    assert probe_key(model, 2) != before


def test_only_a_matching_whole_record_is_remembered(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert remembered(home, "k") is None
    remember(home, "k", 4, 0.8)
    assert remembered(home, "k") == (4, 0.8)
    assert remembered(home, "other") is None
    for damaged in (b"{", b"[]", b'{"key":"k","tokens":0,"seconds":1}', b'{"key":"k"}'):
        record_path(home).write_bytes(damaged)
        assert remembered(home, "k") is None


def test_serve_skips_the_child_only_for_a_remembered_pass(
    config: LoopdConfig, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children: list[list[str]] = []

    def run_probe(command: list[str], timeout_s: float = 0) -> ProbeResult:
        children.append(command)
        return ProbeResult(4, 0.5, None)

    monkeypatch.setattr(startup, "run_probe", run_probe)
    startup.probe(config, again=False)  # nothing remembered: the child runs
    assert len(children) == 1
    assert startup.probe(config, again=False) == ProbeResult(4, 0.0, None)  # remembered
    assert len(children) == 1
    startup.probe(config)  # `loopd probe` always runs it
    assert len(children) == 2
    library.write_bytes(b"\x7fELF rebuilt")
    startup.probe(config, again=False)  # the build changed: probe again
    assert len(children) == 3


def test_a_failed_probe_is_never_remembered(
    config: LoopdConfig, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        startup, "run_probe", lambda command, timeout_s=0: ProbeResult(0, 0.1, "crashed; see x")
    )
    with pytest.raises(StartupError, match="crashed"):
        startup.probe(config, again=False)
    assert not record_path(config.home).exists()


def test_the_tags_key_follows_the_model_the_build_and_the_code(
    config: LoopdConfig, library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(config)
    first = probe_cache.tags_key(model)
    assert probe_cache.tags_key(model) == first
    library.write_bytes(b"\x7fELF another tokenizer")
    rebuilt = probe_cache.tags_key(model)
    assert rebuilt != first
    model.write_bytes(b"GGUF" + b"\3" * 70)
    other_model = probe_cache.tags_key(model)
    assert other_model != rebuilt
    monkeypatch.setattr(probe_cache, "TAGS_CODE", ("boxmaker.loopd.markers", "no.such.module"))
    assert probe_cache.tags_key(model) != other_model  # the code it runs is part of the key
