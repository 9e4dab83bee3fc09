"""The threads of a socket (leader and followers): reused for the next connection, ended
when idle or stopped, and a lead nobody can take."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from boxmaker.core.errors import ErrorCode, ProtocolError
from boxmaker.core.home.links import Link, Role
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error, Ok, Status
from boxmaker.ipc import serving
from boxmaker.ipc.connection import Connection, SocketRules
from boxmaker.ipc.serving import bind_socket, serve_forever
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until


def rules(name: str) -> SocketRules:
    """A test link's rules: `name` of its own, since other tests' idle workers (named
    after their sockets) live on."""
    link = Link("t", name, Role.MEMORYD, (Role.OWNER,), "bx-t", ("status",), Runbook.MEMORYD_BUSY)
    return SocketRules(link, 4)


def workers(name: str = "test.sock") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"conn-{name}"]


def test_sequential_connections_reuse_one_worker(tmp_path: Path) -> None:
    seen: list[int] = []

    def handle(conn: Connection, _: Status) -> None:
        seen.append(threading.get_ident())
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    serve_forever(listening, rules("reuse.sock"), {Status: handle}, stopping)
    try:
        for n in range(20):
            answers = exchange(tmp_path / "test.sock", Status(), f"s{n}")
            assert answers[-1].message == Ok()
    finally:
        stopping.set()
        listening.close()
    # a worker is idle again a moment after its client has the answer: the next
    # connection may come first and start a second one, never one per connection
    assert len(set(seen)) <= 3
    assert len(workers("reuse.sock")) <= 3


def test_an_idle_worker_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "IDLE_WORKER_S", 0.2)

    def handle(conn: Connection, _: Status) -> None:
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    serve_forever(listening, rules("idle.sock"), {Status: handle}, stopping)
    try:
        exchange(tmp_path / "test.sock", Status(), "s1")
        # the thread that served s1 handed the lead to a second one: it alone stays
        wait_until(lambda: len(workers("idle.sock")) == 1, 5.0, "the idle worker to end")
        assert exchange(tmp_path / "test.sock", Status(), "s2")[-1].message == Ok()
    finally:
        stopping.set()
        listening.close()


def test_a_stop_ends_the_leader_and_every_follower(tmp_path: Path) -> None:
    inside = threading.Barrier(4)

    def handle(conn: Connection, _: Status) -> None:
        inside.wait(10)  # four served at once: four threads, then a fifth to lead
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    serving = serve_forever(listening, rules("stop.sock"), {Status: handle}, stopping)
    try:
        calls = [
            threading.Thread(target=exchange, args=(tmp_path / "test.sock", Status(), f"s{n}"))
            for n in range(4)
        ]
        for call in calls:
            call.start()
        for call in calls:
            call.join(10)
        assert len(workers("stop.sock")) == 5
        assert serving.is_alive()
    finally:
        stopping.set()
        listening.close()
    serving.join(5)
    assert not serving.is_alive()
    wait_until(lambda: workers("stop.sock") == [], 5.0, "every thread of the socket to end")


def test_a_lead_nobody_can_take_refuses_that_connection_and_leads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    served: list[str] = []

    def handle(conn: Connection, _: Status) -> None:
        served.append(conn.request_id)
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    serving = serve_forever(listening, rules("full.sock"), {Status: handle}, stopping)
    try:

        def no_thread() -> None:
            raise RuntimeError("can't start new thread")

        monkeypatch.setattr(serving, "_spawn", no_thread)  # the leader has no follower yet
        try:
            answer = exchange(tmp_path / "test.sock", Status(), "s1")[-1].message
            assert isinstance(answer, Error)
            code = answer.code
        except ProtocolError as exc:  # refused before its request came in: closed
            code = exc.code
        except (BrokenPipeError, ConnectionResetError):  # closed before it was sent
            code = ErrorCode.UNAVAILABLE
        assert code is ErrorCode.UNAVAILABLE
        assert served == []
        assert any("event=thread_failed socket=full.sock" in r.getMessage() for r in caplog.records)
        monkeypatch.undo()
        assert exchange(tmp_path / "test.sock", Status(), "s2")[-1].message == Ok()
        assert served == ["s2"]
    finally:
        stopping.set()
        listening.close()
