"""Session logs: everything said in a session, one JSON line per turn part, replayed on resume.

I/O: `<home>/loop/sessions/<id>.jsonl`, appended with one write per line and
fsynced, created 0600 in a 0700 directory. Entries:

    {"type": "memory", "text": ...}                  memoryd's memory block, neutralised,
                                                     first, when the session began with one
    {"type": "user",  "text": ...}
    {"type": "model", "text": ..., "ids": [...]}     the token ids as generated
    {"type": "tool",  "call": ..., "name": ..., "content": ...,
     "class": ..., "untrusted": ..., "truncated": ...}

A memory entry is not a turn of its own: the turn loop renders it as part of
the system turn (`SessionLog.memory`). Logs written before memory entries
existed read back as they did. A resumed session is rebuilt from its log
exactly, so its next prompt extends the one evaluated before. A log that does
not read back whole (a line that does not parse, a torn last line, an entry of
no known type) is damaged: the session refuses to go on, and the message points
at runbook.md#session-log-damaged. Nothing is ever rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from boxmaker.core.chat_format import Role, Turn
from boxmaker.core.decisions import Strict
from boxmaker.core.ids import is_identifier
from boxmaker.core.labels import DataClass
from boxmaker.core.layout import Home
from boxmaker.core.runbook import Runbook

POINTER = Runbook.SESSION_LOG_DAMAGED.pointer


class MemoryEntry(Strict):
    type: Literal["memory"] = "memory"
    text: str


class UserEntry(Strict):
    type: Literal["user"] = "user"
    text: str


class ModelEntry(Strict):
    type: Literal["model"] = "model"
    text: str
    ids: tuple[int, ...]


class ToolEntry(Strict):
    type: Literal["tool"] = "tool"
    call: str
    name: str
    content: str
    class_: DataClass = Field(alias="class")
    untrusted: bool
    truncated: bool
    # what the model is shown of a result over its budget (`core.result_cut`); None:
    # the content itself. Absent from logs written before it existed.
    shown: str | None = None


AnyEntry = MemoryEntry | UserEntry | ModelEntry | ToolEntry
Entry = Annotated[AnyEntry, Field(discriminator="type")]


_ENTRY: TypeAdapter[AnyEntry] = TypeAdapter(Entry)


class SessionLogDamagedError(Exception):
    """The session's log does not read back whole; the text names the file and line."""


class SessionLog:
    """One session's log: its entries so far, and appending more."""

    def __init__(self, path: Path, entries: list[AnyEntry]) -> None:
        self.path = path
        self.entries = entries

    @property
    def untrusted(self) -> bool:
        """Whether the session has read untrusted content."""
        return any(isinstance(e, ToolEntry) and e.untrusted for e in self.entries)

    @property
    def memory(self) -> tuple[str, ...]:
        """The memory block's text as logged (neutralised), one for each memory entry."""
        return tuple(e.text for e in self.entries if isinstance(e, MemoryEntry))

    def turns(self) -> list[Turn]:
        """The conversation's turns: every entry but the memory block (`memory`)."""
        turns: list[Turn] = []
        for entry in self.entries:
            if isinstance(entry, MemoryEntry):
                continue
            if isinstance(entry, UserEntry):
                turns.append(Turn(Role.USER, entry.text))
            elif isinstance(entry, ModelEntry):
                turns.append(Turn(Role.MODEL, entry.text, ids=entry.ids))
            else:
                shown = entry.content if entry.shown is None else entry.shown
                turns.append(Turn(Role.TOOL, shown, name=entry.name))
        return turns

    def append(self, entry: AnyEntry) -> None:
        line = orjson.dumps(entry.model_dump(mode="json", by_alias=True)) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write to {self.path}")
            os.fsync(fd)
        finally:
            os.close(fd)
        self.entries.append(entry)


class SessionLogs:
    def __init__(self, home: Path) -> None:
        self.directory = Home(home).loop_sessions

    def path(self, session: str) -> Path:
        if not is_identifier(session):
            raise ValueError(f"{session!r} is not a session identifier")
        return self.directory / f"{session}.jsonl"

    def exists(self, session: str) -> bool:
        return self.path(session).exists()

    def open(self, session: str) -> SessionLog:
        """The session's log, read back whole; SessionLogDamagedError if it is not."""
        path = self.path(session)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return SessionLog(path, [])
        except OSError as exc:
            raise SessionLogDamagedError(
                f"{path}: cannot be read: {exc.strerror}; {POINTER}"
            ) from exc
        if data and not data.endswith(b"\n"):
            count = data.count(b"\n") + 1
            raise SessionLogDamagedError(f"{path}:{count}: the last line is cut short; {POINTER}")
        entries: list[AnyEntry] = []
        for number, line in enumerate(data.splitlines(), start=1):
            try:
                entries.append(_ENTRY.validate_json(line))
            except ValidationError as exc:
                raise SessionLogDamagedError(
                    f"{path}:{number}: not a session log entry; {POINTER}"
                ) from exc
        return SessionLog(path, entries)
