"""The audit log's one writer: appends records to `<home>/audit/YYYY-MM-DD.jsonl`.

I/O: takes an exclusive `flock` on `<home>/audit/.lock` for the life of the
process (`AuditLock`), creates day files (mode 0600, then fsyncs the directory),
and appends one line per record with one `write` followed by `fsync`. The clock
is never read here: every append is given `now`.

Rules (design.md section 4, spec 000 section 5):

    - A record's line and its newline go out in one write, then fsync; only after
      both return does `append` return, so the caller acts on nothing unsynced.
    - A record goes in the file of its UTC date, unless that is earlier than the
      latest file (the clock stepped back): then in the latest file. Recovery and
      AcceptedBreak records always go in the latest file.
    - After any failed create, write (short writes included) or sync, the writer
      is broken: it never writes again, and every later call raises the same
      `AuditUnavailableError`. The next startup recovers whatever was left.
    - Nothing is ever truncated, rewritten or deleted.

`AuditFiles` is the seam for the file operations, so tests can make one fail.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from boxmaker.core.audit_names import audit_file_name
from boxmaker.core.audit_records import (
    AcceptedBreakEvent,
    AuditEvent,
    RecoveryEvent,
    encode_line,
)
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import check_timestamp

LOCK_NAME = ".lock"
_sha256 = hashlib.sha256
_new_tuple = tuple.__new__
_LATEST_ONLY = (RecoveryEvent, AcceptedBreakEvent)  # written in the latest file, whatever `now`


class AuditUnavailableError(Exception):
    """The audit log cannot be written; calls are denied with audit_unavailable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> tuple[str, str]:
        return (self.message, Runbook.AUDIT_UNAVAILABLE.pointer)


class AuditLockedError(Exception):
    """Another process holds `<home>/audit/.lock`: another brokerd is running."""

    def lines(self) -> tuple[str, str]:
        return ("brokerd is already running", Runbook.BROKERD_ALREADY_RUNNING.pointer)


class AuditFiles:
    """The file operations the writer uses; subclass to make one fail in tests."""

    def create(self, path: Path) -> int:
        """A new file, mode 0600, open for appending; FileExistsError if it exists."""
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)

    def open_append(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_APPEND)

    # the two calls made for every record: the system calls themselves, no Python frame
    write: Callable[[int, bytes], int] = staticmethod(os.write)
    fsync: Callable[[int], None] = staticmethod(os.fsync)

    def sync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self, fd: int) -> None:
        os.close(fd)


class AuditLock:
    """The exclusive lock on `<audit>/.lock`, held until `release` or process exit."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, audit_dir: Path) -> AuditLock:
        """Take the lock, creating the directory (0700) and the lock file (0600) if missing.

        Raises AuditLockedError if another open file holds it (another brokerd, or a
        second writer in this process), OSError if the directory is unusable.
        """
        audit_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(audit_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise AuditLockedError() from exc
            raise
        return cls(fd)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None


@dataclass(frozen=True, slots=True)
class Position:
    """Where the next record goes: the latest file (None if none yet), its seq and prev."""

    latest: str | None
    next_seq: int
    prev: str


class Appended(NamedTuple):
    """What `append` wrote: the record's seq, and the hash it chains from."""

    seq: int
    prev: str


class AuditWriter:
    """Appends records; thread-safe; broken for good after the first failure."""

    def __init__(
        self, audit_dir: Path, lock: AuditLock, position: Position, files: AuditFiles | None = None
    ) -> None:
        self._dir = audit_dir
        self._lock = lock  # held for as long as the writer exists
        self._files = files if files is not None else AuditFiles()
        self._write = self._files.write
        self._fsync = self._files.fsync
        self._latest = position.latest
        self._latest_day = "" if position.latest is None else position.latest[:10]
        self._next_seq = position.next_seq
        self._prev = position.prev
        self._fd: int | None = None
        self._broken: AuditUnavailableError | None = None
        self._mutex = threading.Lock()

    @property
    def position(self) -> Position:
        with self._mutex:
            return Position(self._latest, self._next_seq, self._prev)

    @property
    def broken(self) -> AuditUnavailableError | None:
        return self._broken

    def append(self, event: AuditEvent, now: str) -> Appended:
        """Write `event` as the next record at time `now`, synced; AuditUnavailableError if not."""
        if type(event) in _LATEST_ONLY:
            return self.append_in_latest(event, now)
        with self._mutex:
            if self._broken is not None:
                raise self._broken
            if now[:10] > self._latest_day:  # a later UTC date (or the first file)
                self._start_file(audit_file_name(now))
            return self._write_record(event, now)

    def append_in_latest(self, event: AuditEvent, now: str) -> Appended:
        """Write `event` in the latest file whatever `now`'s date (Recovery, AcceptedBreak)."""
        with self._mutex:
            self._check()
            if self._latest is None:
                self._start_file(audit_file_name(now))
            return self._write_record(event, now)

    def end_torn_line(self) -> None:
        """Write the newline a torn final line of the latest file lacks (startup only)."""
        with self._mutex:
            self._check()
            if self._latest is None:
                raise ValueError("there is no audit file to end a line in")
            self._write_synced(b"\n")

    def close(self) -> None:
        """Close the open file and release the lock; the writer cannot be used again."""
        with self._mutex:
            if self._fd is not None:
                self._files.close(self._fd)
                self._fd = None
            if self._broken is None:
                self._broken = AuditUnavailableError("audit: the writer is closed")
            self._lock.release()

    # --- inside the mutex ---------------------------------------------------------

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    def _fail(self, what: str, exc: OSError | None) -> AuditUnavailableError:
        reason = f": {exc.strerror or exc}" if exc is not None else ""
        self._broken = AuditUnavailableError(f"audit: {what}{reason}")
        return self._broken

    def _start_file(self, name: str) -> None:
        path = self._dir / name
        try:
            fd = self._files.create(path)
        except OSError as exc:
            raise self._fail(f"cannot create {path}", exc) from exc
        if self._fd is not None:
            self._files.close(self._fd)
        self._fd = fd
        self._latest = name
        self._latest_day = name[:10]
        try:
            self._files.sync_dir(self._dir)
        except OSError as exc:
            raise self._fail(f"cannot sync {self._dir} after creating {name}", exc) from exc

    def _write_record(self, event: AuditEvent, now: str) -> Appended:
        # the event is a validated model and seq and prev are the writer's own:
        # only `now` comes from outside, so only it is checked again
        check_timestamp(now)
        line = encode_line(self._next_seq, now, self._prev, event)
        # tuple.__new__: a NamedTuple's own __new__ is Python code, and every step
        # between two fsyncs runs with cold caches (bench/audit.py)
        appended = _new_tuple(Appended, (self._next_seq, self._prev))
        digest = _sha256(line).hexdigest()
        self._write_synced(line + b"\n")
        self._prev = digest
        self._next_seq += 1
        return appended

    def _write_synced(self, data: bytes) -> None:
        if self._fd is None:
            assert self._latest is not None
            path = self._dir / self._latest
            try:
                self._fd = self._files.open_append(path)
            except OSError as exc:
                raise self._fail(f"cannot open {path}", exc) from exc
        try:
            written = self._write(self._fd, data)
        except OSError as exc:
            raise self._fail(f"cannot write {self._where()}", exc) from exc
        if written != len(data):
            raise self._fail(
                f"short write to {self._where()} ({written} of {len(data)} bytes)", None
            )
        try:
            self._fsync(self._fd)
        except OSError as exc:
            raise self._fail(f"cannot sync {self._where()}", exc) from exc

    def _where(self) -> Path:
        return self._dir / str(self._latest)
