"""loopd's tool port: one tool call sent to brokerd over broker.sock, its answer awaited.

I/O: one Unix-socket connection per call (`boxmaker.ipc.client`). Waiting is
bounded by deadlines, not per-read timeouts, so a peer that trickles bytes cannot
hold a turn for ever:

    before the first frame     until timeout_ms after the call began
    after a pending frame      until the frame's `expires` plus timeout_ms

A call that waits for the owner is withdrawn when its turn is stopped (`interrupted`,
asked every `POLL_S` once brokerd has said it waits): the connection is closed, and
brokerd, finding its requester gone, takes the approval back (nothing runs, and the
audit log lists the decision as abandoned). A call not waiting for the owner is
never cut short: brokerd may be running it, and its result is logged.

Every way the port can fail becomes a `failed` answer with a fixed sentence; the
turn goes on. The envelope id of a request is its call id, and every answer must
carry it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from boxmaker.core.errors import RequestError, RequestTooLargeError
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import parse_timestamp
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
    ToolResponse,
)
from boxmaker.ipc.client import POLL_S, Request
from boxmaker.loopd.model import Interrupted, never

log = logging.getLogger(__name__)

UNAVAILABLE = "the tool broker is unavailable"
TOO_LARGE = "the request is too large for the tool broker"
NO_FINAL = "the tool broker gave no final answer"
WITHDRAWN = "the turn was stopped while this call waited for the owner; it did not run"
NOT_CONFIGURED = "no tool broker is configured"
POINTER = Runbook.BROKER_UNAVAILABLE.pointer
MAX_WAIT_S = 366 * 24 * 3600.0  # an expiry further off than this is not a real one

OnPending = Callable[[PendingApprovalResponse], None]
_FINAL = (ResultResponse, FailedResponse, DeniedResponse)


class BrokerPort:
    """Calls brokerd for each non-core tool call."""

    def __init__(
        self,
        path: Path,
        timeout_ms: int,
        *,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_ms / 1000
        self._wall = wall_clock
        self._monotonic = monotonic

    def call(
        self, request: ToolRequest, on_pending: OnPending, interrupted: Interrupted = never
    ) -> ToolResponse:
        """brokerd's final answer to `request`, or `failed` with the port's own sentence
        (`WITHDRAWN` when the turn was stopped while the call waited for the owner)."""
        waiting = False  # brokerd said the call waits for the owner

        def withdrawn() -> bool:
            return waiting and interrupted()

        try:
            sent = Request(
                self.path,
                request,
                request.call,
                self.timeout_s,
                monotonic=self._monotonic,
                cancelled=withdrawn,
                poll_s=POLL_S,
            )
        except RequestTooLargeError:
            return FailedResponse(message=TOO_LARGE)
        if self.timeout_s <= 0:
            return self._unavailable("timeout_ms is 0")
        try:
            for envelope in sent.answers():
                message = envelope.message
                if envelope.final:
                    if isinstance(message, PendingApprovalResponse):
                        return FailedResponse(message=NO_FINAL)
                    if isinstance(message, _FINAL):
                        return message
                    return self._unavailable(f"a final {message.kind}")
                if not isinstance(message, PendingApprovalResponse):
                    return self._unavailable(f"a non-final {message.kind}")
                wait = self._wait_after(message.expires)
                if wait is None:
                    return self._unavailable("an expiry too far off")
                sent.wait(wait)
                waiting = True
                on_pending(message)
        except RequestError as exc:
            return self._unavailable(str(exc))
        if withdrawn():  # answers() ended early: the connection is closed
            log.info("event=approval_withdrawn session=%s call=%s", request.session, request.call)
            return FailedResponse(message=WITHDRAWN)
        return self._unavailable("no final answer")  # answers() ends with the final one

    def _wait_after(self, expires: str) -> float | None:
        """Seconds from now until `expires` plus timeout_ms; None if that is absurd."""
        try:
            left = parse_timestamp(expires).timestamp() - self._wall()
        except (ValueError, OverflowError):
            return None
        if left > MAX_WAIT_S:
            return None
        return max(left, 0.0) + self.timeout_s

    def _unavailable(self, why: str) -> FailedResponse:
        log.error("event=broker_unavailable socket=%s why=%s %s", self.path, why, POINTER)
        return FailedResponse(message=UNAVAILABLE)
