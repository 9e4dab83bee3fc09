"""One broker.sock connection: one tool request, from decision to answer.

I/O: the connection (an `ipc.connection.Connection`), the ledger, the runtime.
The order, for every request:

    1. read the grants afresh, decide, write the Decision record (ledger step one);
       a denial is answered now and nothing else is written;
    2. ask: add the call to the pending table (with the digest it is bound to,
       `core.policy`, and the call that made the session untrusted, if it is),
       send `pending_approval`, have it posted in chat (`gateway_link`, when
       configured: its own thread), and wait
       for the verdict, checking every second that the requester is still there;
       if it has gone and this thread takes its own entry back, nothing is written
       (verify lists the decision as abandoned);
    3. allowed or approved: check the requester once more (gone: a failed Result
       "the requester went away", and nothing runs), run (a memory tool is sent
       to memoryd through the memory link with the session's labels as they are
       now; every other tool runs in the sandbox runtime), cut a result too large
       for one frame (`core.wire.frame_fit.fit_result`: marked truncated, so the record
       describes what is sent), run the flag rules over what is sent (a result that
       matches one is untrusted whatever its grant says, and the Result record and
       the session's `untrusted_by` name the rule), then raise the taint and write
       the Result record (ledger step three), and only then answer.

Every Decision, Approval and Result record takes its time from the ledger's
clock, under the ledger's lock; this module's clock only dates the approval
it shows the owner.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from boxmaker.brokerd.approvals import Pending, PendingTable, Verdict
from boxmaker.brokerd.gateway_link import GatewayLink
from boxmaker.brokerd.grants_dir import GrantsDir
from boxmaker.brokerd.ledger import Ledger
from boxmaker.brokerd.memory_link import NOT_CONFIGURED, MemoryLink
from boxmaker.core.grants.args import canonical_arguments
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.policy import Ask, Decision, Denial, SessionState
from boxmaker.core.sanitize import word_pass
from boxmaker.core.sanitize.flagging import flag_rule, prepare
from boxmaker.core.timestamps import add_ms
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import PendingApproval
from boxmaker.core.wire.frame_fit import fit_result
from boxmaker.ipc.connection import Connection
from boxmaker.sandbox.runner import Runtime, run

log = logging.getLogger(__name__)

WENT_AWAY = "the requester went away"
CHECK_EVERY_S = 1.0


@dataclass
class BrokerHandler:
    ledger: Ledger
    grants: GrantsDir
    runtime: Runtime
    table: PendingTable
    clock: Callable[[], str]
    ttl_ms: int
    memory: MemoryLink | None = None
    gateway: GatewayLink | None = None

    def __post_init__(self) -> None:
        # the flag rules' tables, built beside the start rather than by the first result
        threading.Thread(target=prepare, name="flag-tables", daemon=True).start()
        if not word_pass.compiled():
            log.warning(
                "event=flag_rules_in_python the flag rules' C pass was not built when"
                " boxmaker was installed: each tool result takes several times as long"
                " to check; install a C compiler and Python's headers (Debian:"
                " build-essential python3-dev), then reinstall boxmaker"
            )

    def __call__(self, conn: Connection, request: ToolRequest) -> None:
        """broker.sock's one kind (`core.home.links.LOOP_BROKER`): a tool call, decided and run."""
        decided = self.ledger.decide(request, self.grants.load())
        outcome = decided.outcome
        if isinstance(outcome, Denial) or decided.seq is None:
            conn.send(_denied(outcome), final=True)
            return
        seq = decided.seq
        if isinstance(outcome, Ask):
            verdict = self._wait_for_owner(conn, outcome, seq, decided.state)
            if verdict is None:
                return  # the requester went away while waiting: abandoned
            if isinstance(verdict, Denial):
                conn.send(_denied(verdict), final=True)
                return
            if conn.peer_gone():
                self.ledger.record_result(verdict, seq, FailedResponse(message=WENT_AWAY))
                return
            outcome = verdict
        response = self._run(outcome)
        rule = None
        if isinstance(response, ResultResponse):
            response = fit_result(response, conn.request_id)
            rule = flag_rule(response.content)
            if rule is not None:
                log.info("event=result_flagged seq=%d rule=%s", seq, rule)
        conn.send(self.ledger.record_result(outcome, seq, response, rule), final=True)

    def _run(self, decision: Decision) -> ResultResponse | FailedResponse:
        if not decision.tool.is_memory:
            return run(decision, self.runtime)
        if self.memory is None:
            return FailedResponse(message=NOT_CONFIGURED)
        return self.memory.call(decision, self.ledger.labels(decision.request.session))

    def _wait_for_owner(
        self, conn: Connection, ask: Ask, seq: int, state: SessionState
    ) -> Verdict | None:
        now = self.clock()
        expires = add_ms(now, self.ttl_ms)
        if ask.grant.expires is not None and ask.grant.expires < expires:
            expires = ask.grant.expires
        request = ask.request
        entry = Pending(
            approval=seq,
            ask=ask,
            item=PendingApproval(
                approval=seq,
                session=request.session,
                call=request.call,
                tool=request.tool,
                arguments=canonical_arguments(ask.args),
                grant=ask.grant.id,
                taint=state.taint,
                created=now,
                expires=expires,
                digest=ask.digest,
                untrusted_by=state.untrusted_by if state.untrusted else None,
            ),
        )
        self.table.add(entry)
        try:
            conn.send(PendingApprovalResponse(approval=seq, expires=expires), final=False)
        except OSError:
            log.info("event=requester_gone approval=%d", seq)
        if self.gateway is not None:
            self.gateway.post(entry)
        while True:
            verdict = entry.wait(CHECK_EVERY_S)
            if verdict is not None:
                return verdict
            if conn.peer_gone():
                if self.table.take(seq) is entry:
                    entry.abandon()
                    log.info("event=approval_abandoned approval=%d", seq)
                    return None
                # someone took it first and is answering: wait for that answer
                while (verdict := entry.wait(CHECK_EVERY_S)) is None:
                    pass
                return verdict


def _denied(outcome: Decision | Ask | Denial) -> DeniedResponse:
    if not isinstance(outcome, Denial):
        return DeniedResponse(reason=DenyReason.AUDIT_UNAVAILABLE)
    detail = outcome.detail if outcome.reason is DenyReason.INVALID_ARGUMENTS else None
    return DeniedResponse(reason=outcome.reason, detail=detail)
