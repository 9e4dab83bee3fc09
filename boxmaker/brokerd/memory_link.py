"""brokerd's memory link: an allowed memory tool call carried to memoryd, its answer back.

I/O: one connection per call to memoryd's broker-memory socket
(`boxmaker.ipc.client`), waited on for at most `[memory] timeout_ms`. The call
goes out only after policy allowed it (or the owner approved it) and its
Decision is on disk; it carries the arguments as policy parsed them
(`canonical_arguments`, which memoryd parses again with the same parser) and
the session's labels as they are now, so memoryd can lower a write from an
untrusted session to an untrusted note.

memoryd's answer is one final `tool_response`, `result` or `failed`; anything
else (no answer, an error frame, a denial, a pending frame, a peer that cannot
be reached) is a `failed` with one fixed sentence, logged with the reason and
the runbook pointer. The model never reads memoryd's error texts.
"""

from __future__ import annotations

import logging
from pathlib import Path

from boxmaker.core.errors import RequestError
from boxmaker.core.grants.args import canonical_arguments
from boxmaker.core.policy import Decision, SessionState
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.broker import FailedResponse, ResultResponse
from boxmaker.core.wire.memory import MemoryCall
from boxmaker.ipc.client import Request

log = logging.getLogger(__name__)

UNAVAILABLE = "the memory service is unavailable"
NOT_CONFIGURED = "memory tools are not configured"
POINTER = Runbook.MEMORYD_UNREACHABLE.pointer


class MemoryLink:
    """Sends allowed memory tool calls to memoryd (`[memory] socket` of brokerd.toml)."""

    def __init__(self, path: Path, timeout_ms: int) -> None:
        self.path = path
        self.timeout_s = timeout_ms / 1000

    def call(self, decision: Decision, labels: SessionState) -> ResultResponse | FailedResponse:
        """memoryd's answer to the decided call, or `failed` with this link's own sentence."""
        request = decision.request
        message = MemoryCall.model_validate(
            {
                "session": request.session,
                "call": request.call,
                "tool": decision.tool.value,
                "arguments": canonical_arguments(decision.args),
                "taint": labels.taint,
                "untrusted": labels.untrusted,
            }
        )
        try:
            sent = Request(self.path, message, request.call, self.timeout_s)
            for envelope in sent.answers():
                answer = envelope.message
                if envelope.final and isinstance(answer, ResultResponse | FailedResponse):
                    return answer
                final = "final" if envelope.final else "non-final"
                return self._unavailable(f"a {final} {answer.kind}")
        except RequestError as exc:
            return self._unavailable(str(exc))
        return self._unavailable("no final answer")

    def _unavailable(self, why: str) -> FailedResponse:
        log.error("event=memoryd_unreachable socket=%s why=%s %s", self.path, why, POINTER)
        return FailedResponse(message=UNAVAILABLE)
