"""The accept loop's worker threads: reused for the next connection, ended when idle."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from boxmaker.core.messages import Ok, Status
from boxmaker.ipc import server
from boxmaker.ipc.server import Connection, SocketRules, bind_socket, serve_forever
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until

RULES = SocketRules("test.sock", "tester", ("status",), 4, "see runbook.md#broker-busy")


def workers(name: str = "test.sock") -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"conn-{name}"]


def test_sequential_connections_reuse_one_worker(tmp_path: Path) -> None:
    seen: list[int] = []

    def handle(conn: Connection) -> None:
        conn.read_request()
        seen.append(threading.get_ident())
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    # a name of its own: other tests' idle workers (named after their sockets) live on
    serve_forever(listening, replace(RULES, name="reuse.sock"), handle, stopping)
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
    monkeypatch.setattr(server, "IDLE_WORKER_S", 0.2)

    def handle(conn: Connection) -> None:
        conn.read_request()
        conn.send(Ok(), final=True)

    stopping = threading.Event()
    listening = bind_socket(tmp_path / "test.sock")
    serve_forever(listening, replace(RULES, name="idle.sock"), handle, stopping)
    try:
        exchange(tmp_path / "test.sock", Status(), "s1")
        wait_until(lambda: workers("idle.sock") == [], 5.0, "the idle worker to end")
        assert exchange(tmp_path / "test.sock", Status(), "s2")[-1].message == Ok()
    finally:
        stopping.set()
        listening.close()
