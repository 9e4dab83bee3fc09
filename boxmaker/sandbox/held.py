"""Paths resolved once, without a link in any component, and held open for the sandbox.

I/O: opens paths on the host, one component at a time from `/`, each with
`O_PATH | O_NOFOLLOW` relative to the directory before it, so that no symbolic
(or /proc magic) link is ever followed; creates the file a write_file call will
write, and removes it again if the call fails. The runtimes bind the descriptors
held here (bwrap `--bind-fd`; Podman a `/proc/<brokerd>/fd/<n>` source) and the
toolkit checks inside the sandbox that each mount is the device and inode held
here before it does anything: nothing can swap a path between the check and the
mount, whatever the runtime does with the name.

Who is refused, and with which fixed sentence:

    a link, or a missing component, at or above the grant path   GRANT_PATH_UNSAFE,
                                                                 GRANT_PATH_MISSING
    a link below the grant path, up to the file itself            PATH_HAS_SYMLINK
    a missing file (read_file) or directory on the way            NOT_FOUND
    a file tool's target that is not a regular file               NOT_A_FILE

For a shell's masks (`boxmaker.core.grants.shell_view`), every directory between a mount
and a masked path is held too and bound onto itself: a mount point cannot be
renamed, so a call cannot move a masked path's parent aside and read it under
another name in the next call.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

from boxmaker.core.errors import BoxmakerError
from boxmaker.core.grants.tools import ToolName, WriteFileArgs
from boxmaker.sandbox.runner import RunError, RunFailure, RunOutput, RunSpec

log = logging.getLogger(__name__)

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
NEW_FILE_MODE = 0o644


class HoldError(BoxmakerError):
    """The path cannot be held; `failure` is the sentence the call fails with."""

    def __init__(self, failure: RunFailure) -> None:
        super().__init__(failure.value)
        self.failure = failure


@dataclass(frozen=True, slots=True)
class Held:
    """A path held open: `fd` is what the sandbox binds, `dev`/`ino` what it must find."""

    path: str
    fd: int
    dev: int
    ino: int
    is_dir: bool
    writable: bool


@dataclass(frozen=True, slots=True)
class Mask:
    path: str
    is_dir: bool


@dataclass
class HeldSpec:
    """Everything a runtime binds for one call; close it when the call is over."""

    mounts: list[Held] = field(default_factory=list)  # the spec's mounts, in order
    pins: list[Held] = field(default_factory=list)  # directories bound onto themselves
    masks: list[Mask] = field(default_factory=list)
    _created: tuple[int, str, int] | None = None  # parent fd, name, inode of a new file
    _fds: list[int] = field(default_factory=list)

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(h.fd for h in (*self.mounts, *self.pins))

    @property
    def expected(self) -> list[list[object]]:
        """[path, dev, ino] of every bound path, for the toolkit to check inside."""
        return [[h.path, h.dev, h.ino] for h in (*self.mounts, *self.pins)]

    def close(self, *, succeeded: bool) -> None:
        """Close every descriptor; after a failed write_file, remove the file it made."""
        if self._created is not None and not succeeded:
            parent, name, ino = self._created
            with contextlib.suppress(OSError):
                found = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if found.st_ino == ino and found.st_size == 0:
                    os.unlink(name, dir_fd=parent)
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def run_holding(
    spec: RunSpec, body: Callable[[HeldSpec], RunOutput | RunError]
) -> RunOutput | RunError:
    """Hold what `spec` mounts, run `body` with it, then let go: every runtime's `run`.

    A path that cannot be held is the call's failure, and nothing runs; a write_file
    that did not succeed leaves no file it created behind.
    """
    try:
        held = hold(spec)
    except HoldError as refused:
        return RunError(refused.failure)
    outcome: RunOutput | RunError = RunError(RunFailure.SANDBOX_FAILED)
    try:
        outcome = body(held)
        return outcome
    finally:
        held.close(succeeded=isinstance(outcome, RunOutput))


def hold(spec: RunSpec) -> HeldSpec:
    """Open what `spec` mounts; `HoldError` if any of it is not what policy decided on."""
    held = HeldSpec()
    try:
        for mount in spec.mounts:
            if spec.tool in (ToolName.READ_FILE, ToolName.WRITE_FILE):
                held.mounts.append(
                    _hold_file(held, mount.path, mount.granted, mount.writable, spec)
                )
            else:
                held.mounts.append(_hold_walk(held, mount.path, mount.path, mount.writable))
        for mask in spec.masks:
            _hold_mask(held, mask)
    except BaseException:
        held.close(succeeded=False)
        raise
    return held


def _components(path: str) -> list[str]:
    return path[1:].split("/")


def _open_at(held: HeldSpec, parent: int, name: str) -> int:
    fd = os.open(name, _PATH_FLAGS, dir_fd=parent)
    held._fds.append(fd)
    return fd


def _walk(held: HeldSpec, path: str, granted: str) -> tuple[int, os.stat_result]:
    """The descriptor and stat of `path`, opened component by component without links."""
    depth_granted = len(_components(granted))
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    held._fds.append(fd)
    info = os.fstat(fd)
    for index, name in enumerate(_components(path), start=1):
        within_grant = index <= depth_granted
        if not stat.S_ISDIR(info.st_mode):
            raise HoldError(RunFailure.GRANT_PATH_UNSAFE if within_grant else RunFailure.NOT_FOUND)
        try:
            fd = _open_at(held, fd, name)
        except FileNotFoundError as exc:
            missing = RunFailure.GRANT_PATH_MISSING if within_grant else RunFailure.NOT_FOUND
            raise HoldError(missing) from exc
        except OSError as exc:
            raise HoldError(RunFailure.GRANT_PATH_UNSAFE) from exc
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            unsafe = RunFailure.GRANT_PATH_UNSAFE if within_grant else RunFailure.PATH_HAS_SYMLINK
            raise HoldError(unsafe)
    return fd, info


def _held(path: str, fd: int, info: os.stat_result, writable: bool) -> Held:
    return Held(path, fd, info.st_dev, info.st_ino, stat.S_ISDIR(info.st_mode), writable)


def _hold_walk(held: HeldSpec, path: str, granted: str, writable: bool) -> Held:
    fd, info = _walk(held, path, granted)
    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
        raise HoldError(RunFailure.GRANT_PATH_UNSAFE)
    return _held(path, fd, info, writable)


def _hold_file(held: HeldSpec, path: str, granted: str, writable: bool, spec: RunSpec) -> Held:
    """The one regular file a read_file or write_file call works on.

    write_file to a file that does not exist yet creates it here, empty, in the
    held parent directory (`O_CREAT | O_EXCL | O_NOFOLLOW`): the sandbox then binds
    that very file, and `close` removes it again if the call fails.
    """
    parent_path, name = path.rsplit("/", 1)
    parent_path = parent_path or "/"
    if parent_path == "/":
        raise HoldError(RunFailure.GRANT_PATH_UNSAFE)  # no grant may be `/` (loading rule 7)
    writing = isinstance(spec.arguments, WriteFileArgs)
    try:
        parent, parent_info = _walk(held, parent_path, min(granted, parent_path, key=len))
    except HoldError as exc:
        if writing and exc.failure is RunFailure.NOT_FOUND:
            raise HoldError(RunFailure.WRITE_FAILED) from exc
        raise
    if not stat.S_ISDIR(parent_info.st_mode):
        raise HoldError(RunFailure.WRITE_FAILED if writing else RunFailure.NOT_FOUND)
    for _attempt in range(2):
        try:
            fd = _open_at(held, parent, name)
        except FileNotFoundError:
            if not writing:
                raise HoldError(RunFailure.NOT_FOUND) from None
            created = _create(held, parent, name)
            if created is None:
                continue  # made by someone else meanwhile: look again
            return _held(path, created[0], created[1], writable)
        except OSError as exc:
            raise HoldError(RunFailure.NOT_FOUND) from exc
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            if path == granted:
                raise HoldError(RunFailure.GRANT_PATH_UNSAFE)
            raise HoldError(RunFailure.PATH_HAS_SYMLINK)
        if not stat.S_ISREG(info.st_mode):
            raise HoldError(RunFailure.NOT_A_FILE)
        return _held(path, fd, info, writable)
    raise HoldError(RunFailure.PATH_SWAPPED)


def _create(held: HeldSpec, parent: int, name: str) -> tuple[int, os.stat_result] | None:
    try:
        fd = os.open(name, _CREATE_FLAGS, NEW_FILE_MODE, dir_fd=parent)
    except FileExistsError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise HoldError(RunFailure.PATH_HAS_SYMLINK) from exc
        raise HoldError(RunFailure.WRITE_FAILED) from exc
    held._fds.append(fd)
    info = os.fstat(fd)
    held._created = (parent, name, info.st_ino)
    return fd, info


def _hold_mask(held: HeldSpec, mask: str) -> None:
    """Pin every directory between `mask`'s mount and it, then mask it, if it is there.

    A missing component or a link on the way means nothing is at `mask` by that
    name (a link's target is judged by its own path), so nothing is masked.
    """
    mount = next(m for m in held.mounts if mask.startswith(m.path + "/"))
    fd = mount.fd
    path = mount.path
    names = mask[len(mount.path) + 1 :].split("/")
    pinned = {p.path for p in held.pins}
    for index, name in enumerate(names):
        path = f"{path}/{name}"
        try:
            fd = _open_at(held, fd, name)
        except OSError:
            return
        info = os.fstat(fd)
        if stat.S_ISLNK(info.st_mode):
            return
        if index == len(names) - 1:
            held.masks.append(Mask(path, stat.S_ISDIR(info.st_mode)))
            return
        if not stat.S_ISDIR(info.st_mode):
            return
        if path not in pinned:
            held.pins.append(_held(path, fd, info, writable=True))
            pinned.add(path)
