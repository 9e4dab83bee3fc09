"""Durable file writes: every role's one way to rewrite a file, and to append to one.

I/O: the file system. `write_atomic` writes `<name>.tmp` beside the target (with
the final mode, never through a link planted there, truncating one a crash left
behind), fsyncs it, renames it over the target and fsyncs the directory: a reader
sees the old bytes or the new, never part of either, and once it returns the new
bytes survive a crash. On failure the temporary file is removed and the target is
as it was; the OSError propagates. Writers of one file must be serialised by the
caller (they share its temporary name).

`append_durable` appends to a log: the bytes go in one `write` on an `O_APPEND`
descriptor (another only for the rest of a short write), then an fsync; a file
it creates (at `mode`) has its directory fsynced too, so once it returns the
bytes survive a crash. A link at the path is refused unless `follow` says
otherwise (a path the owner named). The OSError propagates; appenders to one
file must be serialised by the caller.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically and durably (see the module docstring)."""
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        try:
            os.fchmod(fd, mode)  # the umask may have taken bits away
            _write_synced(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (a create, a rename) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_durable(path: Path, data: bytes, mode: int = 0o600, *, follow: bool = False) -> None:
    """Append `data` to `path` and make it durable (see the module docstring)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
        created = True
    except FileExistsError:
        fd = os.open(path, flags)
        created = False
    try:
        _write_synced(fd, data)
    finally:
        os.close(fd)
    if created:
        fsync_directory(path.parent)


def _write_synced(fd: int, data: bytes) -> None:
    """All of `data` written to `fd` (another write only for the rest of a short one), then
    fsynced."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)
