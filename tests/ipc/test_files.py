"""The durable writes of ipc/files.

write_atomic: the new bytes or the old, never a mix; no link followed; nothing left
behind. append_durable: appended whole and fsynced, a new file's directory too; a
link followed only when asked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from boxmaker.ipc.files import append_durable, write_atomic


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


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each fsync from now on syncs: "dir" or "file"."""
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def test_an_append_creates_the_file_with_its_mode_and_syncs_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "log.jsonl"
    synced = _synced(monkeypatch)
    append_durable(log, b"one\n")
    assert synced == ["file", "dir"]
    append_durable(log, b"two\n")
    assert synced == ["file", "dir", "file"]  # the file was there: no directory sync
    assert log.read_bytes() == b"one\ntwo\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_short_write_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "log.jsonl"
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    append_durable(log, b"a line of some length\n")
    assert log.read_bytes() == b"a line of some length\n"


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_link_at_the_path_is_refused(tmp_path: Path, dangling: bool) -> None:
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.write_bytes(b"keep\n")
    log = tmp_path / "log.jsonl"
    log.symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic links"):  # ELOOP: O_NOFOLLOW refused it
        append_durable(log, b"new\n")
    assert elsewhere.exists() is not dangling
    assert dangling or elsewhere.read_bytes() == b"keep\n"


def test_a_link_is_followed_when_asked(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"keep\n")
    log = tmp_path / "log.jsonl"
    log.symlink_to(elsewhere)
    append_durable(log, b"new\n", follow=True)
    assert elsewhere.read_bytes() == b"keep\nnew\n"
