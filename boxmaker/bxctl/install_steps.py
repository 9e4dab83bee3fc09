"""What `bxctl install` makes, as steps that each know whether they are already done.

I/O: users and groups (through `useradd`, `groupadd` and `usermod`, run with the
`sh` package), directories and files with their owners and modes. Every step
first looks at what is there: a step already in place is reported as such and
changes nothing, so a second install changes nothing and says so. A file marked
`keep` (a configuration or grant file the owner may have edited) is never
overwritten once it exists. `Bytecode` writes the `__pycache__` files of
boxmaker's own modules (with `compileall`), so that a role whose user cannot
write next to them, or whose environment sets PYTHONDONTWRITEBYTECODE, does not
compile every module again at each start (about 0.1 s of CPU a role, with four
roles starting on the same cores: docs/performance.md, "Tree start").
"""

from __future__ import annotations

import compileall
import grp
import importlib.util
import os
import pwd
import py_compile
import stat
from dataclasses import dataclass
from pathlib import Path

import sh


@dataclass(frozen=True)
class Group:
    name: str
    members: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"group {self.name} with {', '.join(self.members) or 'no members'}"

    def done(self) -> bool:
        try:
            entry = grp.getgrnam(self.name)
        except KeyError:
            return False
        return set(self.members) <= set(entry.gr_mem)

    def apply(self) -> None:
        try:
            grp.getgrnam(self.name)
        except KeyError:
            sh.groupadd("--system", self.name)
        for member in self.members:
            sh.usermod("--append", "--groups", self.name, member)


@dataclass(frozen=True)
class User:
    name: str

    def describe(self) -> str:
        return f"system user {self.name}"

    def done(self) -> bool:
        try:
            pwd.getpwnam(self.name)
        except KeyError:
            return False
        return True

    def apply(self) -> None:
        sh.useradd(
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            self.name,
        )


def _ids(owner: str | None, group: str | None) -> tuple[int, int]:
    uid = pwd.getpwnam(owner).pw_uid if owner else os.getuid()
    gid = grp.getgrnam(group).gr_gid if group else os.getgid()
    return uid, gid


def _owned(path: Path, mode: int, owner: str | None, group: str | None) -> bool:
    info = path.lstat()
    uid, gid = _ids(owner, group)
    return stat.S_IMODE(info.st_mode) == mode and info.st_uid == uid and info.st_gid == gid


@dataclass(frozen=True)
class Directory:
    path: Path
    mode: int
    owner: str | None = None  # None: the user running bxctl
    group: str | None = None

    def describe(self) -> str:
        return f"directory {self.path} {self.mode:04o} {self.owner or ''}:{self.group or ''}"

    def done(self) -> bool:
        return self.path.is_dir() and _owned(self.path, self.mode, self.owner, self.group)

    def apply(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        os.chown(self.path, *_ids(self.owner, self.group))
        os.chmod(self.path, self.mode)


@dataclass(frozen=True)
class File:
    path: Path
    content: str
    mode: int
    owner: str | None = None
    group: str | None = None
    keep: bool = False  # the owner's file: never overwritten once it exists

    def describe(self) -> str:
        kind = "file (kept if present)" if self.keep else "file"
        return f"{kind} {self.path} {self.mode:04o} {self.owner or ''}:{self.group or ''}"

    def done(self) -> bool:
        if not self.path.is_file():
            return False
        if self.keep:
            return True
        return self.path.read_text() == self.content and _owned(
            self.path, self.mode, self.owner, self.group
        )

    def apply(self) -> None:
        if self.keep and self.path.exists():
            return
        tmp = self.path.with_name(f".{self.path.name}.bxctl-install")
        tmp.write_text(self.content)
        os.chown(tmp, *_ids(self.owner, self.group))
        os.chmod(tmp, self.mode)
        os.replace(tmp, self.path)


@dataclass(frozen=True)
class Command:
    """A command that is idempotent itself (the sandbox host preparation)."""

    argv: tuple[str, ...]
    what: str

    def describe(self) -> str:
        return self.what

    def done(self) -> bool:
        return False  # it checks for itself; run it every time

    def apply(self) -> None:
        command = sh.Command(self.argv[0])
        command(*self.argv[1:])


@dataclass(frozen=True)
class Bytecode:
    """The bytecode of every module under `package`, as the import system would check it."""

    package: Path

    def describe(self) -> str:
        return f"bytecode of the modules under {self.package}"

    def done(self) -> bool:
        return all(_compiled(source) for source in self.package.rglob("*.py"))

    def apply(self) -> None:
        # timestamps, as `done` checks them (SOURCE_DATE_EPOCH would make hashes);
        # forced, since compileall's own check sees the mtime but not the size
        timestamp = py_compile.PycInvalidationMode.TIMESTAMP
        if not compileall.compile_dir(
            self.package, quiet=2, force=True, invalidation_mode=timestamp
        ):
            raise OSError(f"cannot write the bytecode of every module under {self.package}")


_HEADER = 16  # magic, flags, the source's mtime and size: what an import checks


def _compiled(source: Path) -> bool:
    """Whether `source` has bytecode an import would use without compiling again."""
    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as cached:
            header = cached.read(_HEADER)
        st = source.stat()
    except OSError:
        return False
    mask = 0xFFFFFFFF
    expected = (
        importlib.util.MAGIC_NUMBER
        + (0).to_bytes(4, "little")
        + (int(st.st_mtime) & mask).to_bytes(4, "little")
        + (st.st_size & mask).to_bytes(4, "little")
    )
    return header == expected


Step = Group | User | Directory | File | Command | Bytecode
