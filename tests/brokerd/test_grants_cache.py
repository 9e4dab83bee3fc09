"""brokerd's grant cache: an unchanged set is not read again, and any change is seen
by the very next call, exactly as if every file were read at every call.

`GrantsDir` runs over the real file system through a `GrantFiles` that counts what
it does, or over one whose time stamps the test sets (a file system so coarse that
an edit keeps the file's key: only the racy rule can see it). The clock the cache
compares stamps with is passed in: "late" means the load comes long after the
files were written, so nothing is racy and only the key can show a change. The
last tests go through brokerd's socket with the real clock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.grants_dir import RACY_MARGIN_NS, FileKey, GrantFiles, GrantsDir
from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import AllowedRecord, DeniedRecord, DenyReason
from boxmaker.core.grants.model import GrantSet, Mode
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.wire.broker import DeniedResponse, ResultResponse, ToolRequest
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.waiting import wait_until

SECOND_NS = 1_000_000_000


class CountingFiles(GrantFiles):
    """The real file operations, counted."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.listings = 0
        self.stats = 0
        self.reads = 0

    def names(self) -> list[str]:
        self.listings += 1
        return super().names()

    def key(self, name: str) -> FileKey:
        self.stats += 1
        return super().key(name)

    def read(self, name: str) -> tuple[FileKey, bytes]:
        self.reads += 1
        return super().read(name)


class FrozenStampFiles(CountingFiles):
    """The real files, but every time stamp is `stamp`: a file system whose clock never
    leaves one tick, so an edit that keeps the size and the inode keeps the key."""

    def __init__(self, directory: Path, stamp: int) -> None:
        super().__init__(directory)
        self.stamp = stamp

    def _frozen(self, key: FileKey) -> FileKey:
        return FileKey(key.dev, key.ino, key.size, self.stamp, self.stamp)

    def key(self, name: str) -> FileKey:
        return self._frozen(super().key(name))

    def read(self, name: str) -> tuple[FileKey, bytes]:
        key, content = super().read(name)
        return self._frozen(key), content


def late() -> int:
    """A clock ten margins ahead: every file on disk looks long unchanged."""
    return time.time_ns() + 10 * RACY_MARGIN_NS


def grants_dir(
    directory: Path, now_ns: Callable[[], int] = late
) -> tuple[GrantsDir, CountingFiles]:
    files = CountingFiles(directory)
    return GrantsDir(directory, files=files, now_ns=now_ns), files


def grant(directory: Path, grant_id: str, mode: str = "auto", where: str = "") -> Path:
    """A read_file grant over `/srv/<where or grant_id>`, written now."""
    return write_grant(
        directory, grant_id, tool="read_file", mode=mode, paths=[f"/srv/{where or grant_id}"]
    )


def modes(grants: GrantSet) -> dict[str, Mode]:
    assert grants.valid, grants.problems
    return {g.id: g.mode for g in grants.grants}


def edit_in_place(path: Path, old: str, new: str, *, keep_mtime: bool) -> None:
    """Replace `old` by `new` (same length) in place: same inode, same size; with
    `keep_mtime`, the mtime is then set back to what it was, to the nanosecond."""
    assert len(old) == len(new)
    before = os.stat(path)
    text = path.read_text()
    assert old in text
    with open(path, "r+b") as file:  # no truncation: the size never changes
        file.write(text.replace(old, new).encode())
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    if keep_mtime:
        assert after.st_mtime_ns == before.st_mtime_ns


def next_tick(directory: Path, since: Path) -> None:
    """Wait until the file system stamps a change later than `since`'s ctime (a few ms
    at most), so that an edit now cannot share its tick."""
    probe = directory / "probe"
    stamp = os.stat(since).st_ctime_ns

    def moved() -> bool:
        probe.write_bytes(b"x")
        return os.stat(probe).st_ctime_ns > stamp

    wait_until(moved, 5.0, "a later time stamp")
    probe.unlink()


# --- the cost of an unchanged set ----------------------------------------------------


def test_an_unchanged_set_costs_a_listing_and_a_stat_per_file(tmp_path: Path) -> None:
    for name in ("a-read", "b-read", "c-read"):
        grant(tmp_path, name)
    (tmp_path / "README").write_text("not a grant")
    loader, files = grants_dir(tmp_path)
    first = loader.load()
    assert (files.listings, files.stats, files.reads) == (1, 3, 3)
    for n in range(2, 6):
        again = loader.load()
        assert (files.listings, files.stats, files.reads) == (n, 3 * n, 3)
        assert again == first
        # the kept parse itself, not a new one of the same bytes
        assert all(a is b for a, b in zip(again.grants, first.grants, strict=True))


