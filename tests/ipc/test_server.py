"""The one server's accept loop under load: caps per socket, refusals over them, accept
failures backed off, and idle or vanished clients logged as one info line.

The accept loop runs on real Unix sockets, with handlers written here; the last
test runs the whole of brokerd in this process with small caps.
"""

from __future__ import annotations

import errno
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from boxmaker.brokerd.descriptors import ConnectionCaps
from boxmaker.core.errors import ErrorCode, ProtocolError, StartupError
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home.links import LOOP_BROKER
from boxmaker.core.wire.broker import DeniedResponse, ToolRequest
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals
from boxmaker.core.wire.common import Error, Ok, Status
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.ipc.connection import REQUEST_TIMEOUT_S, Connection, SocketRules
from boxmaker.ipc.serving import bind_socket, serve_forever
from boxmaker.testing.daemons import running_brokerd
from boxmaker.testing.homes import make_home
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until

LISTENER = "boxmaker.ipc"  # ipc.serving and ipc.connection log under it


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return make_home(tmp_path) / "run" / "t" / "test.sock"


@pytest.fixture
def stopping() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


@pytest.fixture
def listening(path: Path) -> Iterator[socket.socket]:
    sock = bind_socket(path)
    yield sock
    sock.close()


def rules(cap: int, timeout_s: float = REQUEST_TIMEOUT_S) -> SocketRules:
    """broker.sock's rules, accepting the approvals requests these tests send."""
    return SocketRules(replace(LOOP_BROKER, accepts=("approvals",)), cap, timeout_s)


def connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def listener_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(LISTENER + ".")]


class Holding:
    """A handler that reads the request, then holds the connection until released."""

    def __init__(self) -> None:
        self.entered = 0
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, conn: Connection, _: Approvals) -> None:
        with self._lock:
            self.entered += 1
        self.release.wait(10)
        conn.send(Ok(), final=True)


