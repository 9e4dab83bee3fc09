"""The memory store: memoryd's writes and its memory block. I/O: the memory directory.

`MemoryStore(directory, clock)` owns `<home>/memory/`: the entry files
(boxmaker.memoryd.files), the journal (boxmaker.memoryd.journal) and `.lock`.

Rules, in the order a write follows them:

1. Where a write lands is `judge_write`'s (boxmaker.memoryd.rules): refused,
   lowered to an untrusted note, or written where it was asked.
2. One write at a time: a thread lock per store, and an exclusive `flock` on
   `.lock` so two processes never interleave. The files are read again under
   the lock for every write, so an owner's edit made between writes is kept.
3. A refused write takes no lock, writes nothing and journals nothing.
4. A write is journalled first (one line, fsynced), then its file is replaced
   atomically (temp file, fsync, rename, directory fsync), then it is answered.
   So an answered write is on disk with its journal line, a crash leaves each
   file old or new, and every entry in a file has a journal line; a crash
   between the two steps leaves a journal line for an unanswered write.
5. A write on a file that does not parse raises `MemoryFileDamagedError` and
   changes nothing: memoryd never repairs or rewrites the owner's file.
6. `memory_block()` is soul.md as written, then memory.md's and user.md's entries.
   Each identity entry is checked against the refuse rules again; one that fails,
   or one marked untrusted by hand, is left out and logged with its rule and id
   (never its text). Stored memory is never rewritten by a rule change.
7. The block has a budget, BLOCK_BYTES of UTF-8 (`boxmaker.core.model.memory_block`,
   whose rules lay it out and fit it): soul.md first (cut if it alone passes),
   then the entries that pass, in order, while the next one fits; every entry from
   the first that does not is left out whole with the rule `over-budget`, counted
   in the reply's `excluded` and named in one log line (`event=entries_over_budget`,
   the first LOGGED_IDS ids; `bxctl memory log` names more). So a store of any
   size answers a block that fits a frame and the model's context. The reply
   carries each entry's span, so loopd can cut the block to its own token budget
   by whole entries.
8. An identity write whose text could not fit the block even alone under its
   heading is refused (`rules.judge_write`): it could never reach a prompt.
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from boxmaker.core.labels import DataClass
from boxmaker.core.model.memory_block import (
    BLOCK_BYTES,
    LOGGED_IDS,
    OVER_BUDGET,
    BlockEntry,
    Rendered,
    fit_block,
)
from boxmaker.core.sanitize import refuse
from boxmaker.core.timestamps import format_timestamp
from boxmaker.ipc.files import write_atomic
from boxmaker.memoryd.files import (
    FILES,
    IDENTITY_KINDS,
    Entry,
    read_entries,
    read_soul,
    render_entries,
)
from boxmaker.memoryd.journal import JOURNAL, JournalRecord, append_record
from boxmaker.memoryd.rules import (
    Placement,
    Refused,
    WriteAction,
    demoted_answer,
    judge_write,
)

log = logging.getLogger(__name__)

LOCK = ".lock"
_ID_PREFIX = {"memory": "m", "user": "u", "note": "n"}


@dataclass(frozen=True)
class Provenance:
    """Who asked for a write: brokerd passes the session's labels with the call."""

    session: str
    call: str
    taint: DataClass
    untrusted: bool  # the session has read untrusted content


@dataclass(frozen=True)
class WriteResult:
    """The answer to a write: the model reads `answer`; `ok` is false when nothing was written."""

    ok: bool
    answer: str
    entry: Entry | None = None
    action: WriteAction | None = None
    rule: str | None = None


@dataclass(frozen=True)
class Excluded:
    """An identity entry left out of the memory block (rule 6)."""

    kind: str
    id: str
    rule: str  # the refuse rule, or "untrusted" for an entry marked so by hand