def test_a_kept_invalid_file_keeps_the_set_invalid(tmp_path: Path) -> None:
    grant(tmp_path, "a-read")
    (tmp_path / "b-bad.toml").write_text('tool = "read_file"\nmode = "sometimes"\n')
    loader, files = grants_dir(tmp_path)
    first = loader.load()
    assert not first.valid
    for _ in range(3):
        assert loader.load().problems == first.problems
    assert files.reads == 2


def test_a_grant_of_a_reserved_place_stays_refused_when_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_grant(tmp_path / "grants", "home-read", tool="read_file", paths=[str(home / "broker")])
    files = CountingFiles(tmp_path / "grants")
    loader = GrantsDir(tmp_path / "grants", [("home", str(home))], files=files, now_ns=late)
    for _ in range(3):
        (problem,) = loader.load().problems
        assert "reaches boxmaker's own home" in problem.problem
    assert files.reads == 1


# --- every change is seen at the next load -----------------------------------------


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["plain", "mtime-set-back"])
def test_an_edit_of_the_same_size_is_seen_by_its_ctime(tmp_path: Path, keep_mtime: bool) -> None:
    path = grant(tmp_path, "a-read")
    grant(tmp_path, "b-read")
    loader, files = grants_dir(tmp_path)  # late: only the key can show the edit
    assert modes(loader.load()) == {"a-read": Mode.AUTO, "b-read": Mode.AUTO}
    next_tick(tmp_path, path)
    before = files.key("a-read.toml")
    edit_in_place(path, 'mode = "auto"', 'mode = "deny"', keep_mtime=keep_mtime)
    after = files.key("a-read.toml")
    assert after.ctime_ns != before.ctime_ns
    if keep_mtime:
        assert after == FileKey(
            before.dev, before.ino, before.size, before.mtime_ns, after.ctime_ns
        )
    assert modes(loader.load()) == {"a-read": Mode.DENY, "b-read": Mode.AUTO}
    assert files.reads == 3  # a-read twice, b-read once


def test_an_edit_that_keeps_the_key_is_seen_through_the_racy_rule(tmp_path: Path) -> None:
    path = grant(tmp_path, "a-read")
    stamp = time.time_ns()
    files = FrozenStampFiles(tmp_path, stamp)
    clock = [stamp + SECOND_NS]  # read one second after the stamps: racy
    loader = GrantsDir(tmp_path, files=files, now_ns=lambda: clock[0])
    assert modes(loader.load()) == {"a-read": Mode.AUTO}
    before = files.key("a-read.toml")
    edit_in_place(path, 'mode = "auto"', 'mode = "deny"', keep_mtime=True)
    assert files.key("a-read.toml") == before  # nothing in the key shows the edit
    assert modes(loader.load()) == {"a-read": Mode.DENY}
    assert files.reads == 2


def test_a_racy_file_is_read_again_until_a_read_comes_a_margin_after_its_stamps(
    tmp_path: Path,
) -> None:
    grant(tmp_path, "a-read")
    stamp = time.time_ns()
    files = FrozenStampFiles(tmp_path, stamp)
    clock = [stamp]
    loader = GrantsDir(tmp_path, files=files, now_ns=lambda: clock[0])
    first = loader.load()
    reads = []
    for now in (stamp, stamp + SECOND_NS, stamp + RACY_MARGIN_NS, stamp + RACY_MARGIN_NS + 1):
        clock[0] = now
        again = loader.load()
        assert again.grants[0] is first.grants[0]  # read again, but the same bytes: no parse
        reads.append(files.reads)
    # read at stamp + margin: still racy; read at stamp + margin + 1: trusted from then on
    assert reads == [2, 3, 4, 5]
    for _ in range(3):
        assert loader.load().grants[0] is first.grants[0]
    assert files.reads == 5


def test_a_file_replaced_by_rename_is_seen(tmp_path: Path) -> None:
    path = grant(tmp_path, "a-read")
    loader, _ = grants_dir(tmp_path)
    assert modes(loader.load()) == {"a-read": Mode.AUTO}
    before = os.stat(path)
    replacement = tmp_path / "a-read.new"
    replacement.write_text(path.read_text().replace('mode = "auto"', 'mode = "deny"'))
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.rename(replacement, path)
    assert os.stat(path).st_size == before.st_size
    assert modes(loader.load()) == {"a-read": Mode.DENY}


