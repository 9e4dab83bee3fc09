"""gatewayd's watermark on disk, `<home>/gateway/watermark.json`, and in memory.

I/O: that file and its directory (made 0700 if missing). What the file holds and
when it is written are `gatewayd.watermark`'s rules; `WatermarkFile` reads it once
at start and replaces it with `ipc.files.write_atomic` (a temporary file, fsync,
rename, fsync of the directory), so a crash leaves the old mark or the new one.
`Progress` holds the mark of a running gatewayd and saves it on every change,
from the event loop's thread only (a save is one small write and two fsyncs).

- No file: `load` is None (a first start, from now).
- A damaged file (rule 6): one warning naming it and what is wrong, and `load`
  is None, as with none: gatewayd starts from now and never answers an old
  message on the strength of a mark it cannot read. The next save replaces it.
- A file or directory that cannot be read or made (permissions, a link, not a
  directory): `StartupError` naming it; gatewayd does not start, since every
  turn would then risk a second answer after a restart.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from boxmaker.core.errors import StartupError
from boxmaker.gatewayd.mm_model import Post
from boxmaker.gatewayd.watermark import (
    MAX_BYTES,
    Resume,
    Watermark,
    WatermarkError,
    decode_watermark,
    encode_watermark,
)
from boxmaker.ipc.files import write_atomic

log = logging.getLogger(__name__)

NAME = "watermark.json"


class WatermarkFile:
    """One gatewayd's watermark file; saves are made from one thread (the event loop)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / NAME

    def load(self) -> Watermark | None:
        """The mark on disk, or None when there is none or it is damaged (warned)."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StartupError(f"cannot make gatewayd's directory {self.directory}: {exc}") from exc
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StartupError(f"cannot read the watermark {self.path}: {exc}") from exc
        try:
            with os.fdopen(fd, "rb") as file:
                data = file.read(MAX_BYTES + 1)
        except OSError as exc:
            raise StartupError(f"cannot read the watermark {self.path}: {exc}") from exc
        try:
            return decode_watermark(data)
        except WatermarkError as exc:
            log.warning(
                "event=watermark_damaged file=%s why=%s: starting from now, as with none",
                self.path,
                exc,
            )
            return None

    def save(self, mark: Watermark) -> None:
        """Replace the file with `mark`, atomically and durably; OSError if it cannot."""
        write_atomic(self.path, encode_watermark(mark))


class Progress:
    """The running gatewayd's mark: which posts it may take, saved on every change."""

    def __init__(self, file: WatermarkFile, resume: Resume, mark: Watermark) -> None:
        self.file = file
        self.resume = resume
        self.mark = mark

    def save(self) -> None:
        """Save the mark as it is (at start: proves the file can be written)."""
        try:
            self.file.save(self.mark)
        except OSError as exc:
            raise StartupError(f"cannot write the watermark {self.file.path}: {exc}") from exc

    def start_from(self, newest_ms: int) -> None:
        """A start with no mark: what the stream took as history stays history after a crash."""
        if newest_ms > self.mark.newest_ms:
            self.mark = Watermark(newest_ms, self.mark.recent, self.mark.in_flight)
            self.save()

    def take(self, post: Post) -> bool:
        """Rules 1 and 3: False for a post this start must not answer; else the mark
        is saved with it taken before this returns (OSError if it cannot be, and then
        the post is not taken)."""
        if not self.resume.answers(post.id, post.create_at):
            return False
        mark = self.mark.taken(
            post.id, post.create_at, post.root_id or post.id, self.resume.margin_ms
        )
        self.file.save(mark)
        self.mark = mark
        return True

    def finish(self, post_id: str) -> None:
        """Rule 5: the turn of `post_id` ended; a failed save is logged (the next
        start would then say the turn was cut off)."""
        self.mark = self.mark.finished(post_id)
        try:
            self.file.save(self.mark)
        except OSError as exc:
            log.error("event=watermark_unwritable file=%s %s", self.file.path, exc)
