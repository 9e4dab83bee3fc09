"""The served model's file against loopd's own, where both lie on this machine (issue 41).

I/O: stats the two files, and reads both through sha256 when they are two files of one
size. No server API gives a model file's hash (llama-server's `/v1/models` has a
`digest` field that is always empty), so the file is compared only where loopd can
open it itself:

1. **The server is on loopback** (`localhost`, 127.0.0.0/8, ::1). A remote server's
   path names a file on its own machine: not compared.
2. **The server names an absolute path**: llama-server's `/props` `model_path`, vLLM's
   `/v1/models` `root` (its `--model`, a GGUF path when it serves one). A relative path
   is the server's working folder's, unknown here: not compared.
3. **The path is a file loopd can read.** A path missing here (a server in a container
   sees its own file system), unreadable by loopd's user, or not a plain file (vLLM's
   `root` is a folder when it serves Hugging Face weights): not compared.
4. Then it is **the same file** (one device and inode), or two files of **the same size
   and sha256**; anything else is another model file, and loopd refuses to start
   (the caller's runbook pointer).

What was found is a `FileComparison`: `same` True, False, or None where not compared,
and `how`, one short phrase for the start line (`file=...`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path

SHORT_SHA256 = 12


@dataclass(frozen=True)
class FileComparison:
    same: bool | None  # None: not compared (`how` says why)
    how: str


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def compare_served_file(local: Path, named: object, *, loopback: bool) -> FileComparison:
    """The server's model file `named` (a path as the server gave it, or None) held to
    `local`, loopd's own model file."""
    if not loopback:
        return FileComparison(None, "not-compared(remote-server)")
    if not isinstance(named, str) or not named:
        return FileComparison(None, "not-compared(no-path-given)")
    served = Path(named)
    if not served.is_absolute():
        return FileComparison(None, "not-compared(relative-path)")
    try:
        there = served.stat()
        here = local.stat()
    except FileNotFoundError:
        return FileComparison(None, "not-compared(path-not-here)")
    except OSError:
        return FileComparison(None, "not-compared(unreadable)")
    if not stat.S_ISREG(there.st_mode):
        # vLLM's `root` is a folder when it serves Hugging Face weights: no one file
        # to hold to the GGUF (the vocabulary check still holds)
        return FileComparison(None, "not-compared(not-a-file)")
    if (there.st_dev, there.st_ino) == (here.st_dev, here.st_ino):
        return FileComparison(True, "same-file")
    if there.st_size != here.st_size:
        return FileComparison(
            False, f"{served} has {there.st_size:,} bytes, the model file {here.st_size:,}"
        )
    try:
        theirs, ours = _sha256(served), _sha256(local)
    except OSError:
        return FileComparison(None, "not-compared(unreadable)")
    if theirs != ours:
        return FileComparison(
            False,
            f"{served} has sha256 {theirs[:SHORT_SHA256]}, the model file {ours[:SHORT_SHA256]}",
        )
    return FileComparison(True, f"same-sha256({ours[:SHORT_SHA256]})")


def _sha256(path: Path) -> str:
    with path.open("rb") as stream:
        os.posix_fadvise(stream.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        return hashlib.file_digest(stream, "sha256").hexdigest()
