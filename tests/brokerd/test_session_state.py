"""Session state files: defaults, atomic durable writes, and every way a file is refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from boxmaker.brokerd.session_state import SessionStore, StateUnreadableError
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import SessionState
from boxmaker.core.wire.broker_admin import UntrustedBy


def test_a_session_with_no_file_is_private_and_trusted(tmp_path: Path) -> None:
    assert SessionStore(tmp_path).read("chat-1") == SessionState(DataClass.PRIVATE, False)


def test_write_then_read(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.write("chat-1", SessionState(DataClass.SECRET, True))
    assert store.read("chat-1") == SessionState(DataClass.SECRET, True)
    path = tmp_path / "broker" / "sessions" / "chat-1.json"
    assert path.read_bytes() == b'{"taint":"secret","untrusted":true}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.with_name("chat-1.json.tmp").exists()


def test_untrusted_by_is_written_and_read_back(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    by = UntrustedBy(session="chat-1", call="c3", tool="http_fetch")
    store.write("chat-1", SessionState(DataClass.PRIVATE, True, by))
    assert store.read("chat-1") == SessionState(DataClass.PRIVATE, True, by)
    path = tmp_path / "broker" / "sessions" / "chat-1.json"
    assert path.read_bytes() == (
        b'{"taint":"private","untrusted":true,'
        b'"untrusted_by":{"session":"chat-1","call":"c3","tool":"http_fetch"}}'
    )


def test_a_file_written_before_untrusted_by_was_kept_still_reads(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.directory.mkdir(parents=True)
    (store.directory / "s.json").write_bytes(b'{"taint":"secret","untrusted":true}')
    assert store.read("s") == SessionState(DataClass.SECRET, True, None)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b'{"taint":"public","untrusted":false}',
        b'{"taint":"private"}',
        b'{"taint":"private","untrusted":false,"extra":1}',
        b'{"taint":"top","untrusted":false}',
        b'{"taint":"private","untrusted":"no"}',
        b'{"taint":"private","untrusted":true,"untrusted_by":{"session":"s","call":"c"}}',
        b'{"taint":"private","untrusted":true,"untrusted_by":"c3"}',
    ],
    ids=[
        "empty",
        "not-json",
        "public",
        "missing-field",
        "unknown-field",
        "unknown-class",
        "not-bool",
        "untrusted-by-without-tool",
        "untrusted-by-not-an-object",
    ],
)
def test_a_damaged_file_is_unreadable(tmp_path: Path, content: bytes) -> None:
    store = SessionStore(tmp_path)
    store.directory.mkdir(parents=True)
    (store.directory / "s.json").write_bytes(content)
    with pytest.raises(StateUnreadableError):
        store.read("s")


def test_a_file_that_cannot_be_read_is_unreadable(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    (store.directory / "s.json").mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(StateUnreadableError):
        store.read("s")


@pytest.mark.parametrize("session", ["../escape", "a/b", ".hidden", "", "x" * 129])
def test_a_session_id_never_becomes_a_path(tmp_path: Path, session: str) -> None:
    store = SessionStore(tmp_path)
    with pytest.raises(StateUnreadableError):
        store.read(session)
    with pytest.raises(StateUnreadableError):
        store.write(session, SessionState())
    assert not (tmp_path / "escape").exists()
