"""admin.sock's handlers: the owner's requests to brokerd, one handler per kind that
`core.home.links.OWNER_BROKER` accepts.

I/O: the connection, the ledger (Approval records), the grants directory. The
thread that takes an entry out of the pending table answers it: it writes the
Approval record, hands the verdict to the waiting connection thread, and only
then answers bxctl. Expiry works the same way from its own thread.

The approval list is sent in pages (`core.wire.frame_fit.page_items`) so that it always
fits in frames: every page but the last as a `final: false` approval_list, the
last as the final one; bxctl joins their items. So is the session state list
(`session_states`, for `bxctl sessions`): each session brokerd keeps a state file
for, read as a decision reads it but without the ledger lock (a state file is
replaced by a rename, so a read sees the old file or the new one). A file that
cannot be read is listed failing closed, as a decision takes it (`secret`,
untrusted: every call of that session is denied `state_unreadable`), and logged
with runbook.md#broker-state-damaged; the other sessions are listed as they are.
A state directory that cannot be listed is answered `unavailable` with the same
pointer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.brokerd.approvals import Mismatch, Pending, PendingTable, Verdict
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.ledger import UNKNOWN_STATE, Ledger
from boxmaker.brokerd.session_state import SessionStore, StateUnreadableError
from boxmaker.core.audit.records import ApprovalAnswer
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.policy import DIGEST_SHORT, Denial
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.broker_admin import (
    ApprovalList,
    Approvals,
    Approve,
    ApproveResult,
    AuditCheckpoint,
    CheckGrants,
    GrantsReport,
    PendingApproval,
    Refuse,
    SessionStateItem,
    SessionStateList,
    SessionStates,
)
from boxmaker.core.wire.common import Error, Ok, Status, StatusReport
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.frame_fit import FRAME_BUDGET, page_items, paged
from boxmaker.core.wire.gateway import BY_BXCTL
from boxmaker.ipc.connection import Connection, Handlers, answering

log = logging.getLogger(__name__)

BY = BY_BXCTL


@dataclass
class AdminHandler:
    ledger: Ledger
    grants: GrantsDir
    table: PendingTable
    status: Callable[[], StatusReport]
    checkpoint: Callable[[], Message]  # checkpoint_reply, or an error (Brokerd.checkpoint)
    sessions: SessionStore

    def handlers(self) -> Handlers:
        """admin.sock's handler of each kind it accepts (`core.home.links.OWNER_BROKER`)."""
        return {
            Approvals: self.approvals,
            SessionStates: self.session_states,
            CheckGrants: answering(self.check_grants),
            Status: answering(self.report_status),
            AuditCheckpoint: answering(self.take_checkpoint),
            Approve: answering(self.approve),
            Refuse: answering(self.refuse),
        }

    def approvals(self, conn: Connection, _: Approvals) -> None:
        *pages, last = page_items(self.listed(), conn.request_id)
        for page in pages:
            conn.send(ApprovalList(items=page), final=False)
        conn.send(ApprovalList(items=last), final=True)

    def session_states(self, conn: Connection, _: SessionStates) -> None:
        listed = self.session_state_items()
        if isinstance(listed, Error):
            conn.send(listed, final=True)
            return
        *pages, last = page_states(listed, conn.request_id)
        for page in pages:
            conn.send(SessionStateList(items=page), final=False)
        conn.send(SessionStateList(items=last), final=True)

    def listed(self) -> list[PendingApproval]:
        """What waits, each with the call that made its session untrusted as the
        session's state says now: a session that turned untrusted after the ask shows
        it too (approving re-checks `when_untrusted` all the same)."""
        items: list[PendingApproval] = []
        for item in self.table.items():
            if item.untrusted_by is None:
                try:
                    state = self.sessions.read(item.session)
                except StateUnreadableError:
                    state = UNKNOWN_STATE
                if state.untrusted and state.untrusted_by is not None:
                    item = item.model_copy(update={"untrusted_by": state.untrusted_by})
            items.append(item)
        return items

    def session_state_items(self) -> list[SessionStateItem] | Error:
        """Every session's state as brokerd has it (the module docstring); an error
        when the state directory cannot be listed."""
        pointer = Runbook.BROKER_STATE_DAMAGED.pointer
        try:
            found = self.sessions.states()
        except StateUnreadableError as exc:
            log.error("event=state_unreadable %s; %s", exc, pointer)
            return Error(
                code=ErrorCode.UNAVAILABLE,
                message=f"brokerd cannot list its session states; {pointer}",
            )
        items: list[SessionStateItem] = []
        for session, state in found:
            if isinstance(state, StateUnreadableError):
                log.error("event=state_unreadable %s; %s", state, pointer)
                state = UNKNOWN_STATE
            items.append(
                SessionStateItem(
                    session=session,
                    taint=state.taint,
                    untrusted=state.untrusted,
                    untrusted_by=state.untrusted_by,
                )
            )
        return items

    def check_grants(self, _: CheckGrants) -> GrantsReport:
        return GrantsReport(problems=self.grants.load().problems)

    def report_status(self, _: Status) -> StatusReport:
        return self.status()

    def take_checkpoint(self, _: AuditCheckpoint) -> Message:
        return self.checkpoint()

    def approve(self, message: Approve) -> Message:
        if message.digest is not None:
            return self._approve_bound(message.approval, message.digest)
        verdict = self._settle(message.approval, ApprovalAnswer.APPROVED)
        if verdict is None:
            return _no_such(message.approval)
        return ApproveResult(outcome=verdict.record())

    def refuse(self, message: Refuse) -> Message:
        verdict = self._settle(message.approval, ApprovalAnswer.REFUSED, message.reason)
        if verdict is None:
            return _no_such(message.approval)
        if isinstance(verdict, Denial) and verdict.reason is DenyReason.AUDIT_UNAVAILABLE:
            return Error(
                code=ErrorCode.UNAVAILABLE,
                message="refused, but the audit log cannot be written; "
                + Runbook.AUDIT_UNAVAILABLE.pointer,
            )
        return Ok()

    def _settle(
        self, approval: int, answer: ApprovalAnswer, reason: str | None = None
    ) -> Verdict | None:
        """Take the entry and answer it (None if someone else has); the verdict."""
        entry = self.table.take(approval)
        if entry is None:
            return None
        return settle(entry, answer, self.ledger, self.grants, reason=reason, by=BY)

    def _approve_bound(self, approval: int, digest: str) -> Message:
        """Approve only if the approval's digest starts with `digest`; else it stays pending."""
        entry = self.table.take_bound(approval, digest)
        if entry is None:
            return _no_such(approval)
        if isinstance(entry, Mismatch):
            return Error(
                code=ErrorCode.DIGEST_MISMATCH,
                message=f"approval {approval} has digest {entry.digest[:DIGEST_SHORT]}, not"
                f" {digest}; it is still pending",
            )
        verdict = settle(entry, ApprovalAnswer.APPROVED, self.ledger, self.grants, by=BY)
        return ApproveResult(outcome=verdict.record())


