"""Session logs: everything said in a session, one JSON line per turn part, replayed on resume.

I/O: `<home>/loop/sessions/<id>.jsonl`, appended with one write per line and
fsynced (`ipc.files.append_durable`), created 0600 in a 0700 directory. Entries:

    {"type": "memory", "text": ...}                  memoryd's memory block, neutralised,
                                                     first, when the session began with one
    {"type": "user",  "text": ...}
    {"type": "model", "text": ..., "ids": [...],     the token ids as generated, and the
     "calls": [{"name", "arguments", "id"}]}         calls the reply made, as read, with
                                                     their ids (`core.model.call_ids`)
    {"type": "tool",  "call": ..., "name": ..., "content": ...,
     "class": ..., "untrusted": ..., "truncated": ..., "shown": ...,
     "answers": ...}                                 the id of the model's call it answers
    {"type": "notice", "text": ...}                  loopd's own words to the model
    {"type": "compaction", "summary": ..., "replaces": [[start, end], ...],
     "dropped": ..., "before": ..., "after": ..., "untrusted": ...}

A memory entry is not a turn of its own: the turn loop renders it as part of
the system turn (`SessionLog.memory`), and so is the latest compaction's
summary. A compaction names the entries it replaces by index
(`core.model.compaction_plan`); they stay in the file, and no later prompt renders them
(`SessionLog.live`). Logs written before memory entries existed read back as they
did, and so do logs written before a reply's calls and a result's `answers`
were (their replies are handed to the template as text). A resumed session is
rebuilt from its log
exactly, so its next prompt extends the one evaluated before. A log that does
not read back whole (a line that does not parse, a torn last line, an entry of
no known type) is damaged: the session refuses to go on, and the message points
at runbook.md#session-log-damaged. Nothing is ever rewritten.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Literal

import orjson
from pydantic import Field, TypeAdapter, ValidationError

from boxmaker.core.errors import DamagedError
from boxmaker.core.home.layout import Home
from boxmaker.core.ids import is_identifier
from boxmaker.core.labels import DataClass
from boxmaker.core.model.call_ids import ALPHANUMERIC, call_ids, written_ids
from boxmaker.core.model.chat_format import ReplyCall, Role, Turn
from boxmaker.core.model.compaction_plan import covered
from boxmaker.core.model.tool_calls import Reply, ToolCall
from boxmaker.core.runbook import Runbook
from boxmaker.core.strict import Strict
from boxmaker.ipc.files import append_durable

POINTER = Runbook.SESSION_LOG_DAMAGED.pointer


class MemoryEntry(Strict):
    type: Literal["memory"] = "memory"
    text: str


class UserEntry(Strict):
    type: Literal["user"] = "user"
    text: str


class LoggedCall(Strict):
    """A call a reply made, as the turn loop read it: what the prompt hands the template."""

    name: str
    arguments: str  # JSON text
    id: str  # the model's own, or one loopd made (`core.model.call_ids`)


def new_call_id() -> str:
    """A call id of the form a template is handed (`core.model.call_ids` rule 3)."""
    return "".join(secrets.choice(ALPHANUMERIC) for _ in range(9))


def logged_calls(reply: Reply, fresh: Callable[[], str] = new_call_id) -> tuple[LoggedCall, ...]:
    """A reply's calls as the log keeps them: name, arguments and id (`core.model.call_ids`).
    A call that could not be read is logged as the result names it, `unreadable`."""
    ids = call_ids(written_ids(reply.calls), fresh)
    return tuple(
        LoggedCall(name=c.name, arguments=c.arguments, id=i)
        if isinstance(c, ToolCall)
        else LoggedCall(name="unreadable", arguments="{}", id=i)
        for c, i in zip(reply.calls, ids, strict=True)
    )


class ModelEntry(Strict):
    type: Literal["model"] = "model"
    text: str
    ids: tuple[int, ...]
    # the calls the reply made, in order; absent from logs written before it existed
    calls: tuple[LoggedCall, ...] = ()
    # the prompt's length in tokens when this reply was written (`bxctl sessions`);
    # absent from logs written before it existed
    prompt: int | None = None
    # stopped between tokens when its turn was cancelled (issue 42); replayed as written
    interrupted: bool = False


class NoticeEntry(Strict):
    """loopd's own words to the model (before a compaction: the chance to save to memory),
    rendered as an owner's turn, marked as loopd's."""

    type: Literal["notice"] = "notice"
    text: str


Span = tuple[int, int]  # entries [start, end) of the log, by index from 0


class CompactionEntry(Strict):
    """A summary that replaces the entries in `replaces` in every later prompt."""

    type: Literal["compaction"] = "compaction"
    summary: str  # neutralised; rendered in the system turn
    replaces: tuple[Span, ...]
    dropped: int = Field(ge=0)  # of the owner's turns replaced, those the summary never saw
    before: int = Field(ge=0)  # the prompt's tokens before, and after
    after: int = Field(ge=0)
    untrusted: bool  # the session had read untrusted content when it was written


class ToolEntry(Strict):
    type: Literal["tool"] = "tool"
    call: str
    name: str
    content: str
    class_: DataClass = Field(alias="class")
    untrusted: bool
    truncated: bool
    # what the model is shown of a result over its budget (`core.model.result_cut`); None:
    # the content itself. Absent from logs written before it existed.
    shown: str | None = None
    # the id of the model's call this result answers (`LoggedCall.id`); absent from
    # logs written before it existed
    answers: str | None = None


AnyEntry = MemoryEntry | UserEntry | ModelEntry | ToolEntry | NoticeEntry | CompactionEntry
Entry = Annotated[AnyEntry, Field(discriminator="type")]


_ENTRY: TypeAdapter[AnyEntry] = TypeAdapter(Entry)


def _turn(entry: AnyEntry) -> Turn:
    if isinstance(entry, UserEntry):
        return Turn(Role.USER, entry.text)
    if isinstance(entry, NoticeEntry):
        return Turn(Role.USER, entry.text)
    if isinstance(entry, ModelEntry):
        calls = tuple(ReplyCall(c.name, c.arguments, c.id) for c in entry.calls)
        return Turn(Role.MODEL, entry.text, ids=entry.ids, calls=calls)
    if isinstance(entry, ToolEntry):
        return Turn(
            Role.TOOL,
            entry.content if entry.shown is None else entry.shown,
            name=entry.name,
            call_id=entry.answers,
        )
    raise TypeError(f"a {entry.type} entry is not a turn")


class SessionLogDamagedError(DamagedError):
    """The session's log does not read back whole; the text names the file and line."""


