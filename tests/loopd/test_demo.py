"""The demo model (`loopd demo`): its script, run by the real turn loop over a real port.

The turn loop, session log and BrokerPort are the real ones; brokerd is a scripted
peer on a real Unix socket, so the test sees exactly the tool_request the demo
model's reply became. The whole walk-through against the supervised tree (real
brokerd, grants, approval, sandbox, audit log) is `scripts/demo`, run by
tests/e2e/test_tree_dev.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.core.home.layout import Home
from boxmaker.core.labels import DataClass
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.model.tool_calls import CallSyntax, ToolCall, parse_reply
from boxmaker.core.wire.broker import ResultResponse, ToolRequest
from boxmaker.core.wire.loop import ApprovalPendingEvent, ContentEvent, Event, ToolCallStartedEvent
from boxmaker.loopd import main as loopd_main
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.demo import HELP, MARK, QUOTED_LINES, DemoModel, demo_reply
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.tools import system_prompt
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home
from boxmaker.testing.peer_scripts import answer, pending_then
from boxmaker.testing.sockets import ScriptedServer

WORKSPACE = Path("/srv/ws")


def owner_prompt(text: str) -> str:
    """The first prompt of a session, as the Gemma format renders it."""
    return (
        f"<bos><start_of_turn>user\n{system_prompt(CallSyntax.BARE_JSON)}\n\n{text}<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def only_call(reply: str) -> ToolCall:
    (call,) = parse_reply(reply).calls
    assert isinstance(call, ToolCall)
    return call


def test_the_welcome_note_becomes_a_read_of_it() -> None:
    call = only_call(demo_reply(owner_prompt("Please read my Welcome note."), WORKSPACE))
    assert call.name == "read_file"
    assert json.loads(call.arguments) == {"path": "/srv/ws/notes/welcome.md"}


def test_the_scratch_folder_becomes_a_shell_call_there() -> None:
    call = only_call(demo_reply(owner_prompt("list the scratch folder"), WORKSPACE))
    assert call.name == "shell"
    arguments = json.loads(call.arguments)
    assert arguments["cwd"] == "/srv/ws/scratch"
    assert "ls" in arguments["command"]


def test_anything_else_gets_the_help_line_not_a_call() -> None:
    # the system prompt names tools and a notes path: it must not trigger the script
    reply = demo_reply(owner_prompt("hello"), WORKSPACE)
    assert reply == HELP
    assert parse_reply(reply).calls == ()
    assert MARK in reply


def test_a_tool_result_is_quoted_and_marked_as_scripted() -> None:
    lines = [f"line {n}" for n in range(QUOTED_LINES + 3)]
    prompt = (
        owner_prompt("read my welcome note")
        + '{"name": "read_file"}<end_of_turn>\n<start_of_turn>user\n[result of read_file]\n'
        + "\n".join(lines)
        + "<end_of_turn>\n<start_of_turn>model\n"
    )
    reply = demo_reply(prompt, WORKSPACE)
    assert reply.startswith(f"{MARK} read_file answered")
    quoted = [line for line in reply.splitlines() if line.startswith("> ")]
    assert quoted == [f"> {line}" for line in lines[:QUOTED_LINES]]
    assert parse_reply(reply).calls == ()


# --- the real turn loop with the demo model ---------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


def turn(home: Path, text: str, session: str) -> tuple[str, list[Event]]:
    loop = TurnLoop(
        DemoModel(WORKSPACE),
        from_format(GEMMA),
        SessionLogs(home),
        BrokerPort(Home(home).broker_socket, 5_000),
        TurnLimits(),
    )
    events: list[Event] = []
    done = loop.run(session, text, False, events.append)
    return done.content, events


def test_the_read_reaches_brokerd_and_its_result_is_quoted(home: Path) -> None:
    result = ResultResponse(
        content="# Welcome\nhello", class_=DataClass.PRIVATE, untrusted=False, truncated=False
    )
    with ScriptedServer(Home(home).broker_socket, answer(result)) as broker:
        content, events = turn(home, "Please read my welcome note.", "demo-r")
    (sent,) = broker.requests
    assert isinstance(sent.message, ToolRequest)
    assert (sent.message.tool, json.loads(sent.message.arguments)) == (
        "read_file",
        {"path": "/srv/ws/notes/welcome.md"},
    )
    assert (
        content
        == f"{MARK} read_file answered, through brokerd and the sandbox:\n> # Welcome\n> hello"
    )
    started = [e for e in events if isinstance(e, ToolCallStartedEvent)]
    assert [e.name for e in started] == ["read_file"]
    streamed = "".join(e.text for e in events if isinstance(e, ContentEvent))
    assert streamed == content  # streamed in pieces, together exactly the answer


def test_the_shell_call_waits_for_the_owner(home: Path) -> None:
    result = ResultResponse(
        content="hello.txt\n[exit status 0]",
        class_=DataClass.PRIVATE,
        untrusted=False,
        truncated=False,
    )
    with ScriptedServer(Home(home).broker_socket, pending_then(result, approval=7)) as broker:
        content, events = turn(home, "Write a file in scratch and list it.", "demo-a")
    (sent,) = broker.requests
    assert isinstance(sent.message, ToolRequest)
    assert sent.message.tool == "shell"
    assert [e.approval for e in events if isinstance(e, ApprovalPendingEvent)] == [7]
    assert content.endswith("> hello.txt\n> [exit status 0]")


def test_loopd_demo_will_not_take_loopds_own_socket(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = home.parent / "loopd.toml"
    config.write_text(f'[paths]\nhome = "{home}"\n')
    own = home / "run" / "loop" / "loop.sock"
    status = loopd_main.main(
        ["demo", "--config", str(config), "--socket", str(own), "--workspace", str(WORKSPACE)]
    )
    assert status == 1
    assert "a socket of its own" in caplog.text
    assert not own.exists()
