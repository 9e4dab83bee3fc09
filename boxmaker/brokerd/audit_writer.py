"""The audit log's one writer: appends records to `<home>/audit/YYYY-MM-DD.jsonl`.

I/O: takes an exclusive `flock` on `<home>/audit/.lock` for the life of the
process (`AuditLock`), creates day files (mode 0600, then fsyncs the directory),
and appends one line per record with one `write`; an `fsync` then makes it
durable, one fsync for every record written before it (group commit, below).
The clock is never read here: every record is given `now`.

Rules (design.md section 4, spec 000 section 5):

    - A record's line and its newline go out in one write; the caller is answered
      only once an fsync that began after that write has returned, so the caller
      acts on nothing unsynced.
    - A record goes in the file of its UTC date, unless that is earlier than the
      latest file (the clock stepped back): then in the latest file. Recovery and
      AcceptedBreak records always go in the latest file.
    - A new day's file is made durable (created, the directory fsynced) before any
      record is written in it, and the previous file's records still unsynced are
      fsynced before it is created: no record counts as durable unless every
      record before it in the chain is.
    - After any failed create, write (short writes included) or sync, the writer
      is broken: it never writes again, and every later call raises the same
      `AuditUnavailableError`, as does every wait for a record not yet durable.
      The next startup recovers whatever was left.
    - Nothing is ever truncated, rewritten or deleted.

Group commit (PostgreSQL's XLogFlush, SQLite's WAL): `stage` writes a record (under
the writer's mutex: seq, prev, the day file, one `write`) and returns a `Ticket`,
the count of writes up to and including it; `wait_durable(ticket)` returns once
`durable`, the count of writes covered by a completed fsync, has reached it.
The first waiter finding no fsync in flight is the leader: it notes the count
of writes so far as its target, releases the mutex, fsyncs, retakes the mutex,
publishes `durable = target` and wakes everyone. Records staged while that fsync
is in flight wait for it, then one of them leads the next fsync, which covers
them all: under load, one fsync makes a whole group durable, and no caller is
answered before the fsync covering its own record returns. A failed fsync (or
write) breaks the writer, and every waiter whose record was not yet durable
raises. A day-file switch waits for an fsync in flight to return (its descriptor
stays open until then), then syncs the old file's staged records itself, holding
the mutex; `close` too syncs what is staged, so that callers still waiting are
answered. `append` is `stage` then `wait_durable` in one hold of the mutex (let go
only during the fsync): a lone caller still makes one write, then one fsync.
`stats` counts records and fsyncs (docs/performance.md).

`AuditFiles` is the seam for the file operations, so tests can make one fail.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from boxmaker.core.audit.names import audit_file_name
from boxmaker.core.audit.records import (
    AcceptedBreakEvent,
    AuditEvent,
    RecoveryEvent,
    encode_line,
)
from boxmaker.core.errors import UnavailableError
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import check_timestamp
from boxmaker.ipc.files import fsync_directory

LOCK_NAME = ".lock"
_sha256 = hashlib.sha256
_new_tuple = tuple.__new__
_LATEST_ONLY = (RecoveryEvent, AcceptedBreakEvent)  # written in the latest file, whatever `now`


class AuditUnavailableError(UnavailableError):
    """The audit log cannot be written; calls are denied with audit_unavailable."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def lines(self) -> tuple[str, str]:
        return (self.message, Runbook.AUDIT_UNAVAILABLE.pointer)


class AuditLockedError(UnavailableError):
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
        fsync_directory(path)

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


class Ticket(NamedTuple):
    """A staged record: its seq, the hash it chains from, and its write position.

    `position` counts the writer's writes up to and including this record's: the
    record is durable once an fsync begun after that many writes has returned.
    """

    seq: int
    prev: str
    position: int


