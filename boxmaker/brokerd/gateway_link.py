"""brokerd's gateway link: each waiting approval posted in chat by gatewayd, and its answer.

I/O: connections to gatewayd's gateway.sock (`boxmaker.ipc.client`), the ledger
(through `admin.settle`), and one thread per waiting approval. The wire is
docs/gatewayd.md's "The wire: gateway.sock". For each ask added to the pending
table, its link thread:

    1. sends `approval_request` (the entry's `PendingApproval`: brokerd's record,
       never model text) and waits at most `[gateway] timeout_ms` for
       `approval_posted {approval, post}` (not final). The post id is kept on the
       entry (`Pending.post`). Until then a settlement elsewhere does not stop it:
       a post that exists must be told its outcome.
    2. holds the request until gatewayd answers `approval_reply` (final), the
       entry is settled elsewhere (bxctl, expiry, the requester gone: closing the
       connection tells gatewayd), or brokerd stops; it checks every POLL_S. The
       approval's expiry plus EXPIRY_GRACE_S bounds the wait in any case.
    3. on a reply for this approval and this post, takes the entry out of the
       table (the table's one rule). If it got it, it answers it exactly as
       admin.sock's approve and refuse do (`admin.settle`, `by` the owner's
       Mattermost user id, `post` the post id, the owner's `reason`). If the
       entry is gone, whoever took it answers it: the reply is ignored, logged
       `event=gateway_reply_late`.
    4. once a posted entry is settled, whoever settled it, sends
       `approval_outcome` on a new connection, answered `ok` within
       `timeout_ms`: best effort, a failure is logged and nothing more.

Nothing gatewayd does or fails to do changes the call: gatewayd unreachable, an
`error` answer, an answer out of turn or malformed, or a reply for another
approval or post is one log line with the runbook pointer (`gateway_unreachable`
for no usable gatewayd, `gateway_protocol` and `gateway_wrong_approval` for
answers brokerd cannot use); the approval still waits for `bxctl approve` or its
expiry. An approval settled by its requester going away is reported to gatewayd
as `expired` with the outcome `abandoned (the requester went away)`.

Threads: each link thread ends when its entry is settled (after the outcome),
when its post failed, when the backstop passes, or within POLL_S of brokerd's
`stopping` being set; `join` waits for them, bounded, at brokerd's stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from boxmaker.brokerd.admin import settle
from boxmaker.brokerd.approvals import Pending, PendingTable, Settled
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.ledger import Ledger
from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.errors import BrokenError, ErrorCode, ProtocolError, RequestError
from boxmaker.core.policy import Denial
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import parse_timestamp
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Envelope
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
    ReplyAnswer,
)
from boxmaker.ipc.client import Request

log = logging.getLogger(__name__)

POINTER = Runbook.GATEWAY_UNREACHABLE.pointer
POLL_S = 0.25
EXPIRY_GRACE_S = 5.0  # the expiry thread settles an entry within a second of its time
ABANDONED = "abandoned (the requester went away)"
ANSWERS = {ReplyAnswer.APPROVE: ApprovalAnswer.APPROVED, ReplyAnswer.REFUSE: ApprovalAnswer.REFUSED}


class GatewayLink:
    """Posts waiting approvals through gatewayd (`[gateway] socket` of brokerd.toml)."""

    def __init__(
        self,
        path: Path,
        timeout_ms: int,
        table: PendingTable,
        ledger: Ledger,
        grants: GrantsDir,
        clock: Callable[[], str],
        stopping: threading.Event,
    ) -> None:
        self.path = path
        self.timeout_s = timeout_ms / 1000
        self.table = table
        self.ledger = ledger
        self.grants = grants
        self._clock = clock
        self._stopping = stopping
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def post(self, entry: Pending) -> None:
        """Start the link thread of an entry just added to the pending table."""
        thread = threading.Thread(
            target=self._run, args=(entry,), name=f"gateway-{entry.approval}", daemon=True
        )
        with self._lock:
            self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:  # no thread could be started: bxctl still answers it
            with self._lock:
                self._threads.discard(thread)
            self._unreachable(entry, "no thread could be started")

    def threads(self) -> int:
        """How many link threads are running."""
        with self._lock:
            return len(self._threads)

    def join(self, timeout_s: float) -> None:
        """Wait at most `timeout_s` in all for the link threads (after `stopping` is set)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread.ident is not None:  # one not yet started sees `stopping` at once
                thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self, entry: Pending) -> None:
        try:
            self._link(entry)
        except Exception:
            log.exception("event=gateway_link_failed approval=%d %s", entry.approval, POINTER)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _link(self, entry: Pending) -> None:
        reply = self._request(entry)
        if entry.post is None:
            return  # never posted: there is no post to show an outcome on
        if reply is not None:
            self._answer(entry, reply)
        settled = self._wait_settled(entry)
        if settled is not None and not self._stopping.is_set():
            self._send_outcome(entry, settled)

    # --- steps 1 and 2: the held request ------------------------------------------

    def _request(self, entry: Pending) -> ApprovalReply | None:
        """gatewayd's reply, or None (settled elsewhere, stopping, or a failure logged)."""

        def cancelled() -> bool:
            if self._stopping.is_set():
                return True
            return entry.post is not None and entry.settled is not None

        try:
            request = Request(
                self.path,
                ApprovalRequest.of(entry.item),
                f"approval-{entry.approval}",
                self.timeout_s,
                cancelled=cancelled,
                poll_s=POLL_S,
            )
            for envelope in request.answers():
                if entry.post is None:
                    if not self._posted(entry, envelope):
                        return None
                    request.wait(self._until_expiry_s(entry))
                    continue
                return self._reply(entry, envelope)
        except RequestError as exc:
            self._failed(entry, exc)
        return None

    def _posted(self, entry: Pending, envelope: Envelope) -> bool:
        """Step 1's answer: True if it is this approval's `approval_posted` (kept)."""
        message = envelope.message
        if isinstance(message, Error):
            self._unreachable(entry, f"{message.code}: {message.message!r}")
            return False
        if not isinstance(message, ApprovalPosted) or envelope.final:
            self._protocol(entry, f"a {_finality(envelope)} {message.kind} before approval_posted")
            return False
        if message.approval != entry.approval:
            self._wrong_approval(entry, message.approval)
            return False
        entry.post = message.post
        log.info("event=approval_posted approval=%d post=%s", entry.approval, message.post)
        return True

    def _reply(self, entry: Pending, envelope: Envelope) -> ApprovalReply | None:
        """Step 2's answer: the reply if it is one for this approval and its post."""
        message = envelope.message
        if isinstance(message, Error):
            self._unreachable(entry, f"{message.code}: {message.message!r}")
            return None
        if not isinstance(message, ApprovalReply) or not envelope.final:
            self._protocol(entry, f"a {_finality(envelope)} {message.kind} after approval_posted")
            return None
        if message.approval != entry.approval:
            self._wrong_approval(entry, message.approval)
            return None
        if message.post != entry.post:
            self._protocol(entry, f"a reply for post {message.post}, not {entry.post}")
            return None
        return message

    def _until_expiry_s(self, entry: Pending) -> float:
        left = parse_timestamp(entry.expires) - parse_timestamp(self._clock())
        return max(0.0, left.total_seconds()) + EXPIRY_GRACE_S

    # --- step 3: the owner's answer -------------------------------------------------

    def _answer(self, entry: Pending, reply: ApprovalReply) -> None:
        if self.table.take(entry.approval) is None:
            log.info(
                "event=gateway_reply_late approval=%d answer=%s by=%s: already answered",
                entry.approval,
                reply.answer,
                reply.by,
            )
            return
        answer = ANSWERS[reply.answer]
        reason = reply.reason if answer is ApprovalAnswer.REFUSED else None
        settle(entry, answer, self.ledger, self.grants, reason=reason, by=reply.by, post=reply.post)
        log.info(
            "event=approval_answered_in_chat approval=%d answer=%s by=%s post=%s",
            entry.approval,
            answer,
            reply.by,
            reply.post,
        )

    # --- step 4: the outcome --------------------------------------------------------

    def _wait_settled(self, entry: Pending) -> Settled | None:
        deadline = time.monotonic() + self._until_expiry_s(entry)
        while not self._stopping.is_set():
            settled = entry.wait_settled(POLL_S)
            if settled is not None:
                return settled
            if time.monotonic() > deadline:
                log.warning("event=gateway_link_gave_up approval=%d: never settled", entry.approval)
                return None
        return None

    def _send_outcome(self, entry: Pending, settled: Settled) -> None:
        message = outcome_of(entry.approval, settled)
        try:
            request = Request(self.path, message, f"outcome-{entry.approval}", self.timeout_s)
            for envelope in request.answers():
                answer = envelope.message
                if isinstance(answer, Ok) and envelope.final:
                    log.info(
                        "event=approval_outcome_sent approval=%d answer=%s",
                        entry.approval,
                        message.answer,
                    )
                elif isinstance(answer, Error):
                    self._unreachable(entry, f"outcome: {answer.code}: {answer.message!r}")
                else:
                    self._protocol(entry, f"a {_finality(envelope)} {answer.kind} to the outcome")
                return
        except RequestError as exc:
            self._failed(entry, exc, "outcome: ")

    # --- logging ------------------------------------------------------------------------

    def _failed(self, entry: Pending, exc: RequestError, what: str = "") -> None:
        cause = exc.__cause__
        if (
            isinstance(exc, BrokenError)
            and isinstance(cause, ProtocolError)
            and cause.code is not ErrorCode.UNAVAILABLE
        ):
            self._protocol(entry, f"{what}{exc}")
        else:
            self._unreachable(entry, f"{what}{exc}")

    def _unreachable(self, entry: Pending, why: str) -> None:
        log.warning(
            "event=gateway_unreachable approval=%d socket=%s why=%s %s",
            entry.approval,
            self.path,
            why,
            POINTER,
        )

    def _protocol(self, entry: Pending, why: str) -> None:
        log.warning(
            "event=gateway_protocol approval=%d socket=%s why=%s %s",
            entry.approval,
            self.path,
            why,
            POINTER,
        )

    def _wrong_approval(self, entry: Pending, got: int) -> None:
        log.warning(
            "event=gateway_wrong_approval approval=%d got=%d socket=%s %s",
            entry.approval,
            got,
            self.path,
            POINTER,
        )


def outcome_of(approval: int, settled: Settled) -> ApprovalOutcome:
    """What the post of a settled approval shows: who answered, and what came of it."""
    if settled.answer is None or settled.verdict is None:
        return ApprovalOutcome(approval=approval, answer=ApprovalAnswer.EXPIRED, outcome=ABANDONED)
    verdict = settled.verdict
    outcome = f"denied ({verdict.reason})" if isinstance(verdict, Denial) else "runs"
    return ApprovalOutcome(approval=approval, answer=settled.answer, by=settled.by, outcome=outcome)


def _finality(envelope: Envelope) -> str:
    return "final" if envelope.final else "non-final"
