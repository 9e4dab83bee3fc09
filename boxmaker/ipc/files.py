"""Atomic, durable file replacement: every role's one way to rewrite a file.

I/O: the file system. `write_atomic` writes `<name>.tmp` beside the target (with
the final mode, never through a link planted there, truncating one a crash left
behind), fsyncs it, renames it over the target and fsyncs the directory: a reader
sees the old bytes or the new, never part of either, and once it returns the new
bytes survive a crash. On failure the temporary file is removed and the target is
as it was; the OSError propagates. Writers of one file must be serialised by the
caller (they share its temporary name).
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
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
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