def page_states(
    items: list[SessionStateItem], request_id: str, budget: int = FRAME_BUDGET
) -> list[tuple[SessionStateItem, ...]]:
    """`items` in pages whose session_state_list envelopes each fit (at least one page)."""
    return paged(SessionStateList(items=()), items, request_id, budget)


def _no_such(approval: int) -> Error:
    return Error(code=ErrorCode.NO_SUCH_APPROVAL, message=f"no pending approval {approval}")


def expire_loop(
    table: PendingTable,
    ledger: Ledger,
    grants: GrantsDir,
    clock: Callable[[], str],
    stopping: threading.Event,
    every_s: float = 1.0,
) -> None:
    """Deny every approval whose time is up, once a second, until `stopping` is set."""
    while not stopping.wait(every_s):
        for entry in table.take_expired(clock()):
            expire(entry, ledger, grants)


def expire(entry: Pending, ledger: Ledger, grants: GrantsDir) -> None:
    settle(entry, ApprovalAnswer.EXPIRED, ledger, grants)
    log.info("event=approval_expired approval=%d", entry.approval)


def settle(
    entry: Pending,
    answer: ApprovalAnswer,
    ledger: Ledger,
    grants: GrantsDir,
    *,
    reason: str | None = None,
    by: str | None = None,
    post: str | None = None,
) -> Verdict:
    """Record the answer to an entry this thread took out of the table, and hand it over.

    bxctl's approve and refuse, the expiry thread and an answer in chat (`by` the
    owner's Mattermost user id, `post` the approval's post) all come here.
    """
    verdict = ledger.answer(
        entry.ask, entry.approval, answer, grants.load, reason=reason, by=by, post=post
    )
    entry.send(verdict, answer, by)
    return verdict
