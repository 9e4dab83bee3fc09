"""What memoryd answers to each request kind. No sockets: `boxmaker.memoryd.serve` has those.

I/O: the memory files, through `MemoryStore` and `RecallIndex`. Rules:

1. `memory_call`'s `arguments` is compact JSON text, parsed again by the parser
   policy used in brokerd (`boxmaker.core.grants.args`: unknown fields refused, no
   coercion). Text that does not parse is answered `failed` with one line
   naming the field; nothing is written. So is a tool the tool table says runs
   here (`MemoryCall.tool` names only those) that has no code here.
2. A write the store made (`WriteResult.ok`: written where asked, or lowered to
   an untrusted note) is a `result` whose content is the store's answer. A write
   the store did not make (refused by a rule, empty text, a missing entry) is
   `failed` with the store's sentence: 003 section 7 says such a write "fails
   with the rule's sentence", and brokerd's audit then records it as failed,
   not as a write that happened. A damaged memory file is `failed` too, naming it.
3. Every write that was made updates the recall index (the entry written; the
   entries a consolidation removed), so a recall sees it at once.
4. A recall answers its entries as compact JSON, `{"entries": [{id, kind, text,
   untrusted, time}, ...]}`, best first, in pages that each fit well inside a frame
   (`recall_pages`: the `page` argument picks one, and a page says how to ask for
   the next), with `untrusted: true` on the result when any entry it found is
   untrusted (recall's rule 5), whatever page is shown: brokerd then marks the
   session untrusted.
5. Results are class `private` (the owner's memory), and truncated only when a
   recalled entry was too large for a page alone and was cut.
6. `memory_log` answers the journal's last lines and, built afresh, the entries
   the memory block leaves out now with their rules (the first MAX_LOG_EXCLUDED,
   and how many more), so the owner sees what no new session is told.
"""

from __future__ import annotations

import logging

from boxmaker.core.errors import ArgsError, BoxmakerError, ErrorCode, ProtocolError
from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.tools import (
    MemoryAddArgs,
    MemoryArgs,
    MemoryConsolidateArgs,
    MemoryRecallArgs,
    MemoryReplaceArgs,
    ToolName,
)
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import FailedResponse, ResultResponse
from boxmaker.core.wire.common import Ok
from boxmaker.core.wire.memory import (
    MAX_LOG_EXCLUDED,
    BlockExclusion,
    BlockSpan,
    MemoryBlock,
    MemoryBlockReply,
    MemoryCall,
    MemoryLog,
    MemoryLogReply,
    Reindexed,
    SessionUpdated,
)
from boxmaker.memoryd.files import MemoryFileDamagedError
from boxmaker.memoryd.journal import JOURNAL, JournalDamagedError, encode_record, read_journal
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.recall_pages import recall_page
from boxmaker.memoryd.store import MemoryStore, Provenance, WriteResult

log = logging.getLogger(__name__)


def _result(content: str, untrusted: bool = False, truncated: bool = False) -> ResultResponse:
    return ResultResponse(
        content=content, class_=DataClass.PRIVATE, untrusted=untrusted, truncated=truncated
    )


class MemoryHandlers:
    """The answers of memoryd's three sockets, over one store and its recall index."""

    def __init__(self, store: MemoryStore, recall: RecallIndex) -> None:
        self.store = store
        self.recall = recall

    # -- loop-memory ------------------------------------------------------------

    def memory_block(self, request: MemoryBlock) -> MemoryBlockReply:
        try:
            block, excluded = self.store.block_parts()
        except MemoryFileDamagedError as exc:
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        log.info("event=memory_block session=%s excluded=%d", request.session, len(excluded))
        spans = tuple(
            BlockSpan(id=s.id, kind=s.kind, start=s.start, end=s.end)  # type: ignore[arg-type]
            for s in block.spans
        )
        return MemoryBlockReply(
            text=block.text, excluded=len(excluded), soul=block.soul, entries=spans
        )

    def session_updated(self, request: SessionUpdated) -> Ok:
        log.info("event=session_updated session=%s", request.session)
        return Ok()

    # -- broker-memory ----------------------------------------------------------

    def memory_call(self, request: MemoryCall) -> ResultResponse | FailedResponse:
        try:
            arguments = parse_arguments(ToolName(request.tool), request.arguments)
        except ArgsError as exc:
            return FailedResponse(message=f"invalid arguments for {request.tool}: {exc}")
        if isinstance(arguments, MemoryRecallArgs):
            found = self.recall.recall(arguments.query, arguments.limit)
            page = recall_page(found.entries, arguments.page)
            return _result(page.content, untrusted=found.untrusted, truncated=page.truncated)
        if not isinstance(arguments, MemoryArgs):  # a row of the tool table with no code here
            return FailedResponse(message=f"memoryd has no code for {request.tool}")
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

    def _write(self, arguments: MemoryArgs, provenance: Provenance) -> WriteResult:
        removed: tuple[str, ...] = ()
        if isinstance(arguments, MemoryAddArgs):
            written = self.store.add(arguments.kind, arguments.text, provenance)
        elif isinstance(arguments, MemoryReplaceArgs):
            written = self.store.replace(
                arguments.kind, arguments.entry, arguments.text, provenance
            )
        elif isinstance(arguments, MemoryConsolidateArgs):
            written = self.store.consolidate(
                arguments.kind, arguments.entries, arguments.text, provenance
            )
            removed = tuple(arguments.entries)
        else:
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
        try:
            _block, excluded = self.store.block_parts()
        except MemoryFileDamagedError as exc:
            raise ProtocolError(ErrorCode.UNAVAILABLE, str(exc)) from exc
        named = tuple(
            BlockExclusion(id=e.id, kind=e.kind, rule=e.rule)  # type: ignore[arg-type]
            for e in excluded[:MAX_LOG_EXCLUDED]
        )
        return MemoryLogReply(lines=lines, excluded=named, excluded_more=len(excluded) - len(named))
