"""The ledger: the audit writer and every session's state behind one lock.

I/O: through the writer (the audit log), the session store (state files) and
the clock it is given. A thread holds the lock for exactly one of three steps,
each as a whole up to the write of its record, and never while a tool runs, an
approval is awaited or a record is being synced:

    decide     read the clock and the session's state, decide, stage the Decision record
    approval   read the clock and the state, re-decide (or not), stage the Approval record
    result     read the clock and the state, raise it, write the state file (only
               when the result changed it), stage the Result record

Without it, two results for one session could each read private and the second
write would put the taint back down, and two records could take the same seq.
Each step reads the clock inside the lock, so records are written in the order
of their times: a time read before the lock could lose the race for it to a
later one, and `audit verify` would report the clock going backwards.

Staging writes the record (`AuditSink.stage`); the step then lets go of the lock
and waits for the record to be durable (`wait_durable`), so that the steps of
other threads stage theirs meanwhile and one fsync makes the whole group durable
(group commit, `audit_writer`). A step's answer (the outcome, the verdict, the
response to send) is returned only after that wait: nothing is acted on before
its record is durable. A step that staged after another sees what that one
wrote (its state file, its place in the chain) before it is durable, but its own
record comes later in the file, and a record is durable only once every record
before it is: whatever it allows is allowed only once the other's is on disk too.

A Decision record carries the arguments as received, unless they are over
`argument_size.MAX_ARGUMENT_BYTES`: then it carries the fixed placeholder of
`argument_size.recorded_arguments` (their length and sha256), and policy has
denied the call `invalid_arguments`.

After any failed audit write or sync (a failed wait included), or any exception
part-way through a step, the ledger is poisoned: the writer's idea of the chain's
head may be wrong, so every later call is denied with `audit_unavailable` until
brokerd restarts (and the startup check puts the tail right).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from boxmaker.brokerd.audit_writer import Appended, Position, Ticket
from boxmaker.brokerd.session_state import SessionStore, StateUnreadableError
from boxmaker.core.audit.records import (
    ApprovalAnswer,
    ApprovalEvent,
    AuditEvent,
    DecisionEvent,
    ResultEvent,
    ResultStatus,
)
from boxmaker.core.errors import UnavailableError
from boxmaker.core.grants.argument_size import recorded_arguments
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.hashes import sha256_hex
from boxmaker.core.labels import DataClass, highest
from boxmaker.core.policy import Ask, Decision, Denial, Outcome, SessionState, decide, redecide
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.broker import FailedResponse, ResultResponse, ToolRequest
from boxmaker.core.wire.broker_admin import UntrustedBy

log = logging.getLogger(__name__)

NOT_RECORDED = "the result could not be recorded"

# what a Decision record says of a session whose state file cannot be read
UNKNOWN_STATE = SessionState(taint=DataClass.SECRET, untrusted=True)


class AuditSink(Protocol):
    """What the ledger needs of the audit writer (`audit_writer.AuditWriter`)."""

    def append(self, event: AuditEvent, now: str) -> Appended:
        """Write and sync one record. Raises on any failure, and for ever after."""
        ...

    def stage(self, event: AuditEvent, now: str) -> Ticket:
        """Write one record, not yet synced. Raises on any failure, and for ever after."""
        ...

    def wait_durable(self, ticket: Ticket) -> None:
        """Return once the staged record is synced; raise if it never will be."""
        ...

    def close(self) -> None: ...

    def durable_head(self) -> tuple[int, str] | None:
        """The last record's seq and hash, once durable (audit checkpoints); None if none."""
        ...

    @property
    def position(self) -> Position:
        """Where the next record goes (its seq, and the head it chains from)."""
        ...


class LedgerPoisonedError(UnavailableError):
    """An earlier audit write failed; nothing more is written by this process."""


@dataclass(frozen=True, slots=True)
class Decided:
    outcome: Outcome
    seq: int | None  # the Decision record's seq; None when it could not be written
    state: SessionState


