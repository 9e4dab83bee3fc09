"""write_atomic: the new bytes or the old, never a mix; no link followed; nothing left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from boxmaker.ipc.files import write_atomic


def test_the_file_is_replaced_whole_with_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")
    old = os.umask(0o077)
    try:
        write_atomic(target, b"new", 0o640)
    finally:
        os.umask(old)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"keep")
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic links"):  # ELOOP: O_NOFOLLOW refused it
        write_atomic(target, b"new")
    assert elsewhere.read_bytes() == b"keep"
    assert not target.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_temporary_left_by_a_crash_is_truncated_and_replaced(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    (tmp_path / "state.json.tmp").write_bytes(b"half of an earlier wri")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert not (tmp_path / "state.json.tmp").exists()
