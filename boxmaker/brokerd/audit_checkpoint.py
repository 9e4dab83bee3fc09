"""brokerd's audit checkpoints: taken on demand and at an interval, kept beside the log.

I/O: reads and writes `<home>/audit/checkpoint.json` (atomically, with
`boxmaker.ipc.files.write_atomic`), logs `event=checkpoint`, and runs the interval
thread. The rules (core.audit.checkpoints says what a checkpoint is):

    - A checkpoint names the log's last durable record: the writer syncs it first.
    - It is written to checkpoint.json before anyone is told of it, so that every
      checkpoint ever handed out is at or below the one on disk: a brokerd started
      on a log below it refuses to start (audit_startup), and so never reuses a
      seq it has checkpointed.
    - Checkpoints are taken one at a time (a lock), so checkpoint.json only moves on.
    - An empty log has no checkpoint; a broken writer or a failed write is an
      error, and checkpoint.json keeps the checkpoint before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from boxmaker.brokerd.audit_writer import AuditUnavailableError
from boxmaker.core.audit.checkpoints import Checkpoint, decode_state, encode_state
from boxmaker.core.errors import UnavailableError
from boxmaker.ipc.files import write_atomic

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.json"


class CheckpointUnavailableError(UnavailableError):
    """No checkpoint can be taken now; the message is one line saying why."""


def checkpoint_path(audit_dir: Path) -> Path:
    return audit_dir / CHECKPOINT_NAME


def read_checkpoint(audit_dir: Path) -> Checkpoint | None:
    """checkpoint.json's checkpoint; None if there is none; ValueError or OSError if unreadable."""
    try:
        data = checkpoint_path(audit_dir).read_bytes()
    except FileNotFoundError:
        return None
    return decode_state(data)


class Checkpointer:
    """Takes checkpoints of the log whose durable head `head` gives (`AuditWriter.durable_head`)."""

    def __init__(
        self,
        audit_dir: Path,
        head: Callable[[], tuple[int, str] | None],
        clock: Callable[[], str],
    ) -> None:
        self._path = checkpoint_path(audit_dir)
        self._head = head
        self._clock = clock
        self._lock = threading.Lock()

    def take(self) -> Checkpoint:
        """A checkpoint of the log now, on disk; CheckpointUnavailableError if none can be."""
        with self._lock:
            try:
                head = self._head()
            except AuditUnavailableError as exc:
                raise CheckpointUnavailableError(exc.message) from exc
            if head is None:
                raise CheckpointUnavailableError("the audit log has no records yet")
            checkpoint = Checkpoint(head[0], head[1], self._clock())
            try:
                write_atomic(self._path, encode_state(checkpoint))
            except OSError as exc:
                raise CheckpointUnavailableError(
                    f"cannot write {self._path}: {exc.strerror or exc}"
                ) from exc
        log.info(
            "event=checkpoint seq=%d head=%s time=%s",
            checkpoint.seq,
            checkpoint.head,
            checkpoint.time,
        )
        return checkpoint


def checkpoint_loop(checkpointer: Checkpointer, every_s: float, stopping: threading.Event) -> None:
    """Take a checkpoint every `every_s` seconds until `stopping` is set."""
    while not stopping.wait(every_s):
        try:
            checkpointer.take()
        except CheckpointUnavailableError as exc:
            log.warning("event=checkpoint_skipped reason=%s", exc)
