"""brokerd's gateway link: asks posted through a scripted gatewayd, answered in chat or not.

brokerd runs in this process on real sockets; a `ScriptedServer` on the gateway
socket plays gatewayd. Whatever gatewayd does, the call is never affected:
bxctl (admin.sock) still answers it, and the failure is one log line with the
runbook pointer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.brokerd.config import GatewaySection, load_config
from boxmaker.brokerd.gateway_link import ABANDONED
from boxmaker.core.audit.records import ApprovalAnswer, ApprovalEvent
from boxmaker.core.errors import ConfigError, ErrorCode
from boxmaker.core.grants.decisions import AllowedRecord, DeniedRecord, DenyReason
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals, Approve, ApproveResult
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.gateway import (
    ApprovalOutcome,
    ApprovalPosted,
    ApprovalReply,
    ApprovalRequest,
    ReplyAnswer,
)
from boxmaker.testing.daemons import Clock, InProcessBrokerd, running_brokerd
from boxmaker.testing.homes import write_grant
from boxmaker.testing.sockets import OpenCall, Peer, Script, ScriptedServer
from boxmaker.testing.waiting import wait_until

OWNER = "owner0000000000000000000aa"
POST = "approvalpost00000000000041"
POINTER = Runbook.GATEWAY_UNREACHABLE.pointer

OnRequest = Callable[[Peer, ApprovalRequest], None]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    write_grant(
        tmp_path / "grants",
        "scratch-shell",
        tool="shell",
        mode="ask",
        max_taint="private",
        paths=[str(tmp_path / "scratch")],
    )
    return tmp_path / "scratch"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def brokerd(tmp_path: Path, scratch: Path, clock: Clock) -> Iterator[InProcessBrokerd]:
    with running_brokerd(tmp_path, clock=clock, gateway=GatewaySection(timeout_ms=5_000)) as b:
        yield b
        b.stop()
        gateway = b.daemon.gateway
        assert gateway is not None
        wait_until(lambda: gateway.threads() == 0, what="no link thread left")


_records: list[logging.LogRecord] = []


class _Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        _records.append(record)


@pytest.fixture(autouse=True)
def _keep_records() -> Iterator[None]:
    """The link's log lines, INFO included (`_posted` waits on one)."""
    handler = _Keep()
    logger = logging.getLogger("boxmaker.brokerd.gateway_link")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    _records.clear()
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _posted() -> bool:
    """gatewayd's post id is kept on the entry (the link logs it then)."""
    return any("event=approval_posted" in r.getMessage() for r in list(_records))


def socket_of(b: InProcessBrokerd) -> Path:
    path = b.config.gateway_socket
    assert path is not None
    return path


def gatewayd(on_request: OnRequest) -> Script:
    """A scripted gatewayd: `on_request` for approval_request, `ok` for every outcome."""

    def script(peer: Peer) -> None:
        message = peer.request.message
        if isinstance(message, ApprovalOutcome):
            peer.send(Ok(), final=True)
            return
        assert isinstance(message, ApprovalRequest)
        on_request(peer, message)

    return script


def posted(peer: Peer, request: ApprovalRequest) -> None:
    peer.send(ApprovalPosted(approval=request.approval, post=POST), final=False)


def post_and_hold(peer: Peer, request: ApprovalRequest) -> None:
    posted(peer, request)
    peer.hold()


def post_and_answer(answer: ReplyAnswer, reason: str | None = None) -> OnRequest:
    def on_request(peer: Peer, request: ApprovalRequest) -> None:
        posted(peer, request)
        reply = ApprovalReply(
            approval=request.approval, answer=answer, by=OWNER, post=POST, reason=reason
        )
        peer.send(reply, final=True)

    return on_request


def shell(scratch: Path, call: str = "c1") -> ToolRequest:
    arguments = orjson.dumps({"command": "make", "cwd": str(scratch)}).decode()
    return ToolRequest(session="chat-1", call=call, tool="shell", arguments=arguments)


def pending(call: OpenCall) -> PendingApprovalResponse:
    first = call.first()
    assert isinstance(first.message, PendingApprovalResponse)
    return first.message


