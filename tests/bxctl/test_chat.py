"""`bxctl chat` against loopd (in this process, with the scripted model) and brokerd (in
this process, real sockets, real audit writer, the recording runtime).

Where the test needs loopd to lie (its event naming another tool, or an approval
brokerd does not have), a fake loopd on a real socket sends scripted events. bxctl
runs in this process where its output is all that is checked, and as the real
console script (with a pipe, and with a pseudo-terminal) where its standard input
is what is under test.
"""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from boxmaker.bxctl.main import main as bxctl
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.wire.broker import PendingApprovalResponse, ResultResponse, ToolRequest
from boxmaker.core.wire.broker_admin import ApprovalList, Approvals, Refuse
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    ContentEvent,
    Event,
    ReasoningEvent,
    ToolDeniedEvent,
)
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, SessionLogs
from boxmaker.testing.daemons import (
    InProcessBrokerd,
    InProcessLoopd,
    running_brokerd,
    running_loopd,
)
from boxmaker.testing.homes import verify_log, write_grant
from boxmaker.testing.peer_scripts import fake_loopd_script, in_ms
from boxmaker.testing.processes import clean_environment, console_script
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import ScriptedServer
from boxmaker.testing.terminal import Terminal
from boxmaker.testing.waiting import wait_until

RESET = "\x1b[0m"


@dataclass
class World:
    brokerd: InProcessBrokerd
    loopd: InProcessLoopd
    model: ScriptedModel
    scratch: Path

    @property
    def next_approval(self) -> int:
        """The id the next ask will get: the seq of its Decision record."""
        return verify_log(self.brokerd.home).next_seq

    def args(self, *extra: str) -> list[str]:
        return [
            "chat",
            "--session",
            "chat-1",
            "--socket",
            str(self.loopd.socket),
            "--admin-socket",
            str(self.brokerd.admin_socket),
            *extra,
        ]

    def pending(self) -> list[int]:
        answer = self.brokerd.admin(Approvals())[-1].message
        assert isinstance(answer, ApprovalList)
        return [item.approval for item in answer.items]


def shell_call(scratch: Path) -> str:
    inner = {"command": "make clean", "cwd": str(scratch)}
    return json.dumps({"name": "call_tool", "arguments": {"name": "shell", "arguments": inner}})


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    model = ScriptedModel([shell_call(scratch), "The build is clean.", "ok", "ok", "ok"])
    with (
        running_brokerd(tmp_path) as brokerd,
        running_loopd(
            tmp_path, model, home=brokerd.home, broker_socket=brokerd.broker_socket
        ) as loopd,
    ):
        yield World(brokerd, loopd, model, scratch)


def chat(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: Sequence[str],
    stdin: str,
) -> tuple[int, str, str, io.StringIO]:
    """bxctl chat in this process; its status, stdout, stderr and what is left of stdin."""
    reader = io.StringIO(stdin)
    monkeypatch.setattr("sys.stdin", reader)
    status = bxctl(list(args))
    captured = capsys.readouterr()
    return status, captured.out, captured.err, reader


def block_head(approval: int) -> re.Pattern[str]:
    return re.compile(
        rf"{approval}  \d+ s ago  expires in 1[45] min  session chat-1"
        r"  grant scratch-shell  taint private  digest [0-9a-f]{12}"
    )


# --- the block comes from brokerd, the answer is the id --------------------------------


