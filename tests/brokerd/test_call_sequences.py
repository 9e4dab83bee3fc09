"""Sequences of calls through brokerd (000 section 12, "over sequences of calls").

A hypothesis state machine drives brokerd in this process, on its real sockets,
with a real audit writer, a `Clock` it moves and a runtime that checks the audit
log before it "runs" anything. Its steps: tool calls (allowed, asked, denied) in
three sessions, one at a time or several at once from threads; approve, refuse
and expiry of the calls waiting; answers to approvals no longer waiting; a
runtime that fails or succeeds; and brokerd restarts over the same home, which
lose the pending approvals (their calls are abandoned).

The grants give results of every label: public, private, secret, and private
from an untrusted grant. An ask grant and a public auto grant stop applying
above private, so what a call gets depends on what its session read before.

After every step:
    - each session's state file says what the calls answered so far imply, and
      its taint never went down nor its untrusted flag back to false;
    - the runtime ran exactly the calls that were allowed or approved, each
      once, and each only once the log held its Decision (allowed) or its
      Approval (approved);
and after every restart and at the end, the whole log verifies, every Approval
follows the Decision it answers, every Result the Decision (and, when asked, the
Approval that let it run) it names, one each, each session's taint_after never
goes down, and the calls abandoned are exactly those lost by restarts.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import orjson
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from boxmaker.brokerd.admin import expire as expire_entry
from boxmaker.brokerd.config import GatewaySection
from boxmaker.core.audit.records import (
    ApprovalAnswer,
    ApprovalEvent,
    AuditRecord,
    DecisionEvent,
    ResultEvent,
    decode_record,
)
from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import AllowedRecord, AskRecord, DeniedRecord, DenyReason
from boxmaker.core.grants.tools import ReadFileArgs, ShellArgs, WriteFileArgs
from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass, highest
from boxmaker.core.policy import SessionState
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import Approve, ApproveResult, Refuse
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Message
from boxmaker.sandbox.runner import RunError, RunFailure, RunOutput, RunSpec
from boxmaker.testing.daemons import Clock, InProcessBrokerd, start_brokerd
from boxmaker.testing.homes import read_records, verify_log, write_grant
from boxmaker.testing.runtime import RecordingRuntime
from boxmaker.testing.sockets import OpenCall, exchange

TTL_MS = 60_000
# tmpfs where there is one: the calls here are about order, not durability, and a
# sync there costs nothing (`test_concurrency` and the ledger's tests sync on disk)
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
SESSIONS = ("s0", "s1", "s2")
OK = RunOutput(content="ok", truncated=False)
FAILS = RunError(RunFailure.TIMED_OUT)

# --- the grants, and what each kind of call gets -------------------------------------


@dataclass(frozen=True)
class Label:
    """Runs, and its result carries this label."""

    class_: DataClass
    untrusted: bool = False


@dataclass(frozen=True)
class Denied:
    reason: DenyReason


ASK = "ask"
Expect = Label | Denied | str

PRIVATE = DataClass.PRIVATE
SECRET = DataClass.SECRET


def write_grants(grants: Path, base: Path) -> None:
    def read_grant(
        grant_id: str,
        where: str,
        *,
        mode: str = "auto",
        max_taint: str = "secret",
        result_class: str = "private",
        untrusted: bool = False,
    ) -> None:
        write_grant(
            grants,
            grant_id,
            tool="read_file",
            mode=mode,
            max_taint=max_taint,
            result_class=result_class,
            untrusted=untrusted,
            paths=[str(base / where)],
        )

    read_grant("notes-read", "notes")
    read_grant("keys-read", "keys", result_class="secret")
    read_grant("web-read", "web", untrusted=True)
    read_grant("pub-read", "pub", result_class="public", max_taint="private")
    read_grant("vault-deny", "keys/vault", mode="deny")
    write_grant(
        grants,
        "scratch-shell",
        tool="shell",
        mode="ask",
        max_taint="private",
        paths=[str(base / "scratch")],
    )
    write_grant(grants, "out-write", tool="write_file", mode="ask", paths=[str(base / "out")])


def expect(kind: str, taint: DataClass) -> Expect:
    """What a call of `kind` gets in a session at `taint` (the oracle, by hand)."""
    match kind:
        case "read_notes":
            return Label(PRIVATE)
        case "read_keys":
            return Label(SECRET)
        case "read_web":
            return Label(PRIVATE, untrusted=True)
        case "read_pub":
            return (
                Label(DataClass.PUBLIC) if taint <= PRIVATE else Denied(DenyReason.TAINT_TOO_HIGH)
            )
        case "read_vault":
            return Denied(DenyReason.DENIED_BY_GRANT)
        case "read_elsewhere":
            return Denied(DenyReason.NO_GRANT)
        case "shell":
            return ASK if taint <= PRIVATE else Denied(DenyReason.TAINT_TOO_HIGH)
        case "write_out":
            return ASK
    raise AssertionError(kind)


def expect_approved(kind: str, asked_at: DataClass, taint: DataClass) -> Label | Denied:
    """What approving a waiting call of `kind`, asked at `asked_at`, gives, the session
    now at `taint`: a denial of the re-decision first, then the approval's binding (a
    taint other than the one asked at is approval_stale)."""
    if kind == "shell" and taint > PRIVATE:
        return Denied(DenyReason.TAINT_TOO_HIGH)
    assert kind in ("shell", "write_out")
    return Label(PRIVATE) if taint == asked_at else Denied(DenyReason.APPROVAL_STALE)


IMMEDIATE = ("read_notes", "read_keys", "read_web", "read_pub", "read_vault", "read_elsewhere")
KINDS = (*IMMEDIATE, "shell", "write_out")


def request(base: Path, session: str, call: str, kind: str) -> ToolRequest:
    """The call's id is its file name, or its shell command: what the runtime sees."""
    folder = {
        "read_notes": "notes",
        "read_keys": "keys",
        "read_web": "web",
        "read_pub": "pub",
        "read_vault": "keys/vault",
        "read_elsewhere": "elsewhere",
    }
    if kind == "shell":
        tool, arguments = "shell", {"command": call, "cwd": str(base / "scratch")}
    elif kind == "write_out":
        tool, arguments = "write_file", {"path": str(base / "out" / call), "content": "x"}
    else:
        tool, arguments = "read_file", {"path": str(base / folder[kind] / call)}
    return ToolRequest(
        session=session, call=call, tool=tool, arguments=orjson.dumps(arguments).decode()
    )


