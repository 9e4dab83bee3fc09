"""loopd's BrokerPort against a fake brokerd on a real Unix socket.

Each failure of the port is a `failed` answer with its fixed sentence; waiting is
bounded by deadlines (timeout_ms from the call's start, and after a pending frame
its `expires` plus timeout_ms), so these tests use a small timeout_ms.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.common import Error, Ok
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.loop import ContentEvent, TurnEvent
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.testing.homes import make_home
from boxmaker.testing.peer_scripts import (
    answer,
    answer_with_id,
    close_early,
    in_ms,
    never_answer,
    pending_then,
)
from boxmaker.testing.sockets import Peer, Script, ScriptedServer

UNAVAILABLE = "the tool broker is unavailable"
TIMEOUT_MS = 300
RESULT = ResultResponse(
    content="line one\n", class_=DataClass.PRIVATE, untrusted=True, truncated=False
)


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    home = make_home(tmp_path)
    yield Home(home).broker_socket
    if home.parent != tmp_path:  # a short directory made for the socket path
        shutil.rmtree(home.parent)


def request(call: str = "c1", arguments: str = '{"path":"/home/owner/a.md"}') -> ToolRequest:
    return ToolRequest(session="chat-1", call=call, tool="read_file", arguments=arguments)


def call(
    path: Path, script: Script, timeout_ms: int = TIMEOUT_MS, req: ToolRequest | None = None
) -> tuple[Message, list[PendingApprovalResponse], ScriptedServer, float]:
    """Run one call through the port against a server running `script`; the answer,
    the pending frames the callback saw, the server (stopped), and the seconds taken."""
    pendings: list[PendingApprovalResponse] = []
    with ScriptedServer(path, script) as server:
        port = BrokerPort(path, timeout_ms)
        start = time.monotonic()
        response = port.call(req or request(), pendings.append)
        took = time.monotonic() - start
    return response, pendings, server, took


def test_a_result_is_delivered_as_brokerd_sent_it(socket_path: Path) -> None:
    response, pendings, server, _ = call(socket_path, answer(RESULT))
    assert response == RESULT
    assert pendings == []
    (sent,) = server.requests
    assert sent.id == "c1"  # the envelope id is the call id
    assert sent.final is True
    assert sent.message == request()


@pytest.mark.parametrize("reason", list(DenyReason), ids=str)
def test_a_denial_is_delivered_with_its_reason(socket_path: Path, reason: DenyReason) -> None:
    detail = (
        "unknown field `file`, expected `path`" if reason is DenyReason.INVALID_ARGUMENTS else None
    )
    denied = DeniedResponse(reason=reason, detail=detail)
    response, _, _, _ = call(socket_path, answer(denied))
    assert response == denied


def test_the_pending_callback_sees_the_pending_frame_before_the_final_answer(
    socket_path: Path,
) -> None:
    denied = DeniedResponse(reason=DenyReason.APPROVAL_REFUSED)
    response, pendings, _, _ = call(socket_path, pending_then(denied, approval=41))
    assert response == denied
    (pending,) = pendings
    assert pending.approval == 41


def test_a_broker_that_is_gone_is_unavailable_and_logged_with_its_pointer(
    socket_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert not socket_path.exists()
    with caplog.at_level(logging.ERROR):
        response = BrokerPort(socket_path, TIMEOUT_MS).call(request(), lambda _: None)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert any(r.getMessage().endswith("see runbook.md#broker-unavailable") for r in caplog.records)


def test_a_broker_that_accepts_and_never_answers_times_out_after_timeout_ms(
    socket_path: Path,
) -> None:
    response, _, server, took = call(socket_path, never_answer)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert server.connections == 1
    assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 5.0


def test_a_broker_that_closes_early_is_unavailable(socket_path: Path) -> None:
    response, _, server, _ = call(socket_path, close_early)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert len(server.requests) == 1


def test_a_broker_that_closes_after_the_pending_frame_is_unavailable(socket_path: Path) -> None:
    def pending_and_close(peer: Peer) -> None:
        peer.send(PendingApprovalResponse(approval=3, expires=in_ms(60_000)), final=False)

    response, pendings, _, _ = call(socket_path, pending_and_close)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert [p.approval for p in pendings] == [3]


def test_a_final_frame_after_expires_but_within_timeout_ms_of_it_is_delivered(
    socket_path: Path,
) -> None:
    # The final frame comes 500 ms after the call began, later than timeout_ms (300)
    # after the call's start, but within timeout_ms of the pending frame's expires.
    script = pending_then(RESULT, expires_in_ms=250, after_expiry_ms=100)
    response, pendings, _, took = call(socket_path, script)
    assert response == RESULT
    assert len(pendings) == 1
    assert took > TIMEOUT_MS / 1000


def test_after_a_pending_frame_the_wait_ends_at_expires_plus_timeout_ms(
    socket_path: Path,
) -> None:
    response, pendings, _, took = call(socket_path, pending_then(None, expires_in_ms=200))
    assert response == FailedResponse(message=UNAVAILABLE)
    assert len(pendings) == 1
    assert took >= (200 + TIMEOUT_MS) / 1000 - 0.01  # expires is kept to the millisecond


def test_a_pending_frame_as_the_final_answer_is_no_final_answer(socket_path: Path) -> None:
    pending = PendingApprovalResponse(approval=7, expires="2026-11-30T12:00:00.000Z")
    response, _, _, _ = call(socket_path, answer(pending))
    assert response == FailedResponse(message="the tool broker gave no final answer")


def test_a_request_too_large_for_one_frame_is_refused_before_connecting(
    socket_path: Path,
) -> None:
    big = request(arguments='{"path":"/a","content":"' + "x" * 1_100_000 + '"}')
    response, _, server, _ = call(socket_path, answer(RESULT), req=big)
    assert response == FailedResponse(message="the request is too large for the tool broker")
    assert server.connections == 0


def test_timeout_ms_zero_fails_closed_without_asking(socket_path: Path) -> None:
    response, _, server, _ = call(socket_path, answer(RESULT), timeout_ms=0)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert server.connections == 0


def test_an_answer_with_another_id_is_refused(socket_path: Path) -> None:
    response, _, _, _ = call(socket_path, answer_with_id(RESULT, "c2"))
    assert response == FailedResponse(message=UNAVAILABLE)


def test_a_pending_frame_with_another_id_is_refused_and_not_reported(socket_path: Path) -> None:
    def script(peer: Peer) -> None:
        pending = PendingApprovalResponse(approval=5, expires=in_ms(60_000))
        peer.send(pending, final=False, request_id="c2")
        peer.send(RESULT, final=True)

    response, pendings, _, _ = call(socket_path, script)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert pendings == []


@pytest.mark.parametrize(
    ("message", "final"),
    [
        pytest.param(Error(code=ErrorCode.INTERNAL, message="boom"), True, id="final-error"),
        pytest.param(Ok(), True, id="final-other-kind"),
        pytest.param(RESULT, False, id="non-final-result"),
        pytest.param(TurnEvent(event=ContentEvent(text="hi")), False, id="non-final-other-kind"),
    ],
)
def test_an_answer_of_the_wrong_kind_is_unavailable(
    socket_path: Path, message: Message, final: bool
) -> None:
    def script(peer: Peer) -> None:
        peer.send(message, final=final)
        if not final:
            peer.send(RESULT, final=True)

    response, _, _, _ = call(socket_path, script)
    assert response == FailedResponse(message=UNAVAILABLE)


def test_an_expiry_too_far_off_is_unavailable(socket_path: Path) -> None:
    far = PendingApprovalResponse(approval=1, expires="9999-12-31T23:59:59.999Z")

    def script(peer: Peer) -> None:
        peer.send(far, final=False)
        peer.hold()

    response, _, _, took = call(socket_path, script)
    assert response == FailedResponse(message=UNAVAILABLE)
    assert took < 5.0
