"""What memoryd answers to each request kind. No sockets: `boxmaker.memoryd.serve` has those.

I/O: the memory files, through `MemoryStore` and `RecallIndex`. Rules:

1. `memory_call`'s `arguments` is compact JSON text, parsed by the tool's model
   below (unknown fields refused, no coercion). Text that does not parse is
   answered `failed` with one line naming the field; nothing is written.
2. A write the store made (`WriteResult.ok`: written where asked, or lowered to
   an untrusted note) is a `result` whose content is the store's answer. A write
   the store did not make (refused by a rule, empty text, a missing entry) is
   `failed` with the store's sentence: 003 section 7 says such a write "fails
   with the rule's sentence", and brokerd's audit then records it as failed,
   not as a write that happened. A damaged memory file is `failed` too, naming it.
3. Every write that was made updates the recall index (the entry written; the
   entries a consolidation removed), so a recall sees it at once.
4. A recall answers its entries as compact JSON, `{"entries": [{id, kind, text,
   untrusted, time}, ...]}`, best first, with `untrusted: true` on the result when
   any entry is an untrusted note: brokerd then marks the session untrusted.
5. Results are class `private` (the owner's memory) and never truncated.
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from boxmaker.core.errors import BoxmakerError, ErrorCode, ProtocolError
from boxmaker.core.labels import DataClass
from boxmaker.core.messages import (
    FailedResponse,
    MemoryBlock,
    MemoryBlockReply,
    MemoryCall,
    MemoryLog,
    MemoryLogReply,
    Ok,
    Reindexed,
    ResultResponse,
    SessionUpdated,
)
from boxmaker.memoryd.files import Entry, MemoryFileDamagedError
from boxmaker.memoryd.journal import JOURNAL, JournalDamagedError, encode_record, read_journal
from boxmaker.memoryd.recall import MAX_LIMIT, RecallIndex
from boxmaker.memoryd.store import MemoryStore, Provenance, WriteResult

log = logging.getLogger(__name__)

IdentityKind = Literal["memory", "user"]
Text = Annotated[str, Field(min_length=1)]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class AddArguments(_Arguments):
    kind: IdentityKind
    text: Text


class ReplaceArguments(_Arguments):
    kind: IdentityKind
    entry: Text
    text: Text


class ConsolidateArguments(_Arguments):
    kind: IdentityKind
    entries: Annotated[list[Text], Field(min_length=1)]
    text: Text


class NoteArguments(_Arguments):
    text: Text
    untrusted: bool = False


class RecallArguments(_Arguments):
    query: Text
    limit: int = Field(default=5, ge=1, le=MAX_LIMIT)


_ARGUMENTS: dict[str, type[_Arguments]] = {
    "memory_add": AddArguments,
    "memory_replace": ReplaceArguments,
    "memory_consolidate": ConsolidateArguments,
    "memory_note": NoteArguments,
    "memory_recall": RecallArguments,
}


class ArgumentsError(ValueError):
    """The call's arguments do not parse; its text is one line."""


def parse_arguments(tool: str, arguments: str) -> _Arguments:
    """The arguments of `tool` (rule 1); ArgumentsError with one line if they do not parse."""
    try:
        return _ARGUMENTS[tool].model_validate_json(arguments)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        raise ArgumentsError(f"invalid arguments for {tool}: {where}: {first['msg']}") from exc


def _result(content: str, untrusted: bool = False) -> ResultResponse:
    return ResultResponse(
        content=content, class_=DataClass.PRIVATE, untrusted=untrusted, truncated=False
    )


def _entry_json(entry: Entry) -> dict[str, object]:
    return {
        "id": entry.id,
        "kind": entry.kind,
        "text": entry.text,
        "untrusted": entry.untrusted,
        "time": entry.time,
    }


class MemoryHandlers:
    """The answers of memoryd's three sockets, over one store and its recall index."""

    def __init__(self, store: MemoryStore, recall: RecallIndex) -> None:
        self.store = store
        self.recall = recall

    # -- loop-memory ------------------------------------------------------------

    def memory_block(self, request: MemoryBlock) -> MemoryBlockReply:
        try:
            text, excluded = self.store.memory_block()
        except MemoryFileDamagedError as exc:
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        log.info("event=memory_block session=%s excluded=%d", request.session, len(excluded))
        return MemoryBlockReply(text=text, excluded=len(excluded))

    def session_updated(self, request: SessionUpdated) -> Ok:
        log.info("event=session_updated session=%s", request.session)
        return Ok()

    # -- broker-memory ----------------------------------------------------------

    def memory_call(self, request: MemoryCall) -> ResultResponse | FailedResponse:
        try:
            arguments = parse_arguments(request.tool, request.arguments)
        except ArgumentsError as exc:
            return FailedResponse(message=str(exc))
        if isinstance(arguments, RecallArguments):
            found = self.recall.recall(arguments.query, arguments.limit)
            content = orjson.dumps({"entries": [_entry_json(e) for e in found.entries]})
            return _result(content.decode("utf-8"), untrusted=found.untrusted)
        provenance = Provenance(request.session, request.call, request.taint, request.untrusted)
        try:
            written = self._write(arguments, provenance)
        except (MemoryFileDamagedError, JournalDamagedError) as exc:
            log.error("event=memory_file_damaged %s", exc)
            return FailedResponse(message=f"not written: {exc}")
        log.info(
            "event=memory_write session=%s call=%s tool=%s ok=%s action=%s rule=%s",
            request.session,
            request.call,
            request.tool,
            written.ok,
            written.action,
            written.rule,
        )
        if not written.ok:
            return FailedResponse(message=written.answer)
        return _result(written.answer)

    def _write(self, arguments: _Arguments, provenance: Provenance) -> WriteResult:
        removed: tuple[str, ...] = ()
        if isinstance(arguments, AddArguments):
            written = self.store.add(arguments.kind, arguments.text, provenance)
        elif isinstance(arguments, ReplaceArguments):
            written = self.store.replace(
                arguments.kind, arguments.entry, arguments.text, provenance
            )
        elif isinstance(arguments, ConsolidateArguments):
            written = self.store.consolidate(
                arguments.kind, arguments.entries, arguments.text, provenance
            )
            removed = tuple(arguments.entries)
        else:
            assert isinstance(arguments, NoteArguments)
            written = self.store.note(arguments.text, provenance, arguments.untrusted)
        entry = written.entry
        if written.ok and entry is not None:  # rule 3
            self.recall.update(entry)
            if entry.kind != "note":  # a consolidation lowered to a note removes nothing
                for entry_id in removed:
                    if entry_id != entry.id:
                        self.recall.remove(entry_id, entry.kind)
        return written

    # -- owner-memory -----------------------------------------------------------

    def reindex(self) -> Reindexed:
        try:
            entries = self.recall.rebuild()
        except MemoryFileDamagedError as exc:
            raise ProtocolError(ErrorCode.UNAVAILABLE, f"the index was kept: {exc}") from exc
        log.info("event=reindexed entries=%d", entries)
        return Reindexed(entries=entries)

    def memory_log(self, request: MemoryLog) -> MemoryLogReply:
        try:
            records = read_journal(self.store.directory / JOURNAL)
        except (OSError, BoxmakerError) as exc:
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        lines = tuple(
            encode_record(r).decode("utf-8").rstrip("\n") for r in records[-request.limit :]
        )
        return MemoryLogReply(lines=lines)
