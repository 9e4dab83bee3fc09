"""loop.sock through real Unix sockets: a turn's events as they happen, then turn_done.

loopd runs in this process (the turn loop with the scripted model, the real
LoopServer on `<home>/run/loop/loop.sock`); the tests are its clients.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from boxmaker.core.errors import ErrorCode
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.wire.broker import DeniedResponse, ToolRequest
from boxmaker.core.wire.broker_admin import Approvals
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.loop import (
    ContentEvent,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolResultEvent,
    Turn,
    TurnDone,
    TurnEvent,
)
from boxmaker.loopd.limits import TurnLimits
from boxmaker.testing.daemons import InProcessLoopd, running_loopd
from boxmaker.testing.homes import make_home
from boxmaker.testing.peer_scripts import answer
from boxmaker.testing.scripted_model import ScriptedModel, merge_content
from boxmaker.testing.sockets import ScriptedServer, exchange, exchange_raw
from boxmaker.testing.waiting import wait_until

READ = json.dumps(
    {"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "/x"}}}
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


def test_a_turn_streams_its_events_then_turn_done(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel([READ, "It is not allowed."])
    broker = ScriptedServer(
        Home(home).broker_socket, answer(DeniedResponse(reason=DenyReason.NO_GRANT))
    )
    with broker, running_loopd(tmp_path, model, home=home, broker_socket=broker.path) as loopd:
        answers = loopd.turn("chat-1", "read /x", request_id="t-7")
    assert [a.id for a in answers] == ["t-7"] * len(answers)
    assert [a.final for a in answers] == [False] * (len(answers) - 1) + [True]
    *frames, done = [a.message for a in answers]
    assert all(isinstance(e, TurnEvent) for e in frames)
    streamed = [e.event for e in frames if isinstance(e, TurnEvent)]
    assert len([e for e in streamed if isinstance(e, ContentEvent)]) > 1  # as it was written
    events = merge_content(streamed)
    kinds = [e.type for e in events]
    assert kinds == ["tool_call_started", "tool_denied", "tool_result", "content"]
    started = events[0]
    assert isinstance(started, ToolCallStartedEvent)
    assert started.name == "call_tool"
    assert events[1] == ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT)
    assert isinstance(events[2], ToolResultEvent)
    assert events[3] == ContentEvent(text="It is not allowed.")
    assert done == TurnDone(session="chat-1", content="It is not allowed.", untrusted=False)


def test_the_wire_bytes_of_a_turn_event_are_the_pinned_envelope(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel(["hi"])
    with running_loopd(tmp_path, model, home=home) as loopd:
        payload = orjson.dumps(
            {"id": "t1", "final": True, "message": {"kind": "turn", "session": "s1", "text": "x"}}
        )
        frames, closed = exchange_raw(loopd.socket, payload)
    assert closed
    *streamed, usage, done = frames
    assert streamed == [  # the reply streams: one content event per token
        b'{"id":"t1","final":false,"message":{"kind":"turn_event","event":{"type":"content","text":"h"}}}',
        b'{"id":"t1","final":false,"message":{"kind":"turn_event","event":{"type":"content","text":"i"}}}',
    ]
    # its usage (the context is not known: absent), the seconds as measured
    assert re.fullmatch(
        rb'{"id":"t1","final":false,"message":{"kind":"turn_event","event":'
        rb'{"type":"usage","prompt":\d+,"generated":2,"seconds":\d+\.\d+}}}',
        usage,
    )
    assert done == (
        b'{"id":"t1","final":true,"message":{"kind":"turn_done","session":"s1",'
        b'"content":"hi","untrusted":false}}'
    )


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(Approvals(), id="approvals"),
        pytest.param(
            ToolRequest(session="s", call="c1", tool="read_file", arguments="{}"),
            id="tool_request",
        ),
        pytest.param(TurnDone(session="s", content="x", untrusted=False), id="turn_done"),
    ],
)
def test_a_kind_other_than_turn_is_forbidden(
    tmp_path: Path, home: Path, message: Message, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel([])
    with running_loopd(tmp_path, model, home=home) as loopd:
        answers = exchange(loopd.socket, message, "x1")
    (only,) = answers
    assert only.final
    assert isinstance(only.message, Error)
    assert only.message.code is ErrorCode.FORBIDDEN
    assert only.message.message == f"{message.kind} is not accepted on loop.sock"
    assert model.prompts == []
    assert any("see runbook.md#socket-forbidden" in r.getMessage() for r in caplog.records)


def test_a_session_id_that_is_a_path_is_malformed_and_touches_nothing(
    tmp_path: Path, home: Path
) -> None:
    model = ScriptedModel(["never"])
    payload = orjson.dumps(
        {"id": "t1", "final": True, "message": {"kind": "turn", "session": "../x", "text": "hi"}}
    )
    with running_loopd(tmp_path, model, home=home) as loopd:
        frames, _ = exchange_raw(loopd.socket, payload)
    (frame,) = frames
    answer_ = orjson.loads(frame)
    assert answer_["message"]["kind"] == "error"
    assert answer_["message"]["code"] == "malformed"
    assert not (home / "loop" / "sessions").exists() or not any(
        (home / "loop" / "sessions").iterdir()
    )
    assert not (home / "loop" / "x.jsonl").exists()
    assert model.prompts == []


def test_refusals_are_errors_on_the_socket(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel(["one"])
    with running_loopd(tmp_path, model, home=home) as loopd:
        loopd.turn("chat-1", "hi")
        again = loopd.turn("chat-1", "hi again")[-1].message
        missing = loopd.turn("chat-2", "hi", resume=True)[-1].message
        loopd.session_log("chat-3").write_bytes(b'{"type": "us')
        damaged = loopd.turn("chat-3", "hi", resume=True)[-1].message
    assert isinstance(again, Error)
    assert again.code is ErrorCode.MALFORMED
    assert "already exists" in again.message
    assert isinstance(missing, Error)
    assert "no log to resume" in missing.message
    assert isinstance(damaged, Error)
    assert damaged.code is ErrorCode.UNAVAILABLE
    assert damaged.message.endswith("see runbook.md#session-log-damaged")


def test_a_client_that_disconnects_mid_turn_stops_the_turn_and_the_session_goes_on(
    tmp_path: Path, home: Path
) -> None:
    started = threading.Event()
    go_on = threading.Event()

    def first_reply(prompt: str) -> str:
        started.set()
        assert go_on.wait(30), "the test never let the model go on"
        return json.dumps({"name": "clock", "arguments": {}})

    model = ScriptedModel([first_reply, "It is noon."])
    with running_loopd(tmp_path, model, home=home) as loopd:
        conn = ClientConnection("t1")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(loopd.socket))
            sock.sendall(conn.request(Turn(session="chat-1", text="time?")))
            assert started.wait(30)
        go_on.set()  # the client is gone: the reply stops at its next token (issue 42)

        def logged() -> bool:
            path = loopd.session_log("chat-1")
            return path.exists() and len(path.read_bytes().splitlines()) == 3

        wait_until(logged, 30, "the stopped turn in the session log")
        entries = [orjson.loads(x) for x in loopd.session_log("chat-1").read_bytes().splitlines()]
        assert [e["type"] for e in entries] == ["user", "model", "notice"]
        assert entries[1]["interrupted"] is True
        assert len(entries[1]["ids"]) == 1  # the first token, then the client was gone
        done = loopd.turn("chat-1", "again?", resume=True)[-1].message
    assert done == TurnDone(session="chat-1", content="It is noon.", untrusted=False)
    assert entries[1]["text"] + "<end_of_turn>" in model.prompt_text(-1)  # replayed as cut


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def check_modes(loopd: InProcessLoopd) -> None:
    assert stat.S_ISSOCK(loopd.socket.stat().st_mode)
    assert mode(loopd.socket) == 0o600
    assert mode(loopd.socket.parent) == 0o700


def test_a_client_that_stops_reading_holds_up_no_other_session(tmp_path: Path, home: Path) -> None:
    long = "x" * 20_000  # one content event per token: far more than a socket buffers
    model = ScriptedModel([long, "Hello, b."], serial=True)
    limits = TurnLimits(reply_tokens=len(long), max_tokens=len(long) + 100)
    with (
        running_loopd(tmp_path, model, home=home, limits=limits) as loopd,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stalled,
    ):
        stalled.connect(str(loopd.socket))
        stalled.sendall(ClientConnection("a").request(Turn(session="a", text="long")))
        wait_until(lambda: len(model.prompts) == 1, 30, "the first turn generating")
        done = loopd.turn("b", "hi", timeout_s=30)[-1].message
    assert done == TurnDone(session="b", content="Hello, b.", untrusted=False)


def test_loop_sock_is_0600_in_a_0700_directory(tmp_path: Path, home: Path) -> None:
    with running_loopd(tmp_path, ScriptedModel([]), home=home) as loopd:
        check_modes(loopd)


def test_a_directory_found_at_0755_is_set_to_0700_and_a_stale_socket_replaced(
    tmp_path: Path, home: Path
) -> None:
    directory = Home(home).loop_socket.parent
    directory.mkdir(parents=True, mode=0o755)
    directory.chmod(0o755)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(Home(home).loop_socket))
    assert Home(home).loop_socket.exists()
    with running_loopd(tmp_path, ScriptedModel(["hi"]), home=home) as loopd:
        check_modes(loopd)
        assert isinstance(loopd.turn("s1", "hello")[-1].message, TurnDone)