def approval_record(b: InProcessBrokerd, seq: int) -> ApprovalEvent:
    (event,) = [
        r.event
        for r in b.records()
        if isinstance(r.event, ApprovalEvent) and r.event.decision == seq
    ]
    return event


def outcomes(server: ScriptedServer) -> list[ApprovalOutcome]:
    return [e.message for e in server.requests if isinstance(e.message, ApprovalOutcome)]


def the_outcome(server: ScriptedServer) -> ApprovalOutcome:
    wait_until(lambda: bool(outcomes(server)), what="approval_outcome sent")
    (outcome,) = outcomes(server)
    return outcome


def bxctl_approve(b: InProcessBrokerd, approval: int) -> None:
    (answer,) = b.admin(Approve(approval=approval))
    assert answer.message == ApproveResult(outcome=AllowedRecord())


def still_pending(b: InProcessBrokerd, approval: int) -> bool:
    (answer,) = b.admin(Approvals())
    assert isinstance(answer.message, ApprovalList)
    return [i.approval for i in answer.message.items] == [approval]


# --- posted, and answered in chat -----------------------------------------------------


def test_an_ask_is_posted_with_brokerds_record(brokerd: InProcessBrokerd, scratch: Path) -> None:
    with ScriptedServer(socket_of(brokerd), gatewayd(post_and_hold)) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            server.wait_for_requests(1)
            request = server.requests[0]
            assert request.final
            assert request.id == f"approval-{waiting.approval}"
            (listed,) = brokerd.admin(Approvals())
            assert isinstance(listed.message, ApprovalList)
            assert request.message == ApprovalRequest.of(listed.message.items[0])
            bxctl_approve(brokerd, waiting.approval)
            assert isinstance(call.final().message, ResultResponse)
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval, answer=ApprovalAnswer.APPROVED, by="bxctl", outcome="runs"
        )
    record = approval_record(brokerd, waiting.approval)
    assert (record.by, record.post) == ("bxctl", None)


def test_a_chat_approve_runs_the_call_and_is_recorded(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    script = gatewayd(post_and_answer(ReplyAnswer.APPROVE))
    with ScriptedServer(socket_of(brokerd), script) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            assert isinstance(call.final().message, ResultResponse)
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval, answer=ApprovalAnswer.APPROVED, by=OWNER, outcome="runs"
        )
    record = approval_record(brokerd, waiting.approval)
    assert record.answer is ApprovalAnswer.APPROVED
    assert (record.by, record.post, record.reason) == (OWNER, POST, None)
    assert record.outcome == AllowedRecord()
    assert brokerd.runtime.count == 1


def test_a_chat_refuse_with_a_reason(brokerd: InProcessBrokerd, scratch: Path) -> None:
    script = gatewayd(post_and_answer(ReplyAnswer.REFUSE, "not on a friday"))
    with ScriptedServer(socket_of(brokerd), script) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval,
            answer=ApprovalAnswer.REFUSED,
            by=OWNER,
            outcome="denied (approval_refused)",
        )
    record = approval_record(brokerd, waiting.approval)
    assert (record.answer, record.by, record.post, record.reason) == (
        ApprovalAnswer.REFUSED,
        OWNER,
        POST,
        "not on a friday",
    )
    assert record.outcome == DeniedRecord(reason=DenyReason.APPROVAL_REFUSED)
    assert brokerd.runtime.count == 0


# --- settled elsewhere ----------------------------------------------------------------