@dataclass(frozen=True, slots=True)
class WriterStats:
    """Counts since the writer started (bench/broker.py prints records per fsync)."""

    records: int  # records written (a torn line's newline is not one)
    fsyncs: int  # fsyncs of the log's files that returned (directory syncs not counted)
    waiting: int  # threads waiting now for an fsync in flight to return


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
        self._synced = threading.Condition(self._mutex)  # notified when an fsync ends
        self._written = 0  # writes made (records, and a torn line's newline)
        self._durable = 0  # of those, how many a returned fsync covers
        self._syncing = False  # a leader's fsync is in flight, outside the mutex
        self._waiting = 0
        self._records = 0
        self._fsyncs = 0

    @property
    def position(self) -> Position:
        with self._mutex:
            return Position(self._latest, self._next_seq, self._prev)

    @property
    def broken(self) -> AuditUnavailableError | None:
        return self._broken

    @property
    def stats(self) -> WriterStats:
        with self._mutex:
            return WriterStats(self._records, self._fsyncs, self._waiting)

    def append(self, event: AuditEvent, now: str) -> Appended:
        """Write `event` as the next record at time `now`, synced; AuditUnavailableError if not."""
        with self._mutex:
            ticket = self._stage(event, now)
            self._await(ticket.position)
        # tuple.__new__: a NamedTuple's own __new__ is Python code, and every step
        # between two fsyncs runs with cold caches (bench/audit.py)
        return _new_tuple(Appended, (ticket.seq, ticket.prev))

    def append_in_latest(self, event: AuditEvent, now: str) -> Appended:
        """Write `event` in the latest file whatever `now`'s date (Recovery, AcceptedBreak)."""
        with self._mutex:
            ticket = self._stage_in_latest(event, now)
            self._await(ticket.position)
        return Appended(ticket.seq, ticket.prev)

    def stage(self, event: AuditEvent, now: str) -> Ticket:
        """Write `event` as the next record at time `now`, not yet synced: act on nothing yet.

        The record is durable once `wait_durable` returns for the ticket. Raises
        AuditUnavailableError if the writer is (or now becomes) broken, and
        ValueError, writing nothing, if `now` is not a timestamp.
        """
        with self._mutex:
            return self._stage(event, now)

    def wait_durable(self, ticket: Ticket) -> None:
        """Return once the staged record is durable; AuditUnavailableError if it never will be."""
        with self._mutex:
            self._await(ticket.position)

    def durable_head(self) -> tuple[int, str] | None:
        """The last record's seq and line hash, once it is durable; None if there is none.

        For an audit checkpoint: what it names must survive a crash. Raises
        AuditUnavailableError if the writer is broken.
        """
        with self._mutex:
            self._check()
            if self._next_seq == 0:
                return None
            head = (self._next_seq - 1, self._prev)
            self._await(self._written)
        return head

    def end_torn_line(self) -> None:
        """Write the newline a torn final line of the latest file lacks (startup only)."""
        with self._mutex:
            self._check()
            if self._latest is None:
                raise ValueError("there is no audit file to end a line in")
            self._await(self._write_bytes(b"\n"))

    def close(self) -> None:
        """Sync what is staged, close the file and release the lock; the writer is done.

        Callers still waiting for a record staged before the close are answered
        by this last fsync (or, if it fails, with the failure).
        """
        with self._mutex:
            while self._syncing:
                self._wait_for_fsync()
            if self._broken is None and self._durable < self._written:
                with contextlib.suppress(AuditUnavailableError):  # the waiters raise it
                    self._sync_holding_mutex()
            if self._fd is not None:
                self._files.close(self._fd)
                self._fd = None
            if self._broken is None:
                self._broken = AuditUnavailableError("audit: the writer is closed")
            self._synced.notify_all()
            self._lock.release()

    # --- inside the mutex ---------------------------------------------------------

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    def _fail(self, what: str, exc: OSError | None) -> AuditUnavailableError:
        """Break the writer; the first failure stays the one every later call raises.

        (Only a leader's fsync, in flight when a write failed, can fail second.)
        """
        if self._broken is None:
            reason = f": {exc.strerror or exc}" if exc is not None else ""
            self._broken = AuditUnavailableError(f"audit: {what}{reason}")
        self._synced.notify_all()  # whoever waits for an fsync will not get one
        return self._broken

    def _stage(self, event: AuditEvent, now: str) -> Ticket:
        if type(event) in _LATEST_ONLY:
            return self._stage_in_latest(event, now)
        self._check()
        # the event is a validated model and seq and prev are the writer's own:
        # only `now` comes from outside, so only it is checked again
        check_timestamp(now)
        while now[:10] > self._latest_day:  # a later UTC date (or the first file)
            if self._syncing:  # the old file's fd is in use: let that fsync end first
                self._wait_for_fsync()
                self._check()
            else:
                self._start_file(audit_file_name(now))
        return self._write_record(event, now)

    def _stage_in_latest(self, event: AuditEvent, now: str) -> Ticket:
        self._check()
        check_timestamp(now)
        if self._latest is None:  # nothing written yet, so nothing to sync first
            self._start_file(audit_file_name(now))
        return self._write_record(event, now)

    def _start_file(self, name: str) -> None:
        # no fsync is in flight: sync the records the old file still owes first
        if self._durable < self._written:
            self._sync_holding_mutex()
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

    def _write_record(self, event: AuditEvent, now: str) -> Ticket:
        line = encode_line(self._next_seq, now, self._prev, event)
        seq, prev = self._next_seq, self._prev
        digest = _sha256(line).hexdigest()
        position = self._write_bytes(line + b"\n")
        self._prev = digest
        self._next_seq += 1
        self._records += 1
        return _new_tuple(Ticket, (seq, prev, position))

    def _write_bytes(self, data: bytes) -> int:
        """One write to the latest file; the write position after it."""
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
        self._written += 1
        return self._written

    def _await(self, position: int) -> None:
        """Return once `durable` reaches `position`, leading an fsync if none is in flight."""
        while self._durable < position:
            if self._broken is not None:
                raise self._broken
            if self._syncing:
                self._wait_for_fsync()  # then look again: it may have covered this one
            else:
                self._lead()

    def _lead(self) -> None:
        """fsync everything written so far, with the mutex released while it runs."""
        target, fd = self._written, self._fd
        assert fd is not None  # something was written, so a file is open
        self._syncing = True
        self._mutex.release()
        failure: OSError | None = None
        try:
            self._fsync(fd)
        except OSError as exc:
            failure = exc
        finally:
            self._mutex.acquire()
            self._syncing = False
            if self._waiting:  # even on failure: the next one looks for itself
                self._synced.notify_all()
        if failure is not None:
            raise self._fail(f"cannot sync {self._where()}", failure) from failure
        self._fsyncs += 1
        self._durable = target

    def _sync_holding_mutex(self) -> None:
        """fsync everything written so far without letting go (a file switch, close)."""
        assert self._fd is not None
        assert not self._syncing
        try:
            self._fsync(self._fd)
        except OSError as exc:
            raise self._fail(f"cannot sync {self._where()}", exc) from exc
        self._fsyncs += 1
        self._durable = self._written
        if self._waiting:
            self._synced.notify_all()

    def _wait_for_fsync(self) -> None:
        """Wait (the mutex released) until the fsync in flight ends; callers look again.

        The only wait on `_synced`: `_waiting` counts its waiters, so an fsync that
        nobody waits for notifies nobody (a single caller's path, at every record).
        """
        self._waiting += 1
        try:
            self._synced.wait()
        finally:
            self._waiting -= 1

    def _where(self) -> Path:
        return self._dir / str(self._latest)