class Ledger:
    def __init__(self, writer: AuditSink, states: SessionStore, clock: Callable[[], str]) -> None:
        self._writer = writer
        self._states = states
        self._clock = clock
        self._lock = threading.Lock()
        self._poisoned = False

    @property
    def poisoned(self) -> bool:
        return self._poisoned

    def close(self) -> None:
        """Wait for the step in progress to stage its record, then refuse every later one.

        A clean stop: the writer's own close then syncs what was staged, so a step
        still waiting for its record gets its answer.
        """
        with self._lock:
            self._poisoned = True

    def _durable(self, ticket: Ticket) -> None:
        """Wait, outside the lock, for a staged record; a failure poisons the ledger."""
        try:
            self._writer.wait_durable(ticket)
        except BaseException:
            if not self._poisoned:  # once for a whole failed group, not once per caller
                self._poisoned = True  # only ever set, never cleared: no lock needed
                log.exception("event=audit_unavailable %s", Runbook.AUDIT_UNAVAILABLE.pointer)
            raise

    @contextmanager
    def _step(self) -> Iterator[None]:
        with self._lock:
            if self._poisoned:
                raise LedgerPoisonedError
            try:
                yield
            except StateUnreadableError:
                raise  # nothing was written: the ledger is still sound
            except LedgerPoisonedError:
                raise
            except BaseException:
                self._poisoned = True
                log.exception("event=audit_unavailable %s", Runbook.AUDIT_UNAVAILABLE.pointer)
                raise

    def decide(self, request: ToolRequest, grants: GrantSet) -> Decided:
        """Step one: the outcome, on disk before anyone acts on it."""
        try:
            with self._step():
                now = self._clock()
                state = self._read_state(request.session)
                if state is None:
                    decided, ticket = self._stage_decision(
                        request, Denial(DenyReason.STATE_UNREADABLE), UNKNOWN_STATE, now
                    )
                else:
                    decided, ticket = self._stage_decision(
                        request, decide(request, grants, state, now), state, now
                    )
            self._durable(ticket)
            return decided
        except Exception:  # poisoned by _step or _durable, which logged it
            log.error("event=denied reason=audit_unavailable %s", Runbook.AUDIT_UNAVAILABLE.pointer)
            return Decided(Denial(DenyReason.AUDIT_UNAVAILABLE), None, SessionState())

    def _stage_decision(
        self, request: ToolRequest, outcome: Outcome, state: SessionState, now: str
    ) -> tuple[Decided, Ticket]:
        grant, digest = _grant_of(outcome)
        ticket = self._writer.stage(
            DecisionEvent(
                session=request.session,
                call=request.call,
                tool=request.tool,
                arguments=recorded_arguments(request.arguments),
                outcome=outcome.record(),
                grant=grant,
                grant_sha256=digest,
                taint=state.taint,
                untrusted=state.untrusted,
            ),
            now,
        )
        return Decided(outcome, ticket.seq, state), ticket

    def answer(
        self,
        ask: Ask,
        seq: int,
        answer: ApprovalAnswer,
        grants: Callable[[], GrantSet],
        *,
        reason: str | None = None,
        by: str | None = None,
        post: str | None = None,
    ) -> Decision | Denial:
        """Step two: the verdict on an ask, recorded. Approve re-decides with `grants()`.

        `by` is who answered (`bxctl`, or the owner's Mattermost user id), `post` the
        approval's chat post when the answer came over chat.
        """
        request = ask.request
        verdict: Decision | Denial
        try:
            with self._step():
                now = self._clock()
                read = self._read_state(request.session)
                if read is None:
                    state, verdict = UNKNOWN_STATE, Denial(DenyReason.STATE_UNREADABLE)
                else:
                    state, verdict = read, _verdict(ask, seq, answer, grants, read, now)
                grant, digest = _grant_of(verdict)
                ticket = self._writer.stage(
                    ApprovalEvent(
                        session=request.session,
                        call=request.call,
                        decision=seq,
                        answer=answer,
                        by=by,
                        post=post,
                        reason=reason,
                        outcome=verdict.record(),
                        grant=grant,
                        grant_sha256=digest,
                        taint=state.taint,
                        untrusted=state.untrusted,
                    ),
                    now,
                )
            self._durable(ticket)
            return verdict
        except Exception:  # poisoned by _step or _durable, which logged it
            log.error("event=approval_unrecorded %s", Runbook.AUDIT_UNAVAILABLE.pointer)
            return Denial(DenyReason.AUDIT_UNAVAILABLE)

    def labels(self, session: str) -> SessionState:
        """The session's labels now (secret and untrusted when its state cannot be read)."""
        with self._lock:
            state = self._read_state(session)
        return UNKNOWN_STATE if state is None else state

    def _read_state(self, session: str) -> SessionState | None:
        """The session's state; None, logged with the runbook pointer, if it cannot be read."""
        try:
            return self._states.read(session)
        except StateUnreadableError as exc:
            log.error("event=state_unreadable %s; %s", exc, Runbook.BROKER_STATE_DAMAGED.pointer)
            return None

    def record_result(
        self,
        decision: Decision,
        seq: int,
        response: ResultResponse | FailedResponse,
        flag: str | None = None,
    ) -> ResultResponse | FailedResponse:
        """Step three: raise the taint on disk, record the result; only then may it be sent.

        A result's labels are the decision's raised by the result's own: a sandbox
        result carries the decision's, and memoryd marks a recall that returned an
        untrusted note (memory-tainted). `flag`, the flag rule the result's content
        matched, makes it untrusted whatever its grant says, and is named in the
        Result record (and in the session's `untrusted_by` when it is the first).
        The answer sent carries the same labels.
        """
        request = decision.request
        result_class, untrusted = decision.result_class, decision.untrusted
        if isinstance(response, ResultResponse):
            result_class = highest(result_class, response.class_)
            untrusted = untrusted or response.untrusted or flag is not None
            response = response.model_copy(update={"class_": result_class, "untrusted": untrusted})
        content = response.content if isinstance(response, ResultResponse) else response.message
        body = content.encode()
        try:
            with self._step():
                now = self._clock()
                state = self._states.read(request.session)
                after = state
                if isinstance(response, ResultResponse):
                    after = SessionState(
                        taint=highest(state.taint, result_class),
                        untrusted=state.untrusted or untrusted,
                        untrusted_by=_untrusted_by(state, request, untrusted, flag),
                    )
                    if after != state:  # most results raise nothing: no file to sync
                        self._states.write(request.session, after)
                ticket = self._writer.stage(
                    ResultEvent(
                        session=request.session,
                        call=request.call,
                        decision=seq,
                        status=ResultStatus.RESULT
                        if isinstance(response, ResultResponse)
                        else ResultStatus.FAILED,
                        class_=result_class,
                        untrusted=untrusted,
                        truncated=isinstance(response, ResultResponse) and response.truncated,
                        bytes=len(body),
                        sha256=sha256_hex(body),
                        taint_after=after.taint,
                        flag=flag if isinstance(response, ResultResponse) else None,
                    ),
                    now,
                )
            self._durable(ticket)
            return response
        except Exception:  # poisoned by _step or _durable (which logged it), or an unreadable state
            log.error(
                "event=result_unrecorded session=%s %s",
                request.session,
                Runbook.AUDIT_UNAVAILABLE.pointer,
            )
            return FailedResponse(message=NOT_RECORDED)


