"""The broker fake's contract, held to the real brokerd through the one client loopd
uses (`loopd.broker_port.BrokerPort`; issue 40): an allowed call is one final result, a
call with no grant one final denial, and a call that asks is one pending frame (the
port's `on_pending`, once) and then the final answer. The fake is the scripted server
the turn loop's tests put at broker.sock (`boxmaker.testing.sockets.ScriptedServer`);
the real one is brokerd in this process, with its recording runtime."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from boxmaker.core.grants.deny_reasons import DenyReason
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker import (
    DeniedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.core.wire.broker_admin import Approve
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import make_home, write_grant
from boxmaker.testing.peer_scripts import answer, pending_then
from boxmaker.testing.sockets import ScriptedServer

RESULT = ResultResponse(content="hello", class_=DataClass.PRIVATE, untrusted=False, truncated=False)

# (the port, what approves a pending call) for one kind of call
Broker = tuple[BrokerPort, Callable[[PendingApprovalResponse], None]]


def _request(tool: str, arguments: dict[str, str], call: str) -> ToolRequest:
    return ToolRequest(session="s-1", call=call, tool=tool, arguments=json.dumps(arguments))


@contextmanager
def _scripted(tmp_path: Path, case: str) -> Iterator[Broker]:
    home = make_home(tmp_path)
    script = {
        "allowed": answer(RESULT),
        "no_grant": answer(DeniedResponse(reason=DenyReason.NO_GRANT)),
        "asks": pending_then(RESULT, approval=7),
    }[case]
    path = home / "run" / "broker" / "broker.sock"
    server = ScriptedServer(path, script)
    try:
        yield BrokerPort(path, 10_000), lambda _pending: None
    finally:
        server.stop()
    assert not server.errors


@contextmanager
def _brokerd(tmp_path: Path, case: str) -> Iterator[Broker]:
    grants = tmp_path / "grants"
    notes = tmp_path / "notes"
    write_grant(grants, "notes-read", tool="read_file", paths=[str(notes)])
    write_grant(grants, "notes-write", tool="write_file", mode="ask", paths=[str(notes)])
    with running_brokerd(tmp_path, grants_dir=grants) as brokerd:

        def approve(pending: PendingApprovalResponse) -> None:
            # from another thread: the port waits on this connection meanwhile
            threading.Thread(
                target=brokerd.admin, args=(Approve(approval=pending.approval),), daemon=True
            ).start()

        yield BrokerPort(brokerd.broker_socket, 10_000), approve


BROKERS = {"scripted": _scripted, "brokerd": _brokerd}
CALLS = {
    "allowed": ("read_file", {"path": "/notes/a.md"}),
    "no_grant": ("shell", {"command": "true"}),
    "asks": ("write_file", {"path": "/notes/b.md", "content": "x"}),
}


def _call(tmp_path: Path, broker: str, case: str) -> tuple[object, list[int]]:
    tool, arguments = CALLS[case]
    if broker == "brokerd":  # the grants name the test's own folder
        arguments = {k: v.replace("/notes", str(tmp_path / "notes")) for k, v in arguments.items()}
    pendings: list[int] = []
    with BROKERS[broker](tmp_path, case) as (port, approve):

        def on_pending(frame: PendingApprovalResponse) -> None:
            pendings.append(frame.approval)
            approve(frame)

        response = port.call(_request(tool, arguments, f"c{case}"), on_pending)
    return response, pendings


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_an_allowed_call_is_one_final_result(tmp_path: Path, broker: str) -> None:
    response, pendings = _call(tmp_path, broker, "allowed")
    assert isinstance(response, ResultResponse), response
    assert pendings == []


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_a_call_with_no_grant_is_one_final_denial(tmp_path: Path, broker: str) -> None:
    response, pendings = _call(tmp_path, broker, "no_grant")
    assert isinstance(response, DeniedResponse), response
    assert response.reason is DenyReason.NO_GRANT
    assert pendings == []


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_a_call_that_asks_is_pending_once_then_final(tmp_path: Path, broker: str) -> None:
    response, pendings = _call(tmp_path, broker, "asks")
    assert len(pendings) == 1
    assert isinstance(response, ResultResponse), response