def test_bxctl_first_then_a_late_chat_reply_is_ignored(
    brokerd: InProcessBrokerd, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    reply_now = threading.Event()

    def on_request(peer: Peer, request: ApprovalRequest) -> None:
        posted(peer, request)
        assert reply_now.wait(10)
        reply = ApprovalReply(
            approval=request.approval, answer=ReplyAnswer.REFUSE, by=OWNER, post=POST
        )
        peer.send(reply, final=True)

    with ScriptedServer(socket_of(brokerd), gatewayd(on_request)) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            server.wait_for_requests(1)
            wait_until(lambda: "event=approval_posted" in caplog.text, what="posted")

            def chat_answers_while_bxctl_settles() -> None:
                # bxctl has taken the entry and is re-deciding: the reply arrives now
                reply_now.set()
                wait_until(lambda: "event=gateway_reply_late" in caplog.text, what="late")

            brokerd.grants.before_next_load(chat_answers_while_bxctl_settles)
            bxctl_approve(brokerd, waiting.approval)
            assert isinstance(call.final().message, ResultResponse)
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval, answer=ApprovalAnswer.APPROVED, by="bxctl", outcome="runs"
        )
    record = approval_record(brokerd, waiting.approval)
    assert (record.answer, record.by, record.post) == (ApprovalAnswer.APPROVED, "bxctl", None)


def test_expiry_is_reported_to_gatewayd(
    brokerd: InProcessBrokerd, scratch: Path, clock: Clock
) -> None:
    with ScriptedServer(socket_of(brokerd), gatewayd(post_and_hold)) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            server.wait_for_requests(1)
            wait_until(lambda: brokerd.daemon.table.items()[0].approval == waiting.approval)
            wait_until(_posted, what="the post id kept")
            clock.advance(900_001)
            assert call.final().message == DeniedResponse(reason=DenyReason.APPROVAL_EXPIRED)
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval,
            answer=ApprovalAnswer.EXPIRED,
            outcome="denied (approval_expired)",
        )


def test_a_requester_gone_is_reported_as_abandoned(
    brokerd: InProcessBrokerd, scratch: Path
) -> None:
    with ScriptedServer(socket_of(brokerd), gatewayd(post_and_hold)) as server:
        call = brokerd.open_call(shell(scratch))
        waiting = pending(call)
        wait_until(_posted, what="the post id kept")
        call.drop()
        assert the_outcome(server) == ApprovalOutcome(
            approval=waiting.approval, answer=ApprovalAnswer.EXPIRED, outcome=ABANDONED
        )


# --- gatewayd absent, wrong or off ---------------------------------------------------