class Gated:
    """A listening socket whose accept waits while the gate is shut (as a busy loop would)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.open = threading.Event()
        self.open.set()

    def settimeout(self, value: float | None, /) -> None:
        self.sock.settimeout(value)

    def accept(self) -> tuple[socket.socket, object]:
        if not self.open.wait(0.2):
            raise TimeoutError
        accepted = self.sock.accept()
        self.open.wait(10)  # taken while the gate was shut: handed over once it opens
        return accepted


def test_a_connection_over_the_cap_is_answered_unavailable_with_its_id(
    path: Path, listening: socket.socket, stopping: threading.Event
) -> None:
    gated = Gated(listening)
    handler = Holding()
    serve_forever(gated, rules(cap=2), {Approvals: handler}, stopping)
    held = []
    for n in range(2):
        sock = connect(path)
        sock.sendall(_request(f"h{n}"))
        held.append(sock)
    wait_until(lambda: handler.entered == 2, what="both held connections in the handler")

    # one that waited in the backlog with its request sent: answered, with its id
    gated.open.clear()
    waiting = ClientConnection("over-1")
    with connect(path) as over:
        over.sendall(waiting.request(Approvals()))
        gated.open.set()
        answers = []
        while not waiting.done:
            answers += waiting.receive(over.recv(65536))
    (answer,) = answers
    assert answer.id == "over-1"
    assert answer.final
    assert isinstance(answer.message, Error)
    assert answer.message.code is ErrorCode.UNAVAILABLE
    assert "limit of 2 connections on broker.sock" in answer.message.message
    assert "see runbook.md#broker-busy" in answer.message.message
    assert "\n" not in answer.message.message

    # one that has sent nothing yet: closed at once, which its client reads as unavailable
    with connect(path) as idle:
        assert idle.recv(100) == b""

    handler.release.set()
    for sock in held:
        sock.close()

    def served_again() -> bool:
        try:
            return isinstance(exchange(path, Approvals(), "again")[-1].message, Ok)
        except (OSError, ProtocolError):  # refused while a place is still being given back
            return False

    wait_until(served_again, what="the socket serving again once its places are free")


def test_a_client_calling_again_while_the_last_call_is_closing_is_served(
    path: Path,
    listening: socket.socket,
    stopping: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the thread that sent the final answer keeps its slot a moment longer (as one
    # descheduled on a busy machine does): the client's next call must not be
    # refused for it, even at a cap of one
    caplog.set_level(logging.INFO, logger=LISTENER)

    def lingering(conn: Connection, _: Approvals) -> None:
        conn.send(Ok(), final=True)
        time.sleep(0.3)

    serve_forever(listening, rules(cap=1), {Approvals: lingering}, stopping)
    for n in range(3):
        assert exchange(path, Approvals(), f"again-{n}")[-1].message == Ok()
    assert not [r for r in listener_records(caplog) if "connections_full" in r.getMessage()]


def test_each_request_goes_to_the_handler_of_its_kind(
    path: Path, listening: socket.socket, stopping: threading.Event
) -> None:
    two_kinds = SocketRules(replace(LOOP_BROKER, accepts=("approvals", "status")), 2)
    seen: list[tuple[str, str]] = []

    def approvals(conn: Connection, message: Approvals) -> None:
        seen.append((message.kind, conn.request_id))
        conn.send(ApprovalList(items=()), final=True)

    def status(conn: Connection, message: Status) -> None:
        seen.append((message.kind, conn.request_id))
        conn.send(Ok(), final=True)

    serve_forever(listening, two_kinds, {Approvals: approvals, Status: status}, stopping)
    assert exchange(path, Status(), "s1")[-1].message == Ok()
    assert exchange(path, Approvals(), "a1")[-1].message == ApprovalList(items=())
    assert seen == [("status", "s1"), ("approvals", "a1")]


@pytest.mark.parametrize(
    ("handled", "why"),
    [
        pytest.param((), "no handler for approvals", id="accepted-not-handled"),
        pytest.param(
            (Approvals, Status),
            "handlers for kinds it does not accept: status",
            id="handled-not-accepted",
        ),
    ],
)
def test_a_socket_whose_handlers_are_not_its_kinds_does_not_start(
    listening: socket.socket, stopping: threading.Event, handled: tuple[type, ...], why: str
) -> None:
    handlers = {kind: Holding() for kind in handled}
    with pytest.raises(StartupError, match=re.escape(f"loop-broker/broker.sock: {why}")):
        serve_forever(listening, rules(cap=1), handlers, stopping)


def _request(request_id: str) -> bytes:
    return ClientConnection(request_id).request(Approvals())


def test_a_client_that_sends_nothing_is_one_info_line(
    path: Path,
    listening: socket.socket,
    stopping: threading.Event,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER)
    serve_forever(listening, rules(cap=2, timeout_s=0.2), {Approvals: Holding()}, stopping)
    with connect(path) as idle:

        def logged() -> bool:
            return any("event=idle_timeout" in r.getMessage() for r in listener_records(caplog))

        wait_until(logged, what="the idle timeout logged")
        assert idle.recv(100) == b""  # closed, with nothing said
    (record,) = listener_records(caplog)
    assert record.levelno == logging.INFO
    assert record.exc_info is None
    assert record.getMessage().startswith("event=idle_timeout socket=broker.sock")


@pytest.mark.parametrize("sent", [b"", b"\x00\x00\x01\x00{"], ids=["nothing", "half-a-frame"])
def test_a_client_that_leaves_early_is_one_info_line(
    path: Path,
    listening: socket.socket,
    stopping: threading.Event,
    caplog: pytest.LogCaptureFixture,
    sent: bytes,
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER)
    serve_forever(listening, rules(cap=2), {Approvals: Holding()}, stopping)
    with connect(path) as leaving:
        leaving.sendall(sent)

    def logged() -> bool:
        return any("event=peer_closed" in r.getMessage() for r in listener_records(caplog))

    wait_until(logged, what="the early close logged")
    (record,) = listener_records(caplog)
    assert record.levelno == logging.INFO
    assert record.exc_info is None


class FailingListening:
    """A listening socket whose accept fails with EMFILE `failures` times, then times out."""

    def __init__(self, failures: int, stopping: threading.Event) -> None:
        self.left = failures
        self.attempts: list[float] = []
        self.done = threading.Event()
        self._stopping = stopping

    def settimeout(self, value: float | None, /) -> None:
        pass

    def accept(self) -> tuple[socket.socket, object]:
        if self.left > 0:
            self.left -= 1
            self.attempts.append(time.monotonic())
            raise OSError(errno.EMFILE, "Too many open files")
        self.done.set()
        self._stopping.wait(0.2)  # as a real socket's accept timeout would
        raise TimeoutError


def test_accept_failures_back_off_and_are_logged_once_without_a_traceback(
    stopping: threading.Event, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LISTENER)
    listening = FailingListening(6, stopping)
    serve_forever(listening, rules(cap=2), {Approvals: Holding()}, stopping)
    assert listening.done.wait(10)
    gaps = [b - a for a, b in zip(listening.attempts, listening.attempts[1:], strict=False)]
    # 10, 20, 40, 80, 160 ms at least: each wait at least the one before
    assert all(gap >= 0.01 * 2**n * 0.9 for n, gap in enumerate(gaps)), gaps
    (record,) = listener_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "event=accept_failed socket=broker.sock error=EMFILE" in record.getMessage()


def test_a_full_broker_sock_never_keeps_the_owner_out_of_admin_sock(tmp_path: Path) -> None:
    with running_brokerd(tmp_path, caps=ConnectionCaps(broker=2, admin=2)) as b:
        idle = [connect(b.broker_socket) for _ in range(6)]
        request = ToolRequest(session="s", call="c1", tool="read_file", arguments='{"path":"/x"}')
        try:

            def refused() -> bool:
                try:
                    answer = exchange(b.broker_socket, request, "c1")[-1].message
                except ProtocolError as exc:  # closed before the request came in
                    return exc.code is ErrorCode.UNAVAILABLE
                except (BrokenPipeError, ConnectionResetError):  # closed before it was sent
                    return True
                return isinstance(answer, Error) and answer.code is ErrorCode.UNAVAILABLE

            wait_until(refused, what="broker.sock full of idle connections")
            for n in range(12):
                answer = b.admin(Approvals(), f"a{n}")[-1].message
                assert answer == ApprovalList(items=())
        finally:
            for sock in idle:
                sock.close()

        def served() -> bool:
            answer = exchange(b.broker_socket, request, "c1")[-1].message
            return isinstance(answer, DeniedResponse)

        wait_until(served, what="broker.sock serving again")
        answer = exchange(b.broker_socket, request, "c1")[-1].message
        assert answer == DeniedResponse(reason=DenyReason.NO_GRANT)