def call_of(spec: RunSpec) -> str:
    match spec.arguments:
        case ReadFileArgs(path=path) | WriteFileArgs(path=path):
            return posixpath.basename(path)
        case ShellArgs(command=command):
            return command
    raise AssertionError(f"unexpected spec {spec}")


# --- the runtime that checks the log first ---------------------------------------------


def complete_records(home: Path) -> list[AuditRecord]:
    """The records on disk now; a line still being written (no newline yet) is left out."""
    audit = Home(home).audit
    records: list[AuditRecord] = []
    for path in sorted(audit.glob("*.jsonl")):
        *lines, _rest = path.read_bytes().split(b"\n")
        records.extend(decode_record(line) for line in lines)
    return records


class CheckingRuntime(RecordingRuntime):
    """Records every spec, after checking that the log already allows its call."""

    def __init__(self) -> None:
        super().__init__()
        self.home: Path | None = None
        self.violations: list[str] = []

    def run(self, spec: RunSpec) -> RunOutput | RunError:
        call = call_of(spec)
        assert self.home is not None
        allowed = False
        for record in complete_records(self.home):
            event = record.event
            if isinstance(event, DecisionEvent | ApprovalEvent) and event.call == call:
                allowed = event.outcome == AllowedRecord() and (
                    isinstance(event, DecisionEvent) or event.answer is ApprovalAnswer.APPROVED
                )
        if not allowed:
            self.violations.append(f"{call} ran without an allowed Decision or an Approval")
        if any(call_of(s) == call for s in self.specs):
            self.violations.append(f"{call} ran twice")
        return super().run(spec)


# --- the log, read whole --------------------------------------------------------------


def check_records(records: list[AuditRecord]) -> None:
    """Every Approval and Result follows what it names, with matching seq, once."""
    decisions: dict[int, DecisionEvent] = {}
    approvals: dict[int, ApprovalEvent] = {}
    results: set[int] = set()
    taint_after: dict[str, DataClass] = {}
    for record in records:
        event = record.event
        if isinstance(event, DecisionEvent):
            decisions[record.seq] = event
            continue
        assert isinstance(event, ApprovalEvent | ResultEvent), record
        decision = decisions.get(event.decision)
        assert decision is not None, f"seq {record.seq} names no earlier Decision"
        assert (decision.session, decision.call) == (event.session, event.call), record
        if isinstance(event, ApprovalEvent):
            assert decision.outcome == AskRecord(), record
            assert event.decision not in approvals, f"a second Approval at seq {record.seq}"
            approvals[event.decision] = event
            continue
        assert event.decision not in results, f"a second Result at seq {record.seq}"
        results.add(event.decision)
        if decision.outcome != AllowedRecord():
            assert decision.outcome == AskRecord(), record
            approval = approvals.get(event.decision)
            assert approval is not None, f"the Result at seq {record.seq} follows no Approval"
            assert approval.answer is ApprovalAnswer.APPROVED
            assert approval.outcome == AllowedRecord()
        before = taint_after.get(event.session, PRIVATE)
        assert event.taint_after >= before, f"taint went down at seq {record.seq}"
        taint_after[event.session] = event.taint_after


