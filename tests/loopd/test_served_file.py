"""The served model's file held to loopd's own where both lie on this machine
(`boxmaker.loopd.served_file`): each case that is compared, and each that cannot be."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from boxmaker.loopd.served_file import compare_served_file, is_loopback


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    return path


def test_the_same_path_and_a_hard_link_are_the_same_file(model: Path, tmp_path: Path) -> None:
    assert compare_served_file(model, str(model), loopback=True).how == "same-file"
    linked = tmp_path / "linked.gguf"
    os.link(model, linked)
    found = compare_served_file(model, str(linked), loopback=True)
    assert (found.same, found.how) == (True, "same-file")


def test_a_copy_is_held_to_its_sha256(model: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(model.read_bytes())
    found = compare_served_file(model, str(copy), loopback=True)
    assert found.same is True
    assert found.how.startswith("same-sha256(")


def test_an_edited_copy_of_the_same_size_is_another_file(model: Path, tmp_path: Path) -> None:
    data = bytearray(model.read_bytes())
    data[-1] ^= 0x01
    edited = tmp_path / "edited.gguf"
    edited.write_bytes(data)
    found = compare_served_file(model, str(edited), loopback=True)
    assert found.same is False
    assert found.how.startswith(f"{edited} has sha256 ")


def test_a_file_of_another_size_is_another_file(model: Path, tmp_path: Path) -> None:
    longer = tmp_path / "longer.gguf"
    longer.write_bytes(model.read_bytes() + b"\0")
    found = compare_served_file(model, str(longer), loopback=True)
    assert found.same is False
    assert "bytes, the model file" in found.how


@pytest.mark.parametrize(
    ("named", "loopback", "why"),
    [
        ("/anywhere/model.gguf", False, "not-compared(remote-server)"),
        (None, True, "not-compared(no-path-given)"),
        ("", True, "not-compared(no-path-given)"),
        (7, True, "not-compared(no-path-given)"),
        ("models/model.gguf", True, "not-compared(relative-path)"),
        ("/no/such/model.gguf", True, "not-compared(path-not-here)"),
    ],
)
def test_what_cannot_be_compared_says_why(
    model: Path, named: object, loopback: bool, why: str
) -> None:
    found = compare_served_file(model, named, loopback=loopback)
    assert (found.same, found.how) == (None, why)


def test_a_served_folder_is_not_held_to_the_file(model: Path, tmp_path: Path) -> None:
    # vLLM's `root` when it serves Hugging Face weights from a folder
    folder = tmp_path / "weights"
    folder.mkdir()
    found = compare_served_file(model, str(folder), loopback=True)
    assert (found.same, found.how) == (None, "not-compared(not-a-file)")


def test_a_remote_servers_path_is_not_opened_even_when_it_exists_here(model: Path) -> None:
    # a path on another machine may name an unrelated file here
    assert compare_served_file(model, str(model), loopback=False).same is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.1", True),
        ("::1", True),
        ("10.0.0.2", False),
        ("example.org", False),
        ("0.0.0.0", False),  # noqa: S104 (a host looked at, not bound)
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
