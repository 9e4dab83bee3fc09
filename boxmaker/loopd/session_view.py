"""loopd's session logs as the owner sees them: `sessions` (one summary each) and
`session_show` (a log's entries, in pages that fit a frame).

I/O: reads `<home>/loop/sessions/` (the names in it, each log's bytes and mtime)
through `SessionLogs`. Never the model, and never a session's turn lock: a log
is only ever appended to, one write per line, so it can be read while a turn
writes it. The rules:

    1. Which sessions: every `<id>.jsonl` whose id is an identifier, in id order
       (bxctl sorts them as it shows them). A file that goes away while listed
       is left out.
    2. A summary: `turns` the user entries; `tokens` the last model entry's
       `prompt` plus its ids, or the last compaction's `after` when that comes
       later in the log (0 when neither is known); `compactions` the compaction
       entries; `untrusted` any untrusted tool or compaction entry; `last` the
       file's mtime.
    3. Reading races an append: a read that ends in the middle of a line being
       written looks damaged, so a log is read up to READ_TRIES times before it
       counts as damaged.
    4. A damaged log (SessionLogDamagedError) does not break the listing: it is
       summed up from the entries before its first bad line, `untrusted` true
       (what follows the damage cannot be read, so it fails closed), and one
       `event=session_log_damaged` line with the pointer is logged. Shown, it is
       the error (the caller answers `unavailable`).
    5. A page (`show`): from entry `start`, as many entries as keep the final
       envelope within `budget` (`core.wire.frame_fit.FRAME_BUDGET`, well under the
       frame limit); `next` the first entry left out, absent when none is. A
       page from a `start` below the log's end holds at least one entry: one too
       big alone has its text cut to the longest prefix that fits (between code
       points) and is marked `cut`. A `start` at or past the end is an empty page.
    6. What an entry shows: memory, user, model and notice their text, a tool
       entry its whole content (not what the model was shown of it), `name` its
       tool and `untrusted` its flag, a compaction its summary and flag.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from boxmaker.core.errors import BoxmakerError
from boxmaker.core.fitting import largest, take
from boxmaker.core.ids import is_identifier
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.frame_fit import FRAME_BUDGET, envelope_size, item_size, paged, string_size
from boxmaker.core.wire.loop import SessionEntries, SessionList, SessionSummary, ShownEntry
from boxmaker.loopd.session_log import (
    AnyEntry,
    CompactionEntry,
    Entry,
    ModelEntry,
    SessionLogDamagedError,
    SessionLogs,
    ToolEntry,
    UserEntry,
)

log = logging.getLogger(__name__)

READ_TRIES = 3
_ENTRY: TypeAdapter[AnyEntry] = TypeAdapter(Entry)


class NoSuchSessionError(BoxmakerError):
    """`session_show` of a session that has no log."""


def summarise(
    session: str, entries: Sequence[AnyEntry], last: str, *, damaged: bool = False
) -> SessionSummary:
    """Rule 2 (rule 4 with `damaged`)."""
    tokens = 0
    for entry in entries:
        if isinstance(entry, ModelEntry):
            tokens = 0 if entry.prompt is None else entry.prompt + len(entry.ids)
        elif isinstance(entry, CompactionEntry):
            tokens = entry.after
    untrusted = damaged or any(
        isinstance(e, ToolEntry | CompactionEntry) and e.untrusted for e in entries
    )
    return SessionSummary(
        session=session,
        turns=sum(isinstance(e, UserEntry) for e in entries),
        tokens=tokens,
        compactions=sum(isinstance(e, CompactionEntry) for e in entries),
        untrusted=untrusted,
        last=last,
    )


def shown(index: int, entry: AnyEntry) -> ShownEntry:
    """Rule 6."""
    if isinstance(entry, ToolEntry):
        return ShownEntry(
            index=index, type="tool", text=entry.content, name=entry.name, untrusted=entry.untrusted
        )
    if isinstance(entry, CompactionEntry):
        return ShownEntry(
            index=index, type="compaction", text=entry.summary, untrusted=entry.untrusted
        )
    return ShownEntry(index=index, type=entry.type, text=entry.text)


def cut_to_fit(entry: ShownEntry, room: int) -> ShownEntry:
    """`entry`, its text cut to the longest prefix whose entry takes at most `room` bytes."""
    empty = entry.model_copy(update={"text": "", "cut": True})
    left = room - item_size(empty)  # what the escaped text may take
    text = entry.text
    # strict: the whole text did not fit
    low = largest(min(len(text) - 1, left), lambda n: string_size(text[:n]) <= left)
    return empty.model_copy(update={"text": text[:low]})


def page(
    session: str,
    entries: Sequence[AnyEntry],
    start: int,
    request_id: str,
    budget: int = FRAME_BUDGET,
) -> SessionEntries:
    """Rule 5: the page of `entries` from `start`."""
    # room for the largest `next` this log can have, whether or not it is sent
    base = envelope_size(SessionEntries(session=session, entries=(), next=len(entries)), request_id)
    room = budget - base
    items = (shown(at, entries[at]) for at in range(start, len(entries)))
    taken = take(items, item_size, room)  # a comma between entries
    if len(taken) == 1 and item_size(taken[0]) > room:
        taken[0] = cut_to_fit(taken[0], room)  # too big alone
    index = start + len(taken)
    following = index if index < len(entries) else None
    return SessionEntries(session=session, entries=tuple(taken), next=following)


def page_summaries(
    items: Sequence[SessionSummary], request_id: str, budget: int = FRAME_BUDGET
) -> list[tuple[SessionSummary, ...]]:
    """`items` in pages whose session_list envelopes each fit in `budget` (at least one)."""
    return paged(SessionList(items=()), items, request_id, budget)


def readable_prefix(path: Path) -> list[AnyEntry]:
    """The entries of a damaged log before its first line that is not one (rule 4)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    entries: list[AnyEntry] = []
    for line in data.split(b"\n")[:-1]:  # a last line with no newline is not whole
        try:
            entries.append(_ENTRY.validate_json(line))
        except ValidationError:
            break
    return entries


