"""Stopping a turn (issue 42): `cancel {session}` on loop.sock, and a turn whose client
leaves, stop generation at the next token. The cut reply is logged as interrupted and
replayed as written, a notice tells the model, and the model is free for the next
turn at once.

loopd runs in this process over real Unix sockets; the model is the scripted one,
writing a long reply a token every few milliseconds and holding one lock while it
generates, as the real model does (one generation at a time for every session).
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.core.model.compaction_plan import INTERRUPTED, STOPPED_BETWEEN
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals
from boxmaker.core.wire.connection import ClientConnection
from boxmaker.core.wire.loop import Cancel, Cancelled, Turn, TurnDone
from boxmaker.loopd.broker_port import WITHDRAWN
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, NoticeEntry, SessionLogs, ToolEntry, UserEntry
from boxmaker.loopd.turn import STOPPED
from boxmaker.testing.daemons import InProcessLoopd, running_brokerd, running_loopd
from boxmaker.testing.homes import make_home, verify_log, write_grant
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import exchange
from boxmaker.testing.waiting import wait_until

LONG = "All work and no play makes a dull reply. " * 200  # 8,200 tokens: over 40 s paced
PACE_S = 0.005
# one generation for the whole reply (the scripted model answers each call of a stretch
# with its next reply)
LIMITS = TurnLimits(
    reply_tokens=len(LONG), max_tokens=len(LONG) + 100, repeat_check_tokens=len(LONG)
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


def _streaming(loopd: InProcessLoopd, session: str) -> socket.socket:
    """A client that asked for a turn of `session` and has its first event."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(loopd.socket))
    client.sendall(ClientConnection("long").request(Turn(session=session, text="Go on.")))
    client.settimeout(30)
    assert client.recv(1), "no event came"
    return client


def _entries(loopd: InProcessLoopd, session: str) -> list[object]:
    return list(SessionLogs(loopd.home).open(session).entries)


def test_a_turn_whose_client_leaves_stops_and_frees_the_model(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel([LONG, "Hello, b.", "Back again."], pace_s=PACE_S, serial=True)
    with running_loopd(tmp_path, model, home=home, limits=LIMITS) as loopd:
        client = _streaming(loopd, "a")
        client.close()  # the owner's Ctrl-C, or a killed client
        left = time.monotonic()
        wait_until(lambda: bool(model.returned), 10, "the generation to stop")
        stopped_after = model.returned[0] - left
        done = loopd.turn("b", "hi", timeout_s=30)[-1].message
        other_done_after = time.monotonic() - left  # another session's turn, at once
        assert done == TurnDone(session="b", content="Hello, b.", untrusted=False)
        logged = _entries(loopd, "a")
        assert isinstance(logged[-2], ModelEntry)
        assert logged[-2].interrupted
        assert 0 < len(logged[-2].ids) < len(LONG)
        assert LONG.startswith(logged[-2].text)
        assert logged[-1] == NoticeEntry(text=INTERRUPTED)
        # the session goes on: its next prompt holds the cut reply as written, and the notice
        again = loopd.turn("a", "Are you there?", resume=True, timeout_s=30)[-1].message
        assert isinstance(again, TurnDone)
        assert again.content == "Back again."
        prompt = model.prompt_text()
        assert logged[-2].text in prompt
        assert prompt.index(logged[-2].text) < prompt.index(INTERRUPTED)
    # 8,200 tokens paced take over 40 s; stopped, the generation ends within a few tokens
    assert stopped_after < 1.0, stopped_after
    assert other_done_after < 2.0, other_done_after


def test_cancel_stops_the_sessions_running_turn(tmp_path: Path, home: Path) -> None:
    model = ScriptedModel([LONG], pace_s=PACE_S, serial=True)
    with running_loopd(tmp_path, model, home=home, limits=LIMITS) as loopd:
        answers: list[object] = []
        running = threading.Thread(
            target=lambda: answers.extend(loopd.turn("c", "Go on.", timeout_s=60)), daemon=True
        )
        running.start()
        wait_until(lambda: len(model.prompts) == 1, 30, "the turn generating")
        time.sleep(0.2)  # some of the reply written
        cancelled = exchange(loopd.socket, Cancel(session="c"), "cancel-1")[-1].message
        assert cancelled == Cancelled(session="c", running=True)
        running.join(30)
        assert not running.is_alive()
        done = answers[-1].message  # type: ignore[attr-defined]
        assert done == TurnDone(session="c", content=STOPPED, untrusted=False)
        logged = _entries(loopd, "c")
        assert isinstance(logged[0], UserEntry)
        assert isinstance(logged[1], ModelEntry)
        assert logged[1].interrupted
        # nothing running: nothing to stop
        idle = exchange(loopd.socket, Cancel(session="c"), "cancel-2")[-1].message
        assert idle == Cancelled(session="c", running=False)
        other = exchange(loopd.socket, Cancel(session="nobody"), "cancel-3")[-1].message
        assert other == Cancelled(session="nobody", running=False)


def test_a_call_waiting_for_the_owner_is_withdrawn_when_its_turn_stops(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    inner = {"command": "make clean", "cwd": str(scratch)}
    call = json.dumps({"name": "call_tool", "arguments": {"name": "shell", "arguments": inner}})
    model = ScriptedModel([call, "never reached"])
    with (
        running_brokerd(tmp_path) as brokerd,
        running_loopd(
            tmp_path, model, home=brokerd.home, broker_socket=brokerd.broker_socket
        ) as loopd,
    ):

        def waiting() -> list[int]:
            answer = brokerd.admin(Approvals())[-1].message
            assert isinstance(answer, ApprovalList)
            return [item.approval for item in answer.items]

        client = _streaming(loopd, "w")
        wait_until(lambda: len(waiting()) == 1, 10, "the call waiting for the owner")
        (approval,) = waiting()
        client.close()  # the owner's Ctrl-C
        left = time.monotonic()
        wait_until(lambda: not waiting(), 10, "the approval withdrawn")
        withdrawn_after = time.monotonic() - left
        wait_until(lambda: len(_entries(loopd, "w")) >= 4, 10, "the turn logged")
        logged = _entries(loopd, "w")
        report = verify_log(brokerd.home)
    assert brokerd.runtime.count == 0  # nothing ran
    assert report.abandoned == (approval,)
    tool = logged[2]
    assert isinstance(tool, ToolEntry)
    assert tool.content == f"Failed: {WITHDRAWN}."
    assert logged[3] == NoticeEntry(text=STOPPED_BETWEEN)  # the model is told
    assert len(model.prompts) == 1  # the stopped turn asked the model nothing more
    # loopd asks every 0.25 s, brokerd checks its requester every second
    assert withdrawn_after < 3.0, withdrawn_after