def _verdict(
    ask: Ask,
    seq: int,
    answer: ApprovalAnswer,
    grants: Callable[[], GrantSet],
    state: SessionState,
    now: str,
) -> Decision | Denial:
    if answer is ApprovalAnswer.REFUSED:
        return Denial(DenyReason.APPROVAL_REFUSED)
    if answer is ApprovalAnswer.EXPIRED:
        return Denial(DenyReason.APPROVAL_EXPIRED)
    current = grants()
    if not current.valid:
        return Denial(DenyReason.GRANTS_INVALID)
    verdict = redecide(ask, current, state, now)
    if isinstance(verdict, Denial) and verdict.reason is DenyReason.APPROVAL_STALE:
        log.info("event=approval_stale approval=%d %s", seq, verdict.detail)
    return verdict


def _untrusted_by(
    state: SessionState, request: ToolRequest, untrusted: bool, flag: str | None
) -> UntrustedBy | None:
    """Who made the session untrusted: kept from before, or this call (and the flag rule
    its content matched, if any) if it is the first."""
    if state.untrusted:
        return state.untrusted_by
    if untrusted:
        return UntrustedBy(session=request.session, call=request.call, tool=request.tool, rule=flag)
    return None


def _grant_of(outcome: Outcome) -> tuple[str | None, str | None]:
    if isinstance(outcome, Denial):
        return outcome.grant, outcome.grant_sha256
    return outcome.grant.id, outcome.grant.sha256