def check_log(home: Path, abandoned: set[int]) -> None:
    report = verify_log(home)
    assert report.ok, report.failure
    assert report.unfinished == ()
    assert set(report.abandoned) == abandoned
    assert report.clock_warnings == ()
    assert report.torn_tail is None
    check_records(read_records(home))


# --- the machine ------------------------------------------------------------------------


@dataclass
class Waiting:
    call: OpenCall
    session: str
    kind: str
    approval: int
    taint: DataClass  # the session's when it asked: what an approval is bound to


class CallSequences(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="bx-seq-", dir=SCRATCH))
        write_grants(self.base / "grants", self.base)
        self.clock = Clock()
        self.runtime = CheckingRuntime()
        self.brokerd: InProcessBrokerd = start_brokerd(
            self.base,
            ttl_ms=TTL_MS,
            runtime=self.runtime,
            clock=self.clock,
            gateway=GatewaySection(socket="none"),  # no chat: no thread per ask
        )
        assert self.brokerd.home.parent == self.base  # nothing made elsewhere to remove
        self.runtime.home = self.brokerd.home
        self.states: dict[str, SessionState] = {}  # what the answers so far imply
        self.seen: dict[str, SessionState] = {}  # the state files as last read
        self.pending: list[Waiting] = []
        self.gone: list[int] = []  # approvals answered, expired or lost
        self.abandoned: set[int] = set()
        self.ran: list[str] = []
        self.calls = 0
        self.failing = False

    # -- helpers --

    def _next_call(self) -> str:
        self.calls += 1
        return f"c{self.calls}"

    def _taint(self, session: str) -> DataClass:
        return self.states.get(session, SessionState()).taint

    def _answered(self, call: str, session: str, message: Message, options: list[Expect]) -> None:
        """Check a final answer against what may come; count the run; raise the model."""
        for option in options:
            if isinstance(option, Denied) and message == DeniedResponse(reason=option.reason):
                return
            if not isinstance(option, Label):
                continue
            if self.failing and message == FailedResponse(message=FAILS.failure.value):
                self.ran.append(call)
                return
            if (
                isinstance(message, ResultResponse)
                and message.class_ is option.class_
                and message.untrusted is option.untrusted
            ):
                self.ran.append(call)
                state = self.states.get(session, SessionState())
                self.states[session] = SessionState(
                    taint=highest(state.taint, option.class_),
                    untrusted=state.untrusted or option.untrusted,
                )
                return
        raise AssertionError(f"{call}: {message!r} is none of {options}")

    def _admin(self, message: Message) -> Message:
        answers = self.brokerd.admin(message)
        assert [a.final for a in answers] == [True]
        return answers[0].message

    def _take(self, pick: int) -> Waiting:
        waiting = self.pending.pop(pick % len(self.pending))
        self.gone.append(waiting.approval)
        return waiting

    # -- rules --

    @rule(session=st.sampled_from(SESSIONS), kind=st.sampled_from(KINDS))
    def call(self, session: str, kind: str) -> None:
        call = self._next_call()
        req = request(self.base, session, call, kind)
        expected = expect(kind, self._taint(session))
        if expected == ASK:
            opened = self.brokerd.open_call(req)
            first = opened.first()
            assert not first.final
            assert isinstance(first.message, PendingApprovalResponse)
            waiting = Waiting(opened, session, kind, first.message.approval, self._taint(session))
            self.pending.append(waiting)
            return
        answers = self.brokerd.tool(req, call)
        assert [a.final for a in answers] == [True]
        self._answered(call, session, answers[0].message, [expected])

    @rule(session=st.sampled_from(SESSIONS), kind=st.sampled_from(("shell", "write_out")))
    def ask(self, session: str, kind: str) -> None:
        """A call to an ask grant (as `call` makes too): more calls waiting to be answered."""
        self.call(session, kind)

    @rule(
        batch=st.lists(
            st.tuples(st.sampled_from(SESSIONS), st.sampled_from(IMMEDIATE)), min_size=2, max_size=4
        )
    )
    def burst(self, batch: list[tuple[str, str]]) -> None:
        """Several calls at once, from threads; within a session, any order may win."""
        requests = [request(self.base, s, self._next_call(), k) for s, k in batch]
        answers: list[Message | None] = [None] * len(requests)

        def send(index: int) -> None:
            req = requests[index]
            (final,) = exchange(self.brokerd.broker_socket, req, req.call)
            answers[index] = final.message

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        event("calls at once")
        raised = {s for s, k in batch if k == "read_keys" and not self.failing}
        taints = {session: self._taint(session) for session in SESSIONS}  # before the batch
        for (session, kind), req, answer in zip(batch, requests, answers, strict=True):
            assert answer is not None, f"{req.call} got no answer"
            options = [expect(kind, taints[session])]
            if session in raised:  # a secret read in the same batch may have come first
                options.append(expect(kind, SECRET))
            self._answered(req.call, session, answer, options)

    @precondition(lambda self: self.pending)
    @rule(pick=st.integers(0, 15))
    def approve(self, pick: int) -> None:
        waiting = self._take(pick)
        expected = expect_approved(waiting.kind, waiting.taint, self._taint(waiting.session))
        result = self._admin(Approve(approval=waiting.approval))
        assert isinstance(result, ApproveResult)
        if isinstance(expected, Denied):
            assert result.outcome == DeniedRecord(reason=expected.reason)
        else:
            assert result.outcome == AllowedRecord()
        final = waiting.call.final()
        waiting.call.drop()
        self._answered(waiting.call.request.call, waiting.session, final.message, [expected])
        event("an approval")

    @precondition(lambda self: self.pending)
    @rule(pick=st.integers(0, 15))
    def refuse(self, pick: int) -> None:
        waiting = self._take(pick)
        assert self._admin(Refuse(approval=waiting.approval, reason="not now")) == Ok()
        final = waiting.call.final()
        waiting.call.drop()
        assert final.message == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
        event("a refusal")

    @rule()
    def expire(self) -> None:
        """The clock passes every waiting call's expiry; the expiry step runs now (the
        expiry thread, which looks once a second, may take some first: same answer)."""
        self.clock.advance(TTL_MS + 1)
        daemon = self.brokerd.daemon
        for entry in daemon.table.take_expired(self.clock()):
            expire_entry(entry, daemon.ledger, daemon.grants)
        while self.pending:
            waiting = self._take(0)
            final = waiting.call.final()
            waiting.call.drop()
            assert final.message == DeniedResponse(reason=DenyReason.APPROVAL_EXPIRED)
            event("an expiry")

    @precondition(lambda self: self.gone)
    @rule(pick=st.integers(0, 15), approve=st.booleans())
    def answer_one_no_longer_waiting(self, pick: int, approve: bool) -> None:
        approval = self.gone[pick % len(self.gone)]
        message = Approve(approval=approval) if approve else Refuse(approval=approval)
        answer = self._admin(message)
        assert isinstance(answer, Error)
        assert answer.code is ErrorCode.NO_SUCH_APPROVAL

    @rule(failing=st.booleans())
    def runtime_fails(self, failing: bool) -> None:
        self.failing = failing
        self.runtime.answer = FAILS if failing else OK

    @rule()
    def restart(self) -> None:
        """brokerd stops and starts again: the waiting calls are lost (abandoned)."""

        def between() -> None:
            while self.pending:
                waiting = self._take(0)
                waiting.call.drop()
                self.abandoned.add(waiting.approval)
            check_log(self.brokerd.home, self.abandoned)

        self.brokerd = self.brokerd.restart(between)
        event("a restart")

    # -- invariants --

    @invariant()
    def state_files_say_what_the_answers_imply(self) -> None:
        sessions = Home(self.brokerd.home).broker_sessions
        for session in SESSIONS:
            path = sessions / f"{session}.json"
            expected = self.states.get(session, SessionState())
            if not path.exists():
                # no file until a result raises the session above private and trusted
                assert expected == SessionState(), f"{session}: {expected} expected, no file"
                continue
            raw = json.loads(path.read_bytes())
            state = SessionState(taint=DataClass(raw["taint"]), untrusted=raw["untrusted"])
            assert state == expected, f"{session}: {state} on disk, {expected} expected"
            before = self.seen.get(session, SessionState())
            assert state.taint >= before.taint, f"{session}: taint went down"
            assert state.untrusted or not before.untrusted, f"{session}: trusted again"
            self.seen[session] = state

    @invariant()
    def only_what_was_allowed_ran(self) -> None:
        assert self.runtime.violations == []
        assert sorted(call_of(s) for s in self.runtime.specs) == sorted(self.ran)

    def teardown(self) -> None:
        try:
            while self.pending:
                waiting = self._take(0)
                waiting.call.drop()
                self.abandoned.add(waiting.approval)
            self.brokerd.stop()
            check_log(self.brokerd.home, self.abandoned)
        finally:
            for waiting in self.pending:
                waiting.call.drop()
            self.brokerd.stop()
            shutil.rmtree(self.base, ignore_errors=True)


CallSequences.TestCase.settings = settings(
    max_examples=500,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCallSequences = CallSequences.TestCase