def test_gatewayd_down_leaves_bxctl_to_answer(
    brokerd: InProcessBrokerd, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with brokerd.open_call(shell(scratch)) as call:
        waiting = pending(call)
        wait_until(lambda: "event=gateway_unreachable" in caplog.text, what="logged")
        assert still_pending(brokerd, waiting.approval)
        bxctl_approve(brokerd, waiting.approval)
        assert isinstance(call.final().message, ResultResponse)
    (line,) = [r.getMessage() for r in caplog.records if "gateway_unreachable" in r.getMessage()]
    assert f"approval={waiting.approval}" in line
    assert line.endswith(POINTER)


def send_error(peer: Peer, request: ApprovalRequest) -> None:
    peer.send(Error(code=ErrorCode.UNAVAILABLE, message="mattermost is down"), final=True)


def send_garbage(peer: Peer, request: ApprovalRequest) -> None:
    peer.send_raw(b"\x00\x00\x00\x05hello")


def send_under_another_id(peer: Peer, request: ApprovalRequest) -> None:
    peer.send(ApprovalPosted(approval=request.approval, post=POST), final=False, request_id="x9")


def post_another_approval(peer: Peer, request: ApprovalRequest) -> None:
    peer.send(ApprovalPosted(approval=request.approval + 1, post=POST), final=False)


def send_ok_instead(peer: Peer, request: ApprovalRequest) -> None:
    peer.send(Ok(), final=True)


def reply_for_another_approval(peer: Peer, request: ApprovalRequest) -> None:
    posted(peer, request)
    reply = ApprovalReply(
        approval=request.approval + 1, answer=ReplyAnswer.APPROVE, by=OWNER, post=POST
    )
    peer.send(reply, final=True)


def reply_for_another_post(peer: Peer, request: ApprovalRequest) -> None:
    posted(peer, request)
    reply = ApprovalReply(
        approval=request.approval,
        answer=ReplyAnswer.APPROVE,
        by=OWNER,
        post="someotherpost0000000000042",
    )
    peer.send(reply, final=True)


def reply_twice_posted(peer: Peer, request: ApprovalRequest) -> None:
    posted(peer, request)
    posted(peer, request)
    peer.hold()


@pytest.mark.parametrize(
    ("on_request", "event", "posted_first"),
    [
        (send_error, "event=gateway_unreachable", False),
        (send_garbage, "event=gateway_protocol", False),
        (send_under_another_id, "event=gateway_protocol", False),
        (post_another_approval, "event=gateway_wrong_approval", False),
        (send_ok_instead, "event=gateway_protocol", False),
        (reply_for_another_approval, "event=gateway_wrong_approval", True),
        (reply_for_another_post, "event=gateway_protocol", True),
        (reply_twice_posted, "event=gateway_protocol", True),
    ],
    ids=[
        "error",
        "garbage",
        "wrong-request-id",
        "another-approval-posted",
        "ok-instead",
        "reply-for-another-approval",
        "reply-for-another-post",
        "posted-twice",
    ],
)
def test_a_wrong_gatewayd_is_ignored_and_logged(
    brokerd: InProcessBrokerd,
    scratch: Path,
    caplog: pytest.LogCaptureFixture,
    on_request: OnRequest,
    event: str,
    posted_first: bool,
) -> None:
    with ScriptedServer(socket_of(brokerd), gatewayd(on_request)) as server:
        with brokerd.open_call(shell(scratch)) as call:
            waiting = pending(call)
            wait_until(lambda: event in caplog.text, what=event)
            assert still_pending(brokerd, waiting.approval)
            bxctl_approve(brokerd, waiting.approval)
            assert isinstance(call.final().message, ResultResponse)
        (line,) = [r.getMessage() for r in caplog.records if event in r.getMessage()]
        assert f"approval={waiting.approval}" in line
        assert line.endswith(POINTER)
        if posted_first:  # the post exists: it is still told the outcome
            assert the_outcome(server).by == "bxctl"
        else:
            assert outcomes(server) == []
    record = approval_record(brokerd, waiting.approval)
    assert (record.by, record.post) == ("bxctl", None)


def test_gateway_none_never_connects(tmp_path: Path, scratch: Path) -> None:
    off = GatewaySection(socket="none")
    with running_brokerd(tmp_path, gateway=off) as b:
        assert b.config.gateway_socket is None
        assert b.daemon.gateway is None
        default = b.home / "run" / "gateway" / "gateway.sock"
        with ScriptedServer(default, gatewayd(post_and_hold)) as server:
            with b.open_call(shell(scratch)) as call:
                waiting = pending(call)
                bxctl_approve(b, waiting.approval)
                assert isinstance(call.final().message, ResultResponse)
            assert server.connections == 0


def test_stopping_brokerd_ends_the_link_threads(tmp_path: Path, scratch: Path) -> None:
    with running_brokerd(tmp_path) as b, ScriptedServer(socket_of(b), gatewayd(post_and_hold)):
        call = b.open_call(shell(scratch))
        pending(call)
        wait_until(_posted, what="posted")
        gateway = b.daemon.gateway
        assert gateway is not None
        assert gateway.threads() == 1
        b.stop()
        wait_until(lambda: gateway.threads() == 0, what="the link thread ended")
        call.drop()


def test_the_gateway_socket_setting(tmp_path: Path) -> None:
    home = tmp_path / "home"
    config = load_config(None, {"BOXMAKER_HOME": str(home)})
    assert config.gateway_socket == home / "run" / "gateway" / "gateway.sock"
    assert config.gateway.timeout_ms == 10_000
    toml = tmp_path / "brokerd.toml"
    toml.write_text('[gateway]\nsocket = "none"\ntimeout_ms = 2500\n')
    config = load_config(toml, {"BOXMAKER_HOME": str(home)})
    assert config.gateway_socket is None
    assert config.gateway.timeout_ms == 2500
    toml.write_text('[gateway]\nsocket = "/run/gw.sock"\nposts = 1\n')
    with pytest.raises(ConfigError):
        load_config(toml, {"BOXMAKER_HOME": str(home)})
