"""The grants directory at every decision: each file's parse kept while the file is
unchanged, and an invalid set reported once.

I/O: lists the directory and stats every grant file at every call; reads (and
parses) a file only when the rules below say so; logs each distinct set of
problems once, with the runbook pointer, so a broken file does not flood the log
at every call. The places no grant may reach (`boxmaker.core.grants.reserved`) are
resolved once, when brokerd starts, with the real paths of its home, grants,
sockets and install prefix. There is no reload signal: a change applies to the
next call, exactly as if every file were read at every call.

The cache, rule by rule (checked in this order at every call):

    1  The directory is listed at every call, and the set is assembled from that
       listing at every call by `core.grants.loading.assemble_grant_set`, the
       assembly `bxctl grants check --dir` uses: a file added, removed or
       renamed, or the whole directory swapped for another, is seen at once, and
       any problem anywhere still makes the whole set invalid.
    2  Each `*.toml` name is stat'ed (following links, as reading does). Its key
       is (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns). A name that cannot
       be stat'ed is a problem of that file, like one that cannot be read.
    3  A kept parse (the grant, or the file's problems, with the bytes it came
       from and the key they were read under: `fstat` of the descriptor read) is
       used without reading only if the key is unchanged and the file is not racy.
    4  Racy (git's "racily clean" rule): a file whose mtime or ctime is not at
       least RACY_MARGIN_NS older than the moment just before its bytes were read
       could be written again within the same time stamp tick after that read
       and keep its key. Such a file is read again at every call until a read
       comes RACY_MARGIN_NS after its stamps; its bytes are compared with the
       kept ones and parsed again only if they differ.
    5  Anything else reads the file again, and parses it unless the bytes are
       the kept ones. A file that cannot be read is never kept: the next call
       tries again. Names no longer listed are forgotten.

Why that is enough: any write, truncate, chmod, chown or link count change sets
the file's ctime to the kernel's time, which nobody can set back (utime sets
mtime, and ctime to now); a rename onto the name, or a delete and create, gives
another inode, or the same number with a new ctime. A file last read at time t
with stamps older than t - RACY_MARGIN_NS can therefore only change by getting a
ctime of at least t - tick (tick: the file system's stamp granularity, a few ms
on ext4, 1 s on ext3, 2 s for FAT's mtime), which differs from the kept one as
long as tick <= RACY_MARGIN_NS.

Residual risk, accepted (each needs the owner's own user or root, and the audit
log's grant_sha256 still names the bytes each decision used):

    - stamps coarser than RACY_MARGIN_NS (no Linux file system brokerd would
      keep its grants on);
    - stamps from another machine's clock (NFS, some FUSE mounts) running more
      than RACY_MARGIN_NS behind brokerd's;
    - the system clock stepped back past a kept file's stamps, and the file then
      rewritten at the same size within the same tick as those stamps;
    - writes through a shared `mmap` kept mapped: Linux updates the stamps at the
      first write to a clean page, not at every write, so later writes to a
      still-dirty page change bytes without the stamps until writeback (no editor
      writes that way).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import boxmaker
from boxmaker.core.grants.loading import (
    CheckedFile,
    assemble_grant_set,
    parse_grant_file,
    unreadable,
)
from boxmaker.core.grants.model import GrantProblem, GrantSet
from boxmaker.core.grants.reserved import install_places, reserved_places
from boxmaker.core.home.layout import Home
from boxmaker.core.runbook import Runbook

log = logging.getLogger(__name__)

RACY_MARGIN_NS = 2_000_000_000  # FAT's 2 s mtime, the coarsest stamps in common use


def own_places(home: Path, sockets: Iterable[Path]) -> list[tuple[str, str]]:
    """brokerd's home, its audit log and its socket directories, for `GrantsDir`."""
    places = [("home", str(home)), ("audit log", str(Home(home).audit))]
    return places + [("sockets", str(socket.parent)) for socket in sockets]


@dataclass(frozen=True, slots=True)
class FileKey:
    """What `stat` says of a grant file that any change to it would change."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileKey:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class GrantFiles:
    """The grants directory's file operations: what the cache is keyed by and fed from.

    The one seam of `GrantsDir`'s I/O; tests put beside it a fake that counts
    reads, or one with a coarse file system's time stamps.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._prefix = os.path.join(directory, "")  # str joins: this runs at every call

    def names(self) -> list[str]:
        return os.listdir(self.directory)

    def key(self, name: str) -> FileKey:
        return FileKey.of(os.stat(self._prefix + name))

    def read(self, name: str) -> tuple[FileKey, bytes]:
        """The file's bytes, and the key of the very file they were read from."""
        with open(self._prefix + name, "rb") as file:
            return FileKey.of(os.fstat(file.fileno())), file.read()


@dataclass(frozen=True, slots=True)
class _Kept:
    """One file's parse, the bytes it came from, and when and under which key they were read."""

    key: FileKey
    racy: bool  # rule 4: read again at every call
    content: bytes
    checked: CheckedFile


def _kept(key: FileKey, read_at_ns: int, content: bytes, checked: CheckedFile) -> _Kept:
    racy = max(key.mtime_ns, key.ctime_ns) >= read_at_ns - RACY_MARGIN_NS
    return _Kept(key, racy, content, checked)


class GrantsDir:
    def __init__(
        self,
        directory: Path,
        places: Iterable[tuple[str, str]] = (),
        *,
        files: GrantFiles | None = None,
        now_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.directory = directory
        self.reserved = reserved_places(
            [
                ("grants", str(directory)),
                *places,
                *install_places(sys.prefix, boxmaker.__file__),
            ],
            os.path.realpath,
        )
        self._files = files if files is not None else GrantFiles(directory)
        self._now_ns = now_ns  # the clock the file system stamps with
        self._lock = threading.Lock()
        self._reported: tuple[GrantProblem, ...] = ()
        # name -> what was kept of it; replaced whole by each load, never changed in place,
        # so concurrent loads need the lock only to swap it (a stale swap costs a re-read)
        self._kept: dict[str, _Kept] = {}

    def load(self) -> GrantSet:
        with self._lock:
            before = self._kept
        after: dict[str, _Kept] = {}

        def check(raw_name: str, name: str) -> CheckedFile:
            try:
                key = self._files.key(raw_name)
            except OSError as exc:
                return unreadable(name, exc)
            kept = before.get(raw_name)
            if kept is None or kept.key != key or kept.racy:
                read_at = self._now_ns()
                try:
                    key, content = self._files.read(raw_name)
                except OSError as exc:
                    return unreadable(name, exc)
                if kept is not None and kept.content == content:
                    checked = kept.checked
                else:
                    checked = parse_grant_file(name, content, self.reserved)
                kept = _kept(key, read_at, content, checked)
            after[raw_name] = kept
            grant, problems = kept.checked
            return grant, list(problems)

        grants = assemble_grant_set(self._files.names, check, str(self.directory))
        with self._lock:
            self._kept = after
        self._report(grants.problems)
        return grants

    def _report(self, problems: tuple[GrantProblem, ...]) -> None:
        with self._lock:
            if problems == self._reported:
                return
            self._reported = problems
        if not problems:
            log.info("event=grants_valid directory=%s", self.directory)
            return
        for problem in problems:
            log.error("event=grant_problem %s", problem.render())
        log.error("event=grants_invalid calls are denied; %s", Runbook.GRANTS_INVALID.pointer)