def test_the_id_typed_in_full_approves_and_the_block_is_brokerds(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = world.next_approval
    status, out, err, _ = chat(monkeypatch, capsys, world.args(), f"clean it\n{approval}\n")
    assert status == 0
    lines = err.splitlines()
    at = next(i for i, line in enumerate(lines) if block_head(approval).search(line))
    assert lines[at].startswith(str(approval))  # piped: no terminal reset before the block
    assert RESET not in err
    body = orjson.dumps({"command": "make clean", "cwd": str(world.scratch)}).decode()
    assert lines[at + 1] == f"    shell {body}"
    assert f"type {approval} to approve, anything else refuses: approved {approval}: runs" in err
    assert out == "The build is clean.\n"
    assert world.brokerd.runtime.count == 1
    assert world.pending() == []


@pytest.mark.parametrize(
    "answer",
    ["y", "yes", "", " {id}", "{id} ", "0{id}", "{id}{id}", "approve {id}", None],
    ids=repr,
)
def test_anything_but_the_id_refuses(
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str | None,
) -> None:
    approval = world.next_approval
    typed = "" if answer is None else answer.format(id=approval) + "\n"  # None: end of input
    status, out, err, _ = chat(monkeypatch, capsys, world.args(), f"clean it\n{typed}")
    assert status == 0
    assert f"type {approval} to approve, anything else refuses: refused {approval}\n" in err
    assert "[denied shell: approval_refused]" in err
    assert world.brokerd.runtime.count == 0
    assert "Denied: the owner refused this call." in world.model.prompt_text(1)
    assert out == "The build is clean.\n"


def test_the_id_with_a_carriage_return_approves(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = world.next_approval
    status, _, err, _ = chat(monkeypatch, capsys, world.args(), f"clean it\n{approval}\r\n")
    assert status == 0
    assert f"approved {approval}: runs" in err
    assert world.brokerd.runtime.count == 1


def test_a_line_already_waiting_in_stdin_refuses(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    approval = world.next_approval
    # typed while the turn ran, before the question: it is the answer, and it refuses
    stdin = f"clean it\nand then tell me a joke\n{approval}\n"
    status, out, err, _ = chat(monkeypatch, capsys, world.args(), stdin)
    assert status == 0
    assert f"refused {approval}" in err
    assert f"approved {approval}" not in err
    assert world.brokerd.runtime.count == 0
    # the id typed after it is a chat line of its own, not an answer
    assert out == "The build is clean.\nok\n"
    assert world.model.prompt_text(-1).endswith(f"{approval}<end_of_turn>\n<start_of_turn>model\n")


def test_when_loopds_event_names_another_tool_the_block_shows_brokerds(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scratch = tmp_path / "scratch"
    write_grant(
        tmp_path / "grants", "scratch-shell", tool="shell", mode="ask", paths=[str(scratch)]
    )
    arguments = orjson.dumps({"command": "rm -rf build", "cwd": str(scratch)}).decode()
    with running_brokerd(tmp_path) as brokerd:
        request = ToolRequest(session="chat-1", call="c1", tool="shell", arguments=arguments)
        with brokerd.open_call(request) as call:
            first = call.first().message
            assert isinstance(first, PendingApprovalResponse)
            approval = first.approval
            lie = ApprovalPendingEvent(approval=approval, tool="read_file", expires=in_ms(60_000))
            loop_sock = brokerd.home / "run" / "fake-loop" / "loop.sock"
            with ScriptedServer(loop_sock, fake_loopd_script([lie], "done")):
                args = ["chat", "--session", "chat-1", "--socket", str(loop_sock)]
                args += ["--admin-socket", str(brokerd.admin_socket)]
                status, _, err, _ = chat(monkeypatch, capsys, args, f"hi\n{approval}\n")
            final = call.final().message
    assert status == 0
    assert f"    shell {arguments}" in err
    assert "read_file" not in err
    assert f"approved {approval}: runs" in err
    assert isinstance(final, ResultResponse)
    assert brokerd.runtime.count == 1


def fake_loopd(tmp_path: Path, events: Sequence[Event], content: str = "done") -> ScriptedServer:
    return ScriptedServer(tmp_path / "fl" / "loop.sock", fake_loopd_script(events, content))


def test_an_id_missing_from_the_list_is_no_longer_pending_and_nothing_is_asked(
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    event = ApprovalPendingEvent(approval=999, tool="shell", expires=in_ms(60_000))
    with fake_loopd(tmp_path, [event]) as loop:
        args = ["chat", "--session", "s1", "--socket", str(loop.path)]
        args += ["--admin-socket", str(world.brokerd.admin_socket)]
        status, _, err, _ = chat(monkeypatch, capsys, args, "hi\n999\n")
    assert status == 0
    assert "approval 999 is no longer pending\n" in err
    assert "type 999" not in err
    assert "approved" not in err
    assert "refused" not in err
    # the line was not read as an answer: it went to loopd as the next chat line
    texts = [r.message.text for r in loop.requests]  # type: ignore[union-attr]
    assert texts == ["hi", "999"]


def test_brokerd_unreachable_is_reported_and_nothing_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    event = ApprovalPendingEvent(approval=4, tool="shell", expires=in_ms(60_000))
    gone = tmp_path / "nowhere" / "admin.sock"
    with fake_loopd(tmp_path, [event]) as loop:
        args = ["chat", "--say", "hi", "--socket", str(loop.path), "--admin-socket", str(gone)]
        status, out, err, _ = chat(monkeypatch, capsys, args, "4\n")
    assert status == 0
    assert "approval 4: cannot ask brokerd: cannot reach brokerd at" in err
    assert "type 4" not in err
    assert out == "done\n"


# --- model text is data --------------------------------------------------------------


def test_model_content_holding_escape_sequences_comes_out_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "\x1b[8mhidden\x1b[0m \u202eevil\u202c line\nnext\ttab \x9b2J"
    model = ScriptedModel([hostile])
    with running_loopd(tmp_path, model) as loopd:
        args = ["chat", "--say", "hi", "--socket", str(loopd.socket)]
        status, out, err, _ = chat(monkeypatch, capsys, args, "")
    assert status == 0
    escaped = "\\u001b[8mhidden\\u001b[0m \\u202eevil\\u202c line\nnext\ttab \\u009b2J"
    assert out == escaped + "\n"
    assert escaped in err  # the content event, shown as it came
    assert "\x1b" not in out + err
    assert "\u202e" not in out + err
    assert "\x9b" not in out + err


def test_tool_names_and_reasoning_from_the_model_are_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[Event] = [
        ReasoningEvent(text="thinking \x1b[8m"),
        ContentEvent(text="x"),
        ToolDeniedEvent(name="read\x1b[2Jfile", reason=DenyReason.NO_GRANT),
    ]
    with fake_loopd(tmp_path, events) as loop:
        args = ["chat", "--say", "hi", "--socket", str(loop.path)]
        _, _, err, _ = chat(monkeypatch, capsys, args, "")
    assert "thinking \\u001b[8m" in err
    assert "[denied read\\u001b[2Jfile: no_grant]" in err
    assert "\x1b[8m" not in err
    assert "\x1b[2J" not in err


@pytest.mark.parametrize(
    ("reason", "pointer"),
    [
        (DenyReason.GRANTS_INVALID, "see runbook.md#grants-invalid"),
        (DenyReason.AUDIT_UNAVAILABLE, "see runbook.md#audit-unavailable"),
        (DenyReason.STATE_UNREADABLE, "see runbook.md#broker-state-damaged"),
        (DenyReason.NO_GRANT, None),
        (DenyReason.APPROVAL_EXPIRED, None),
    ],
    ids=str,
)
def test_a_denial_is_printed_with_its_reason_and_the_owners_pointer(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    reason: DenyReason,
    pointer: str | None,
) -> None:
    with fake_loopd(tmp_path, [ToolDeniedEvent(name="read_file", reason=reason)]) as loop:
        args = ["chat", "--say", "hi", "--socket", str(loop.path)]
        _, _, err, _ = chat(monkeypatch, capsys, args, "")
    expected = f"[denied read_file: {reason}]\n" + (f"{pointer}\n" if pointer else "")
    assert err == expected
    assert "runbook" not in err or pointer is not None


# --- the modes -------------------------------------------------------------------------


def test_json_prints_events_as_json_and_never_contacts_brokerd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    event = ApprovalPendingEvent(approval=7, tool="shell", expires="2026-11-30T12:15:00.000Z")
    admin = tmp_path / "admin" / "admin.sock"
    admin.parent.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(admin))
        listener.listen(1)
        with fake_loopd(tmp_path, [event, ContentEvent(text="\x1b[8mx")]) as loop:
            args = ["chat", "--json", "--say", "hi", "--socket", str(loop.path)]
            status, out, err, reader = chat(
                monkeypatch, capsys, [*args, "--admin-socket", str(admin)], "7\n"
            )
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected to "brokerd"
    assert status == 0
    assert [json.loads(line) for line in err.splitlines()] == [
        {
            "type": "approval_pending",
            "approval": 7,
            "tool": "shell",
            "expires": "2026-11-30T12:15:00.000Z",
        },
        {"type": "content", "text": "\x1b[8mx"},
    ]
    assert "\x1b" not in err  # JSON escapes it for itself
    done = json.loads(out)
    assert done["kind"] == "turn_done"
    assert (done["content"], done["untrusted"]) == ("done", False)
    assert reader.read() == "7\n"  # nothing was asked


def test_say_shows_the_block_and_does_not_ask(world: World, tmp_path: Path) -> None:
    approval = world.next_approval
    with BxctlProcess(tmp_path, world.args("--say", "clean it"), stdin=f"{approval}\n") as proc:
        proc.wait_for(lambda text: "    shell " in text, "the block")
        assert world.pending() == [approval]
        world.brokerd.admin(Refuse(approval=approval))
        status = proc.wait()
    assert status == 0, proc.err
    assert block_head(approval).search(proc.err)
    assert "type " not in proc.err
    assert "approved" not in proc.err
    assert world.brokerd.runtime.count == 0
    assert proc.out == "The build is clean.\n"


# --- standard input: one buffered reader ---------------------------------------------------


class BxctlProcess:
    """The real `bxctl` console script; its stdin written at once, its output in files."""

    def __init__(self, base: Path, args: Sequence[str], stdin: str) -> None:
        self._out = base / "bxctl.out"
        self._err = base / "bxctl.err"
        with self._out.open("wb") as out, self._err.open("wb") as err:
            self.process = subprocess.Popen(
                [*console_script("bxctl"), *args],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=clean_environment(),
            )
        assert self.process.stdin is not None
        self.process.stdin.write(stdin.encode())
        self.process.stdin.close()

    @property
    def out(self) -> str:
        return self._out.read_text()

    @property
    def err(self) -> str:
        return self._err.read_text()

    def wait_for(self, seen: Callable[[str], bool], what: str, timeout_s: float = 30.0) -> None:
        wait_until(lambda: bool(seen(self.err)), timeout_s, what)

    def wait(self, timeout_s: float = 60.0) -> int:
        return self.process.wait(timeout_s)

    def __enter__(self) -> BxctlProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_interactive_mode_reads_the_answer_from_the_same_input_as_the_chat(
    world: World, tmp_path: Path
) -> None:
    # Both lines are in the pipe before bxctl reads: the first buffered read takes both.
    # A second reader on stdin would find nothing left, and refuse.
    approval = world.next_approval
    with BxctlProcess(tmp_path, world.args(), stdin=f"clean it\n{approval}\n") as proc:
        status = proc.wait()
    assert status == 0, proc.err
    assert f"approved {approval}: runs" in proc.err
    assert world.brokerd.runtime.count == 1
    assert proc.out == "The build is clean.\n"


def test_interactive_chat_on_a_terminal_asks_and_the_typed_id_approves(
    world: World,
) -> None:
    approval = world.next_approval
    terminal = Terminal([*console_script("bxctl"), *world.args("--plain")])
    try:
        terminal.expect("Ctrl-D ends")
        terminal.expect("> ")
        terminal.type("please clean the build\n")
        terminal.expect("    shell ")
        terminal.expect(f"type {approval} to approve, anything else refuses: ")
        assert world.pending() == [approval]
        terminal.type(f"{approval}\n")
        terminal.expect(f"approved {approval}: runs")
        terminal.expect("The build is clean.\r\n> ")
        terminal.type("\x04")  # Ctrl-D at the start of a line: end of input
    finally:
        status = terminal.close()
    assert status == 0
    assert terminal.everything.count("The build is clean.") == 1  # the reply shows once
    assert world.brokerd.runtime.count == 1


def test_ctrl_c_on_a_terminal_stops_the_reply_and_keeps_the_session(tmp_path: Path) -> None:
    # issue 42: the scripted model writes a long reply a token every 5 ms (40 s in all)
    long = " ".join(f"Sentence {n} of a story that goes on." for n in range(1000))
    model = ScriptedModel([long, "Still here."], pace_s=0.005)
    # one generation for the whole reply (the scripted model answers each call of a
    # stretch with its next reply)
    limits = TurnLimits(
        reply_tokens=len(long), max_tokens=len(long) + 100, repeat_check_tokens=len(long)
    )
    with running_loopd(tmp_path, model, limits=limits) as loopd:
        args = ["chat", "--plain", "--session", "stop-1", "--socket", str(loopd.socket)]
        terminal = Terminal([*console_script("bxctl"), *args])
        try:
            terminal.expect("> ")
            terminal.type("write me a long story\n")
            terminal.expect("Sentence 3 ")
            terminal.type("\x03")  # Ctrl-C: the terminal sends SIGINT
            terminal.expect("(stopped; the session goes on)\r\n> ")
            wait_until(lambda: bool(loopd.daemon.turns.logs.open("stop-1").entries), 10, "log")
            terminal.type("are you there?\n")
            terminal.expect("Still here.\r\n> ")
            terminal.type("\x03")  # at the prompt: how to leave
            terminal.expect("Ctrl-C again, or Ctrl-D, ends the chat")
            terminal.type("\x03")
        finally:
            status = terminal.close()
    assert status == 0
    entries = SessionLogs(loopd.home).open("stop-1").entries
    cut = [e for e in entries if isinstance(e, ModelEntry) and e.interrupted]
    assert len(cut) == 1
    assert 0 < len(cut[0].ids) < len(long)
    assert cut[0].text in model.prompt_text(-1)  # the next prompt holds it as logged