class MemoryStore:
    """memoryd's files under `directory`, written by the rules of the module docstring."""

    def __init__(self, directory: Path, clock: Callable[[], datetime]) -> None:
        self.directory = directory
        self._clock = clock
        self._lock = threading.Lock()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    # -- writes ---------------------------------------------------------------

    def add(self, kind: str, text: str, provenance: Provenance) -> WriteResult:
        """Add an identity entry to memory.md or user.md."""
        _check_identity(kind)
        return self._write(kind, text, provenance, WriteAction.ADDED, (), None)

    def replace(self, kind: str, entry_id: str, text: str, provenance: Provenance) -> WriteResult:
        """Replace the text of identity entry `entry_id` (it keeps its id)."""
        _check_identity(kind)
        return self._write(kind, text, provenance, WriteAction.REPLACED, (entry_id,), entry_id)

    def consolidate(
        self, kind: str, entry_ids: Sequence[str], text: str, provenance: Provenance
    ) -> WriteResult:
        """Replace identity entries `entry_ids` by one new entry holding `text`."""
        _check_identity(kind)
        if not entry_ids:
            return WriteResult(False, "not written: name at least one entry to consolidate.")
        ids = tuple(dict.fromkeys(entry_ids))
        return self._write(kind, text, provenance, WriteAction.CONSOLIDATED, ids, None)

    def note(self, text: str, provenance: Provenance, untrusted: bool = False) -> WriteResult:
        """Add a note to notes.md; `untrusted` marks it so whatever the rules say."""
        return self._write("note", text, provenance, WriteAction.NOTED, (), None, untrusted)

    def _write(
        self,
        kind: str,
        text: str,
        provenance: Provenance,
        action: WriteAction,
        targets: tuple[str, ...],
        keep_id: str | None,
        marked_untrusted: bool = False,
    ) -> WriteResult:
        if not text.strip():
            return WriteResult(False, "not written: the text is empty.")
        verdict = judge_write(kind, text, provenance.untrusted, marked_untrusted)
        if isinstance(verdict, Refused):
            return WriteResult(False, verdict.answer, rule=verdict.rule)
        with self._locked():
            if verdict.demoted is None and targets:
                current = read_entries(self._path(kind), kind)
                missing = [i for i in targets if i not in {e.id for e in current}]
                if missing:
                    return WriteResult(
                        False, f"not written: no entry {missing[0]} in {FILES[kind]}."
                    )
            return self._commit(kind, text, verdict, provenance, action, targets, keep_id)

    def _commit(
        self,
        kind: str,
        text: str,
        verdict: Placement,
        provenance: Provenance,
        action: WriteAction,
        targets: tuple[str, ...],
        keep_id: str | None,
    ) -> WriteResult:
        lands = verdict.kind
        path = self._path(lands)
        entries = read_entries(path, lands)
        time = format_timestamp(self._clock())
        if verdict.demoted is not None:  # lowered to a note: the identity file is untouched
            action, targets, keep_id = verdict.demoted, (), None
        entry_id = keep_id or self._new_id(lands, {e.id for e in entries})
        entry = Entry(entry_id, lands, text, verdict.untrusted, time)
        if keep_id is not None:
            kept = [entry if e.id == keep_id else e for e in entries]
        else:
            kept = [e for e in entries if e.id not in targets] + [entry]
        removed = tuple(i for i in targets if i != entry_id)
        record = JournalRecord(
            time=time,
            session=provenance.session,
            call=provenance.call,
            taint=provenance.taint,
            untrusted=provenance.untrusted,
            action=action,
            kind=kind,
            entry=entry_id,
            removed=removed,
            rule=verdict.rule,
            entry_untrusted=verdict.untrusted,
        )
        append_record(self.directory / JOURNAL, record)  # rule 4: the intent first
        write_atomic(path, render_entries(kept))
        return WriteResult(True, _answer(kind, action, verdict, entry), entry, action, verdict.rule)

    def _new_id(self, kind: str, taken: set[str]) -> str:
        while True:
            candidate = f"{_ID_PREFIX[kind]}-{secrets.token_hex(6)}"
            if candidate not in taken:
                return candidate

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            fd = os.open(
                self.directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock

    def _path(self, kind: str) -> Path:
        return self.directory / FILES[kind]

    # -- reads ----------------------------------------------------------------

    def entries(self, kind: str) -> list[Entry]:
        """The entries of one kind's file, as they are on disk."""
        return read_entries(self._path(kind), kind)

    def memory_block(self) -> tuple[str, list[Excluded]]:
        """The block's text and what it leaves out (rules 6 and 7)."""
        block, excluded = self.block_parts()
        return block.text, excluded

    def block_parts(self) -> tuple[Rendered, list[Excluded]]:
        """soul.md, then memory.md's and user.md's entries that pass (rule 6), within
        BLOCK_BYTES (rule 7): the block with its spans, and what it leaves out."""
        soul = read_soul(self.directory)
        soul = soul.rstrip("\n") if soul.strip() else ""
        passing: list[BlockEntry] = []
        refused: dict[str, Excluded] = {}
        order: list[str] = []  # "kind/id" of every identity entry, in block order
        for kind in IDENTITY_KINDS:
            for entry in self.entries(kind):
                order.append(f"{kind}/{entry.id}")
                findings = refuse(entry.text, memory=True)
                rule = findings[0].rule if findings else ("untrusted" if entry.untrusted else None)
                if rule is None:
                    passing.append(BlockEntry(entry.id, kind, entry.text))
                    continue
                refused[order[-1]] = Excluded(kind, entry.id, rule)
                log.warning("event=entry_excluded rule=%s id=%s file=%s", rule, entry.id, kind)
        fitted = fit_block(soul, passing, lambda text: len(text.encode()) <= BLOCK_BYTES)
        over = {f"{e.kind}/{e.id}": Excluded(e.kind, e.id, OVER_BUDGET) for e in fitted.left_out}
        if fitted.soul_cut:
            log.warning("event=soul_cut bytes=%d", BLOCK_BYTES)
        if over:
            log_over_budget(log, list(over.values()))
        excluded = [refused.get(key) or over[key] for key in order if key in refused or key in over]
        return fitted.block, excluded


def log_over_budget(logger: logging.Logger, left_out: Sequence[Excluded]) -> None:
    """One line naming the entries left out for want of room (the first LOGGED_IDS)."""
    named = left_out[:LOGGED_IDS]
    logger.warning(
        "event=entries_over_budget count=%d ids=%s more=%d",
        len(left_out),
        ",".join(f"{e.kind}/{e.id}" for e in named),
        len(left_out) - len(named),
    )


def _check_identity(kind: str) -> None:
    if kind not in IDENTITY_KINDS:
        raise ValueError(f"not an identity kind: {kind!r}")


def _answer(kind: str, action: WriteAction, verdict: Placement, entry: Entry) -> str:
    if verdict.demoted is not None and verdict.reason is not None:
        return demoted_answer(kind, verdict.reason)
    if action is WriteAction.NOTED:
        if verdict.untrusted and verdict.reason is not None:
            return f"saved in notes.md as an untrusted note ({entry.id}): {verdict.reason}."
        return f"saved in notes.md ({entry.id})."
    verb = {
        WriteAction.ADDED: "added to",
        WriteAction.REPLACED: "replaced in",
        WriteAction.CONSOLIDATED: "consolidated in",
    }[action]
    return f"{verb} {FILES[kind]} ({entry.id})."