def test_a_file_added_and_a_file_removed_are_seen(tmp_path: Path) -> None:
    grant(tmp_path, "a-read")
    loader, _ = grants_dir(tmp_path)
    assert set(modes(loader.load())) == {"a-read"}
    grant(tmp_path, "b-read")
    assert set(modes(loader.load())) == {"a-read", "b-read"}
    (tmp_path / "a-read.toml").unlink()
    assert set(modes(loader.load())) == {"b-read"}
    (tmp_path / "b-read.toml").rename(tmp_path / "b-read.toml.off")  # no longer a grant
    assert modes(loader.load()) == {}


def _directory_instead(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _dangling_link_instead(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "gone")


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        pytest.param(_directory_instead, "cannot be read: Is a directory", id="a-directory"),
        pytest.param(
            _dangling_link_instead, "cannot be read: No such file or directory", id="dangling-link"
        ),
    ],
)
def test_a_file_made_unreadable_makes_the_set_invalid_until_it_is_back(
    tmp_path: Path, spoil: Callable[[Path], None], problem: str
) -> None:
    path = grant(tmp_path, "a-read")
    text = path.read_text()
    grant(tmp_path, "b-read")
    loader, _ = grants_dir(tmp_path)
    assert loader.load().valid
    spoil(path)
    for _ in range(2):  # a failure is never kept: still a problem, tried again each time
        spoilt = loader.load()
        assert [(p.file, p.problem) for p in spoilt.problems] == [("a-read.toml", problem)]
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    path.write_text(text)
    assert set(modes(loader.load())) == {"a-read", "b-read"}


def test_a_directory_swapped_for_another_is_seen(tmp_path: Path) -> None:
    live, other = tmp_path / "grants", tmp_path / "other"
    grant(live, "a-read")
    grant(other, "a-read", mode="deny")  # same name, same size, other bytes
    grant(other, "z-read")
    loader, _ = grants_dir(live)
    assert modes(loader.load()) == {"a-read": Mode.AUTO}
    live.rename(tmp_path / "old")
    other.rename(live)
    assert modes(loader.load()) == {"a-read": Mode.DENY, "z-read": Mode.AUTO}
    live.rename(tmp_path / "gone")
    (gone,) = loader.load().problems
    assert gone.file == str(live)
    assert "the grants directory cannot be read" in gone.problem


def test_one_grant_becoming_invalid_makes_the_whole_set_invalid_at_once(tmp_path: Path) -> None:
    path = grant(tmp_path, "b-read")
    grant(tmp_path, "a-read")
    grant(tmp_path, "c-read")
    loader, files = grants_dir(tmp_path)
    assert len(loader.load().grants) == 3
    next_tick(tmp_path, path)
    edit_in_place(path, 'mode = "auto"', 'mode = "oops"', keep_mtime=True)
    broken = loader.load()
    assert not broken.valid
    assert [p.file for p in broken.problems] == ["b-read.toml"]
    assert files.reads == 4
    edit_in_place(path, 'mode = "oops"', 'mode = "auto"', keep_mtime=True)
    assert len(loader.load().grants) == 3


# --- through brokerd ----------------------------------------------------------------


def read_request(path: Path, call: str) -> ToolRequest:
    arguments = orjson.dumps({"path": str(path)}).decode()
    return ToolRequest(session="chat-1", call=call, tool="read_file", arguments=arguments)


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["plain", "mtime-set-back"])
def test_a_grant_edited_between_two_requests_in_the_same_second_is_seen_by_the_next(
    tmp_path: Path, keep_mtime: bool
) -> None:
    notes = tmp_path / "notes"
    path = write_grant(tmp_path / "grants", "notes-read", tool="read_file", paths=[str(notes)])
    with running_brokerd(tmp_path) as b:
        first = b.tool(read_request(notes / "a.md", "c1"), "c1")[-1].message
        assert isinstance(first, ResultResponse)
        edit_in_place(path, 'mode = "auto"', 'mode = "deny"', keep_mtime=keep_mtime)
        second = b.tool(read_request(notes / "a.md", "c2"), "c2")[-1].message
        assert second == DeniedResponse(reason=DenyReason.DENIED_BY_GRANT)
        assert b.runtime.count == 1
        decisions = [r.event for r in b.records() if isinstance(r.event, DecisionEvent)]
    assert [d.outcome for d in decisions] == [
        AllowedRecord(),
        DeniedRecord(reason=DenyReason.DENIED_BY_GRANT),
    ]
    # the second decision names the bytes it was made with
    assert decisions[1].grant_sha256 == sha256_hex(path.read_bytes())
    assert decisions[0].grant_sha256 != decisions[1].grant_sha256