class SessionView:
    """The listing and the paged show over loopd's session logs."""

    def __init__(self, logs: SessionLogs, budget: int = FRAME_BUDGET) -> None:
        self.logs = logs
        self.budget = budget

    def _entries(self, session: str) -> list[AnyEntry]:
        """The log's entries, read whole (rule 3); SessionLogDamagedError if it is not."""
        for attempt in range(READ_TRIES):
            try:
                return self.logs.open(session).entries
            except SessionLogDamagedError:
                if attempt == READ_TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def summaries(self) -> list[SessionSummary]:
        """Rules 1 to 4: every session's summary, in id order."""
        try:
            names = sorted(os.listdir(self.logs.directory))
        except FileNotFoundError:
            return []
        items: list[SessionSummary] = []
        for name in names:
            session = name.removesuffix(".jsonl")
            if session == name or not is_identifier(session):
                continue
            path = self.logs.directory / name
            try:
                last = format_timestamp(datetime.fromtimestamp(path.stat().st_mtime, UTC))
            except FileNotFoundError:
                continue
            try:
                items.append(summarise(session, self._entries(session), last))
            except SessionLogDamagedError as exc:
                log.error("event=session_log_damaged %s", exc)
                entries = readable_prefix(path)
                items.append(summarise(session, entries, last, damaged=True))
        return items

    def show(self, session: str, start: int, request_id: str) -> SessionEntries:
        """Rule 5's page of `session`'s log; NoSuchSessionError when it has no log,
        SessionLogDamagedError when it does not read back whole."""
        if not self.logs.exists(session):
            raise NoSuchSessionError(
                f"session {session} has no log; bxctl sessions lists those loopd has"
            )
        return page(session, self._entries(session), start, request_id, self.budget)
