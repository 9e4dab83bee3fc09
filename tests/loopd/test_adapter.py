"""`[model] adapter` and `loopd.adapter`: which LoRA adapter loopd applies, and which it refuses.

No model is loaded here: the adapters are written with gguf's own writer
(`support.lora_gguf`, as llama.cpp's convert_lora_to_gguf.py writes them),
for small made-up targets, and the hostile ones byte by byte. The shipped adapter is
not in the tree yet, so every test of it points `adapter.DATA` at a temporary folder
and sets the digest it must have (never the package's own file). The tests that load
the real embedded model with an adapter are in test_adapter_model.py.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from support.lora_gguf import write_lora

from boxmaker.core.errors import StartupError
from boxmaker.loopd import adapter as adapter_module
from boxmaker.loopd import startup
from boxmaker.loopd.adapter import (
    EMBEDDED_ADAPTER_NAME,
    POINTER,
    Adapter,
    AdapterFile,
    check_adapter,
    describe,
    resolve,
)
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.main import status_detail
from boxmaker.loopd.model import CPU_ONLY, EMBEDDED_NAME
from boxmaker.loopd.model_check import adapter_fact
from boxmaker.loopd.probe import REFUSED, ProbeResult, judge, probe_command
from boxmaker.loopd.probe_cache import probe_key

TARGETS = {f"blk.{i}.attn_q.weight": (8, 16) for i in range(2)}  # made up: never loaded


def lora(path: Path, **options: Any) -> Path:
    """A small LoRA adapter for a gemma3 model (options: `write_lora`'s)."""
    return write_lora(path, **{"architecture": "gemma3", "targets": TARGETS, **options})


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def config_of(tmp_path: Path, model: dict[str, Any]) -> LoopdConfig:
    path = tmp_path / "loopd.toml"
    home = tmp_path / "home"
    path.write_text(tomli_w.dumps({"paths": {"home": str(home)}, "model": model}))
    return load_config(path, {})


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package's data folder, made a temporary one holding a good adapter whose
    digest is the one expected: the shipped file as it will be."""
    data = tmp_path / "data"
    data.mkdir()
    file = lora(data / EMBEDDED_ADAPTER_NAME)
    monkeypatch.setattr(adapter_module, "DATA", data)
    monkeypatch.setattr(adapter_module, "EMBEDDED_ADAPTER_SHA256", sha256(file))
    return file


# rule 1: which file


@pytest.mark.parametrize(
    ("setting", "model", "expected"),
    [
        ("auto", "", "shipped"),
        ("auto", "/models/other.gguf", None),
        ("none", "", None),
        ("", "", None),
        ("none", "/models/other.gguf", None),
        ("/adapters/mine.gguf", "", "/adapters/mine.gguf"),
        ("/adapters/mine.gguf", "/models/other.gguf", "/adapters/mine.gguf"),
    ],
    ids=[
        "auto-embedded",
        "auto-other-model",
        "none",
        "empty",
        "none-other-model",
        "path-embedded",
        "path-other-model",
    ],
)
def test_the_setting_resolves_to_the_shipped_adapter_none_or_the_owners_file(
    setting: str, model: str, expected: str | None
) -> None:
    resolved = resolve(setting, model)
    if expected is None:
        assert resolved is None
    elif expected == "shipped":
        assert resolved == AdapterFile(
            adapter_module.DATA / EMBEDDED_ADAPTER_NAME, adapter_module.EMBEDDED_ADAPTER_SHA256
        )
        assert resolved.path.parent == Path(adapter_module.__file__).parent / "data"
    else:
        assert resolved == AdapterFile(Path(expected), None)  # no digest: the owner's


def test_the_default_is_auto_the_shipped_adapter_for_the_embedded_model_alone(
    tmp_path: Path,
) -> None:
    assert load_config(None, {}).model.adapter == "auto"
    embedded = config_of(tmp_path, {})
    file = startup.adapter_file(embedded)
    assert file is not None
    assert file.path.name == "embedded-lora.gguf"
    assert file.sha256 == adapter_module.EMBEDDED_ADAPTER_SHA256
    assert startup.adapter_file(config_of(tmp_path, {"path": "/models/other.gguf"})) is None
    assert startup.adapter_file(config_of(tmp_path, {"adapter": "none"})) is None


# rules 2 to 4: what passes


def test_an_adapter_made_for_the_models_architecture_passes_and_is_named_short(
    tmp_path: Path,
) -> None:
    file = lora(tmp_path / "mine.gguf")
    checked = check_adapter(AdapterFile(file, None), "gemma3")
    assert (checked.path, checked.sha256, checked.architecture) == (file, sha256(file), "gemma3")
    assert not checked.shipped
    assert describe(checked) == f"mine.gguf sha256 {sha256(file)[:12]}"
    assert describe(None) == "none"


def test_the_shipped_adapter_passes_with_the_digest_this_boxmaker_ships(shipped: Path) -> None:
    file = resolve("auto", "")
    assert file is not None
    checked = check_adapter(file, "gemma3")
    assert checked.shipped
    assert (checked.path, checked.sha256) == (shipped, sha256(shipped))


def test_an_adapter_is_built_only_by_the_check(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="built only by"):
        Adapter(tmp_path / "a.gguf", "0" * 64, "gemma3", False)


# rule 2: the shipped adapter fails closed


def test_the_shipped_adapter_with_another_digest_is_refused_in_one_line(
    shipped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "EMBEDDED_ADAPTER_SHA256", "ab" * 32)
    file = resolve("auto", "")
    assert file is not None
    with pytest.raises(StartupError) as raised:
        check_adapter(file, "gemma3")
    assert str(raised.value) == (
        f"the embedded model's adapter {shipped} has sha256 {sha256(shipped)[:12]}, not the "
        "abababababab this boxmaker ships (damaged or replaced): reinstall boxmaker, or set "
        '[model] adapter = "none" to run the model without it; '
        "see runbook.md#loopd-adapter-refused"
    )


def test_a_shipped_adapter_changed_by_one_byte_is_refused(shipped: Path) -> None:
    data = bytearray(shipped.read_bytes())
    data[-1] ^= 1  # a weight, not the header: it would still load
    shipped.write_bytes(bytes(data))
    file = resolve("auto", "")
    assert file is not None
    with pytest.raises(StartupError, match="this boxmaker ships"):
        check_adapter(file, "gemma3")


def test_a_missing_shipped_adapter_is_refused_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "DATA", tmp_path / "empty")
    file = resolve("auto", "")
    assert file is not None
    with pytest.raises(StartupError) as raised:
        check_adapter(file, "gemma3")
    assert str(raised.value) == (
        f"the embedded model's adapter {tmp_path}/empty/embedded-lora.gguf does not exist "
        '(this install lacks it): reinstall boxmaker, or set [model] adapter = "none" to run '
        "the model without it; see runbook.md#loopd-adapter-refused"
    )


def fake_embedded(tmp_path: Path) -> LoopdConfig:
    """A config of the embedded model whose file is a stand-in already in place under
    home (so nothing is assembled): it is never loaded by these tests."""
    config = config_of(tmp_path, {})
    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    (models / EMBEDDED_NAME).write_bytes(b"GGUF stand-in, never loaded")
    return config


def test_loopd_refuses_the_embedded_model_without_its_adapter_before_any_probe_or_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(adapter_module, "DATA", tmp_path / "empty")
    children: list[list[str]] = []

    def run_probe(command: list[str], timeout_s: float = 0) -> ProbeResult:
        children.append(command)
        return ProbeResult(4, 0.1, None, metadata={"general.architecture": "gemma3"})

    monkeypatch.setattr(startup, "run_probe", run_probe)
    config = fake_embedded(tmp_path)
    for start in (startup.probe, startup.load_model, startup.model_adapter):
        with pytest.raises(
            StartupError, match=r"does not exist \(this install lacks it\)"
        ) as raised:
            start(config)
        assert "\n" not in str(raised.value)
    assert children == []  # refused before any child ran, and before any load
    # the owner's word turns it off: the probe runs, with no adapter given
    off = config.model_copy(update={"model": config.model.model_copy(update={"adapter": "none"})})
    startup.probe(off)
    (command,) = children
    assert command[-5] == str(tmp_path / "home" / "models" / EMBEDDED_NAME)
    assert startup.model_adapter(off) is None


def test_the_probe_child_is_given_the_adapter_and_the_digest_it_must_have(
    tmp_path: Path, shipped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    children: list[list[str]] = []

    def run_probe(command: list[str], timeout_s: float = 0) -> ProbeResult:
        children.append(command)
        return ProbeResult(4, 0.1, None, metadata={"general.architecture": "gemma3"})

    monkeypatch.setattr(startup, "run_probe", run_probe)
    config = fake_embedded(tmp_path)
    startup.probe(config)
    assert children[0][-2:] == [str(shipped), sha256(shipped)]
    mine = lora(tmp_path / "mine.gguf")
    owners = config.model_copy(
        update={"model": config.model.model_copy(update={"adapter": str(mine)})}
    )
    startup.probe(owners)
    assert children[1][-2:] == [str(mine), ""]  # the owner's: no digest to hold it to
    checked = startup.model_adapter(owners, {"general.architecture": "gemma3"})
    assert checked is not None
    assert checked.sha256 == sha256(mine)
    with pytest.raises(StartupError, match="made for the architecture 'gemma3', and the model"):
        startup.model_adapter(owners, {"general.architecture": "llama"})


# rule 3: what is refused, each in one line


def header(keys: int, tensors: int = 0, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, tensors, keys)


def key(name: str, kind: int) -> bytes:
    return struct.pack("<Q", len(name)) + name.encode() + struct.pack("<I", kind)


def string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def written(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    return path


REFUSALS: dict[str, tuple[Any, str]] = {
    "missing": (lambda d: d / "nothing-here.gguf", "does not exist"),
    "a-folder": (lambda d: d, "is not a file"),
    "not-gguf": (lambda d: written(d, b"PK\x03\x04 a zip"), "it does not start with GGUF"),
    "empty": (lambda d: written(d, b""), "it ends inside its metadata"),
    "gguf-v1": (lambda d: written(d, header(0, version=1)), "GGUF version 1, not 2 or 3"),
    "truncated": (
        lambda d: written(d, lora(d / "whole.gguf").read_bytes()[:40]),
        "it ends inside its metadata",
    ),
    "a-model": (
        lambda d: lora(d / "model.gguf", general_type="model"),
        "is not a LoRA adapter (its general.type is 'model', not 'adapter')",
    ),
    "not-lora": (
        lambda d: lora(d / "cvec.gguf", adapter_type="control_vector"),
        "is not a LoRA adapter (its adapter.type is 'control_vector', not 'lora')",
    ),
    "no-type": (
        lambda d: written(d, header(1) + key("general.architecture", 8) + string("gemma3")),
        "is not a LoRA adapter (its general.type is missing, not 'adapter')",
    ),
    "another-architecture": (
        lambda d: lora(d / "llama.gguf", architecture="llama"),
        "was made for the architecture 'llama', and the model is 'gemma3'",
    ),
    "no-architecture": (
        lambda d: written(
            d,
            header(2)
            + key("general.type", 8)
            + string("adapter")
            + key("adapter.type", 8)
            + string("lora"),
        ),
        "names no architecture (its general.architecture is missing)",
    ),
    "too-many-keys": (lambda d: written(d, header(2**62)), "more than the 1024 loopd reads"),
    "a-huge-string": (
        lambda d: written(d, header(1) + struct.pack("<Q", 2**62)),
        "longer than the 1048576 bytes loopd reads",
    ),
    "a-huge-string-array": (  # 2^60 empty strings: the byte budget ends it, not the count
        lambda d: written(
            d, header(1) + key("x", 9) + struct.pack("<IQ", 8, 2**60) + b"\0" * (1 << 21)
        ),
        "longer than the 1048576 bytes loopd reads",
    ),
    "a-huge-number-array": (
        lambda d: written(d, header(1) + key("x", 9) + struct.pack("<IQ", 10, 2**61)),
        "longer than the 1048576 bytes loopd reads",
    ),
    "an-array-of-arrays": (
        lambda d: written(d, header(1) + key("x", 9) + struct.pack("<IQ", 9, 1)),
        "an array of type 9",
    ),
    "an-unknown-type": (lambda d: written(d, header(1) + key("x", 99)), "unknown type 99"),
    "a-key-twice": (
        lambda d: written(
            d, header(2) + key("general.name", 8) + string("x") + key("general.name", 8)
        ),
        "it holds the key 'general.name' twice",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_an_adapter_loopd_cannot_use_is_refused_in_one_line_with_its_pointer(
    tmp_path: Path, case: str
) -> None:
    make, said = REFUSALS[case]
    path = make(tmp_path)
    with pytest.raises(StartupError) as raised:
        check_adapter(AdapterFile(path, None), "gemma3")
    line = str(raised.value)
    assert line.startswith(f"the adapter {path} "), line
    assert said in line, line
    assert line.endswith(
        "name a LoRA adapter GGUF file made for this model in [model] adapter, or set it to "
        f'"none"; {POINTER}'
    )
    assert "\n" not in line


def test_a_value_from_the_file_is_escaped_where_it_is_said(tmp_path: Path) -> None:
    path = lora(tmp_path / "odd.gguf", general_type="adapter\x1b[2J\nmodel")
    with pytest.raises(StartupError) as raised:
        check_adapter(AdapterFile(path, None), "gemma3")
    line = str(raised.value)
    assert "\x1b" not in line
    assert "\n" not in line
    assert "its general.type is 'adapter\\x1b[2J\\nmodel'" in line


def test_the_probe_childs_refusal_is_read_back_whole() -> None:
    refusal = f"the adapter /{'long/' * 80}x.gguf was made for the architecture 'llama'; {POINTER}"
    result = judge(REFUSED, "", f"noise\nrefused: {refusal}\n", 1.0)
    assert result.problem == refusal  # not cut at 300 characters, so the pointer stays


# the probe cache, the probe child's command, and where the adapter is named


def test_the_probe_cache_key_names_the_adapter(tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    mine = lora(tmp_path / "mine.gguf")
    none = probe_key(model, 2)
    with_it = probe_key(model, 2, "", mine)
    assert with_it != none
    assert probe_key(model, 2, "", mine) == with_it
    lora(mine, seed=1)  # another adapter at the same path
    assert probe_key(model, 2, "", mine) != with_it


def test_the_probe_childs_command_carries_the_adapter_only_where_there_is_one() -> None:
    plain = probe_command(Path("/m.gguf"), 2, 0, 4096, CPU_ONLY)
    shipped = probe_command(
        Path("/m.gguf"), 2, 0, 4096, CPU_ONLY, AdapterFile(Path("/a.gguf"), "ab" * 32)
    )
    assert shipped == [*plain, "/a.gguf", "ab" * 32]
    owners = probe_command(Path("/m.gguf"), 2, 0, 4096, CPU_ONLY, AdapterFile(Path("/a"), None))
    assert owners[-2:] == ["/a", ""]


def test_model_check_names_the_adapter_or_says_the_problem(
    tmp_path: Path, shipped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded = config_of(tmp_path, {})
    assert (
        adapter_fact(embedded, "gemma3")
        == f"adapter: {EMBEDDED_ADAPTER_NAME} sha256 " + (sha256(shipped)[:12])
    )
    assert adapter_fact(config_of(tmp_path, {"path": "/other.gguf"}), "llama") == "adapter: none"
    line = adapter_fact(embedded, "llama")
    assert line.startswith("problem: the embedded model's adapter ")
    assert line.endswith(POINTER)
    monkeypatch.setattr(adapter_module, "EMBEDDED_ADAPTER_SHA256", "0" * 64)
    assert "this boxmaker ships" in adapter_fact(embedded, "gemma3")


def test_status_names_the_adapter_beside_the_model(tmp_path: Path) -> None:
    file = lora(tmp_path / "mine.gguf")
    checked = check_adapter(AdapterFile(file, None), "gemma3")
    config = config_of(tmp_path, {"adapter": str(file)})
    assert status_detail(config, checked, "gemma", "backend CPU") == (
        f"model embedded, adapter mine.gguf sha256 {sha256(file)[:12]}, format gemma; backend CPU"
    )
    other = config_of(tmp_path, {"path": "/m.gguf"})
    assert status_detail(other, None, "chatml", "x") == (
        "model /m.gguf, adapter none, format chatml; x"
    )
    served = config_of(tmp_path, {"backend": "llama-server", "server": "http://127.0.0.1:8080"})
    assert status_detail(served, None, "gemma", "backend=llama-server") == (
        "model embedded, adapter the server's, format gemma; backend=llama-server"
    )
