"""Reading a role's secrets once, at start: from a systemd credential, a variable or a file.

I/O: the files named (and `$CREDENTIALS_DIRECTORY`), the environment given (a
variable read is removed from it), and the log: a warning for each secret read
from a file, an info line naming what was loaded, a debug line per secret (its
masked repr). The rules and what is guaranteed about the value are
`boxmaker.core.home.secrets`'; here is only how a read keeps them:

- A credential or file is opened with O_RDONLY|O_NOFOLLOW|O_CLOEXEC, plus
  O_NONBLOCK (a FIFO planted at the path must not hang the start; it is then
  refused as not a regular file) and O_NOCTTY, relative to its directory, which
  is reached from `/` one component at a time, each opened with
  O_PATH|O_DIRECTORY|O_NOFOLLOW relative to the one before: a symbolic link
  anywhere on the path (`/etc/bx -> /tmp/x`) is refused, never followed. The
  checks are made on the open descriptor with fstat, and the bytes read from
  that same descriptor, so a rename or a link swapped in between cannot change
  what is read. A `..` on the path is refused too (it is never needed).
- Bytes go straight from the kernel into the Secret's buffer (`os.readv` into a
  memoryview): no `bytes` copy of a value read from a file or credential exists.
- A variable is removed from the environment as soon as it is read, whether or
  not it then proves usable, so a child process (a sandbox, a tool) never
  inherits it. With `os.environ` this also unsets it in the C environment.

`load_secrets` raises `StartupError` with the one line of
`boxmaker.core.home.secrets.unavailable` at the first secret that cannot be read, after
wiping those already read. `run_role` logs it and exits 1.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Mapping, MutableMapping

from boxmaker.core.errors import BoxmakerError, StartupError
from boxmaker.core.home.secrets import (
    Secret,
    SecretPlace,
    Secrets,
    SecretSource,
    SourceKind,
    in_a_file,
    places,
    refusal,
    unavailable,
)

log = logging.getLogger(__name__)

CREDENTIALS_VARIABLE = "CREDENTIALS_DIRECTORY"
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_DIRECTORY_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
LINK_ON_PATH = "a directory on its path is a symbolic link, which is never followed"
DOT_DOT = "its path has `..`: name the file by its own path"

_OS_REASONS = {
    errno.ENOENT: "there is no such file",
    errno.ENOTDIR: "a directory on its path is not a directory",
    errno.ELOOP: "it is a symbolic link, which is never followed",
    errno.EACCES: "permission denied to the role's user",
    errno.EPERM: "permission denied to the role's user",
}


def load_secrets(
    table: Mapping[str, SecretSource],
    environ: MutableMapping[str, str] | None = None,
    uid: int | None = None,
) -> Secrets:
    """Every secret of `table`, read now; StartupError naming the first that cannot be.

    `environ` defaults to `os.environ` (variables read are removed from it) and
    `uid`, the owner a `file` must have, to the effective uid.
    """
    env = os.environ if environ is None else environ
    owner = os.geteuid() if uid is None else uid
    loaded: dict[str, Secret] = {}
    try:
        for place in places(table):
            secret = read_secret(place, env, owner)
            loaded[place.name] = secret
            log.debug(
                "event=secret_loaded name=%s source=%s secret=%r", place.name, place.kind, secret
            )
            if place.kind is SourceKind.FILE:
                log.warning("%s", in_a_file(place))
    except BaseException:
        for secret in loaded.values():
            secret.wipe()
        raise
    if loaded:
        log.info("event=secrets_loaded names=%s", ",".join(loaded))
    return Secrets(loaded)


def read_secret(place: SecretPlace, environ: MutableMapping[str, str], uid: int) -> Secret:
    """The secret at `place`; StartupError with its one line when it cannot be read."""
    try:
        if place.kind is SourceKind.ENV:
            return _from_variable(place, environ)
        return Secret.filled(place.name, lambda view: _read_file(place, environ, uid, view))
    except _LinkOnPathError as exc:
        raise StartupError(unavailable(place, exc.strerror or LINK_ON_PATH)) from exc
    except OSError as exc:
        why = _OS_REASONS.get(exc.errno or 0, exc.strerror or type(exc).__name__)
        raise StartupError(unavailable(place, why)) from exc
    except ValueError as exc:  # Secret.filled: empty, or over the limit
        raise StartupError(unavailable(place, str(exc))) from exc


def _from_variable(place: SecretPlace, environ: MutableMapping[str, str]) -> Secret:
    if place.where not in environ:
        raise StartupError(unavailable(place, "the variable is not set"))

    def fill(view: memoryview) -> int:
        # popped at once: no child inherits it, whatever happens next
        data = environ.pop(place.where).encode("utf-8", "surrogateescape")
        size = min(len(data), len(view))
        view[:size] = memoryview(data)[:size]
        return size

    return Secret.filled(place.name, fill)


def _path(place: SecretPlace, environ: Mapping[str, str]) -> str:
    if place.kind is SourceKind.FILE:
        return place.where
    directory = environ.get(CREDENTIALS_VARIABLE, "")
    if not directory.startswith("/"):
        what = "not set" if not directory else f"not an absolute path ({directory!r})"
        raise StartupError(
            unavailable(place, f"{CREDENTIALS_VARIABLE} is {what}: no systemd credentials")
        )
    return os.path.join(directory, place.where)


def _read_file(place: SecretPlace, environ: Mapping[str, str], uid: int, view: memoryview) -> int:
    """Read the file of `place` into `view`, checked on its open descriptor; the size."""
    fd = open_walked(_path(place, environ), OPEN_FLAGS)
    try:
        opened = os.fstat(fd)
        why = refusal(place.kind, opened.st_mode, opened.st_uid, uid)
        if why is not None:
            raise StartupError(unavailable(place, why))
        size = 0
        while size < len(view):
            got = os.readv(fd, [view[size:]])
            if got == 0:
                break
            size += got
        return size
    finally:
        os.close(fd)


class _LinkOnPathError(BoxmakerError, OSError):
    """A directory on the path is a symbolic link."""


def open_walked(path: str, flags: int) -> int:
    """`path` (absolute) opened with `flags`, relative to its directory, reached from `/`
    one component at a time without following a link: _LinkOnPathError for a link
    on the way (`..` counts as one: it is never needed), OSError as `os.open` raises."""
    *directories, name = [part for part in path.split("/") if part and part != "."]
    at = os.open("/", _DIRECTORY_FLAGS)
    try:
        for part in directories:
            if part == "..":
                raise _LinkOnPathError(errno.ELOOP, DOT_DOT, path)
            try:
                below = os.open(part, _DIRECTORY_FLAGS, dir_fd=at)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(part, at):
                    raise _LinkOnPathError(errno.ELOOP, LINK_ON_PATH, path) from exc
                raise
            os.close(at)
            at = below
        return os.open(name, flags, dir_fd=at)
    finally:
        os.close(at)


def _is_link(name: str, directory: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode)
    except OSError:
        return False