class SessionLog:
    """One session's log: its entries so far, and appending more."""

    def __init__(self, path: Path, entries: list[AnyEntry]) -> None:
        self.path = path
        self.entries = entries

    @property
    def untrusted(self) -> bool:
        """Whether the session has read untrusted content (a summary written after it
        counts too: compaction never makes a session trusted again)."""
        return any(isinstance(e, ToolEntry | CompactionEntry) and e.untrusted for e in self.entries)

    @property
    def memory(self) -> tuple[str, ...]:
        """The memory block's text as logged (neutralised), one for each memory entry."""
        return tuple(e.text for e in self.entries if isinstance(e, MemoryEntry))

    @property
    def compactions(self) -> tuple[CompactionEntry, ...]:
        return tuple(e for e in self.entries if isinstance(e, CompactionEntry))

    @property
    def compaction(self) -> CompactionEntry | None:
        """The latest compaction: its summary stands for every entry it replaces."""
        found = self.compactions
        return found[-1] if found else None

    def live(self) -> list[tuple[int, AnyEntry]]:
        """The entries later prompts render, with their indices: every entry but the
        memory block, compactions, and what a compaction replaced."""
        gone: set[int] = set()
        for entry in self.compactions:
            gone |= covered(entry.replaces)
        return [
            (at, e)
            for at, e in enumerate(self.entries)
            if at not in gone and not isinstance(e, MemoryEntry | CompactionEntry)
        ]

    def turns(self, entries: Sequence[tuple[int, AnyEntry]] | None = None) -> list[Turn]:
        """The conversation's turns: of `entries` (default: the live ones, `live`)."""
        return [_turn(e) for _, e in (self.live() if entries is None else entries)]

    def append(self, entry: AnyEntry) -> None:
        # a reply with no calls, and a result of no model call, are logged as before
        unset = {"calls"} if isinstance(entry, ModelEntry) and not entry.calls else set()
        unset |= (
            {"interrupted"} if isinstance(entry, ModelEntry) and not entry.interrupted else set()
        )
        unset |= {"answers"} if isinstance(entry, ToolEntry) and entry.answers is None else set()
        line = orjson.dumps(entry.model_dump(mode="json", by_alias=True, exclude=unset)) + b"\n"
        append_durable(self.path, line)
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
