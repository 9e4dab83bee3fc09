"""A request given `cancelled` stops reading once it is true, and closes its connection."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from boxmaker.core.errors import TimedOutError
from boxmaker.core.wire.common import Ok, Status
from boxmaker.ipc.client import Request
from boxmaker.testing.sockets import Peer, Script, ScriptedServer


def hold_after_one(gone: threading.Event) -> Script:
    def script(peer: Peer) -> None:
        peer.send(Ok(), final=False)
        peer.hold(timeout_s=10)
        gone.set()

    return script


def test_cancelled_ends_the_answers_and_closes(tmp_path: Path) -> None:
    gone = threading.Event()
    stop = threading.Event()
    with ScriptedServer(tmp_path / "s.sock", hold_after_one(gone)):
        request = Request(tmp_path / "s.sock", Status(), "r1", 10.0, cancelled=stop.is_set)
        answers = []
        for envelope in request.answers():
            answers.append(envelope)
            stop.set()
        assert [a.final for a in answers] == [False]
        assert gone.wait(5), "the server saw the connection closed"


def test_the_deadline_still_holds_with_cancelled(tmp_path: Path) -> None:
    gone = threading.Event()
    with ScriptedServer(tmp_path / "s.sock", hold_after_one(gone)):
        request = Request(
            tmp_path / "s.sock", Status(), "r1", 0.3, cancelled=lambda: False, poll_s=0.05
        )
        with pytest.raises(TimedOutError):
            list(request.answers())
