"""loopd's memory port: memoryd's memory block for a new session, and word of each turn logged.

I/O: one Unix-socket connection per request to memoryd's loop-memory socket
(`boxmaker.ipc.client`), each bounded by `timeout_ms` from when it began. Two
requests, answered as docs/memoryd.md's wire says:

    block(session)            memory_block {session} -> memory_block_reply {text, excluded,
                              soul, entries}: the text as memoryd sent it, not yet
                              neutralised (the turn loop does that); `block_parts`
                              gives it cut by its spans into the soul and whole
                              entries (`core.model.memory_block`), so the loop can fit it
                              to its token budget. Any other outcome (nothing
                              listening, the deadline, an `error` frame, any other
                              answer, spans that do not match the text) is
                              MemoryUnavailableError, one line ending with the
                              runbook pointer, and is logged `event=memory_unavailable`
    session_updated(session)  session_updated {session} -> ok {}, best effort: any
                              other outcome is logged `event=session_updated_failed`
                              and never raised

The envelope id of each request is a fresh one; every answer must carry it
(`boxmaker.core.wire.connection` checks that).
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

from boxmaker.core.errors import (
    NotAllowedError,
    RequestError,
    TimedOutError,
    UnavailableError,
    UnreachableError,
)
from boxmaker.core.model.memory_block import BlockEntry, Span, render_block, split_block
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.memory import MemoryBlock, MemoryBlockReply, SessionUpdated
from boxmaker.ipc.client import Request

log = logging.getLogger(__name__)

POINTER = Runbook.MEMORY_UNAVAILABLE.pointer
MAX_WHY = 300  # characters of memoryd's own error message kept in the line


class MemoryUnavailableError(UnavailableError):
    """memoryd gave no memory block; the text says why in one line, with the pointer."""


class MemoryPort:
    """Asks memoryd, on its loop-memory socket at `path`."""

    def __init__(self, path: Path, timeout_ms: int) -> None:
        self.path = path
        self.timeout_s = timeout_ms / 1000

    def block(self, session: str) -> str:
        """The memory block for `session`, as memoryd wrote it; MemoryUnavailableError if
        memoryd does not give one."""
        soul, entries = self.block_parts(session)
        return render_block(soul, entries).text

    def block_parts(self, session: str) -> tuple[str, list[BlockEntry]]:
        """The memory block for `session` as its soul and entries, read by its spans;
        MemoryUnavailableError if memoryd does not give one that matches them."""
        answer = self._ask(MemoryBlock(session=session))
        if isinstance(answer, MemoryBlockReply):
            spans = [Span(e.id, e.kind, e.start, e.end) for e in answer.entries]
            try:
                return split_block(answer.text, answer.soul, spans)
            except ValueError as exc:
                answer = f"memoryd's block does not match its entries: {exc}"
        why = answer if isinstance(answer, str) else self._unexpected(answer)
        log.error(
            "event=memory_unavailable session=%s socket=%s why=%s %s",
            session,
            self.path,
            why,
            POINTER,
        )
        raise MemoryUnavailableError(
            f"memoryd gave no memory block for the new session ({why}): new sessions "
            f"cannot start without it, resumed ones can; {POINTER}"
        )

    def session_updated(self, session: str) -> None:
        """Tell memoryd a turn of `session` was logged; a failure is logged, never raised."""
        answer = self._ask(SessionUpdated(session=session))
        if isinstance(answer, Ok):
            return
        why = answer if isinstance(answer, str) else self._unexpected(answer)
        log.warning(
            "event=session_updated_failed session=%s socket=%s why=%s", session, self.path, why
        )

    def _ask(self, message: Message) -> Message | str:
        """memoryd's final answer to `message`, or why there is none, in a few words."""
        try:
            request = Request(self.path, message, f"m{uuid.uuid4().hex[:20]}", self.timeout_s)
            for envelope in request.answers():
                if not envelope.final:
                    return f"a non-final {envelope.message.kind}"
                return envelope.message
        except UnreachableError as exc:
            return f"nothing listens at {self.path}: {exc}"
        except NotAllowedError as exc:
            return f"not allowed to use {self.path}: {exc}"
        except TimedOutError:
            return f"no answer within {self.timeout_s * 1000:.0f} ms"
        except RequestError as exc:
            return f"the connection failed: {exc}"
        return "no final answer"  # answers() ends with the final one

    @staticmethod
    def _unexpected(answer: Message) -> str:
        if isinstance(answer, Error):
            return f"memoryd answered {answer.code}: {' '.join(answer.message.split())[:MAX_WHY]}"
        return f"memoryd answered {answer.kind}"
