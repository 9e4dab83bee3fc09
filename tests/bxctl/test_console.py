"""`bxctl chat` as the owner's console, in a real terminal: tmux (issue 42).

bxctl runs in a tmux pane as the owner runs it (its console script, a terminal of
100 x 32); what the owner sees is read from tmux's screen, with and without the
escape sequences of its colours. loopd and brokerd run in this process over real
sockets, with the scripted model; where loopd's own processor time is measured, it
runs in a process of its own (`boxmaker.testing.scripted_loopd`), its model busy on
the processor while it writes, as a real one is.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from support.skips import skip_or_fail

from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker_admin import SessionStateList, SessionStates
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, UserEntry
from boxmaker.testing.daemons import (
    InProcessBrokerd,
    InProcessLoopd,
    running_brokerd,
    running_loopd,
)
from boxmaker.testing.homes import write_grant
from boxmaker.testing.hostile_text import CONTROLS, OSC_8, OSC_52, SPELLED, TITLE
from boxmaker.testing.processes import console_script
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.tmux import TmuxPane, tmux_available
from boxmaker.testing.waiting import wait_until

if not tmux_available():
    skip_or_fail(
        "tmux is not installed (scripts/install-host-packages installs it)", allow_module_level=True
    )

QWEN = Path(__file__).parents[1] / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"
SGR = re.compile(r"\x1b\[([0-9;]*)m")
PROMPT = re.compile(r"^> ?$", re.MULTILINE)  # an empty prompt line (tmux drops its blank)

MARKDOWN = (
    "# Cleaning up\n\n"
    "Run **this** first:\n\n"
    "- stop the service\n- clear the cache\n\n"
    "```python\ndef clean(path):\n    return path.unlink()\n```\n\n"
    "That is all."
)


def pane(state: Path, *args: str) -> TmuxPane:
    """bxctl chat in a new tmux pane, its history under `state`."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(state),
        "XDG_STATE_HOME": str(state / "state"),
        "TERM": "screen-256color",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return TmuxPane([*console_script("bxctl"), "chat", *args], env)


def chat_args(loopd: InProcessLoopd, session: str = "c1", admin: Path | None = None) -> list[str]:
    admin_socket = admin if admin is not None else loopd.home / "no-brokerd.sock"
    return [
        "--session",
        session,
        "--socket",
        str(loopd.socket),
        "--admin-socket",
        str(admin_socket),
    ]


def qwen(replies: list[str], pace_s: float = 0.0) -> ScriptedModel:
    return ScriptedModel(replies, chat_template=QWEN.read_text(), pace_s=pace_s, serial=True)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    made = tmp_path / "owner"
    made.mkdir()
    return made


def styles_of(screen: str, text: str) -> set[str]:
    """The SGR attributes in force where `text` starts on the escaped screen ("1" bold,
    "2" dim, "7" reverse, "38:5:81" a foreground colour): tmux writes a change only."""
    styled = "(?:\x1b\\[[0-9;]*m)*".join(re.escape(char) for char in text)
    found = re.search(styled, screen)
    assert found is not None, text
    active: set[str] = set()
    for match in SGR.finditer(screen[: found.start()]):
        params = match.group(1).split(";")
        i = 0
        while i < len(params):
            param = params[i] or "0"
            if param == "0":
                active.clear()
            elif param in ("38", "48"):
                width = 3 if params[i + 1] == "5" else 5
                active = {a for a in active if not a.startswith(param + ":")}
                active.add(":".join(params[i : i + width]))
                i += width - 1
            elif param in ("39", "49"):
                active = {a for a in active if not a.startswith(param[0] + "8:")}
            else:
                active.add(param)
            i += 1
    return active


# --- markdown, rendered from escaped text -----------------------------------------------


def test_a_markdown_reply_is_rendered_with_its_code_highlighted(
    tmp_path: Path, state: Path
) -> None:
    with (
        running_loopd(tmp_path, ScriptedModel([MARKDOWN])) as loopd,
        pane(state, *chat_args(loopd)) as term,
    ):
        term.wait_for("Ctrl-D ends")
        term.type("how do I clean up?")
        term.keys("Enter")
        plain = term.wait_for("That is all.")
        term.wait_for(lambda s: PROMPT.search(s.split("That is all.")[1]) is not None)
        shown = term.screen(escapes=True)
    assert "Cleaning up" in plain
    assert "# Cleaning up" not in plain  # a heading, not its markup
    assert "**" not in plain
    assert "```" not in plain
    assert "• stop the service" in plain
    assert "def clean(path):" in plain
    assert plain.count("That is all.") == 1  # the reply shows once
    # the code is highlighted: its keyword and its name in colours of their own
    keyword = {a for a in styles_of(shown, "def clean") if a.startswith("38:")}
    name = {a for a in styles_of(shown, "clean(path)") if a.startswith("38:")}
    assert keyword
    assert name
    assert keyword != name  # in colours of their own
    assert "1" in styles_of(shown, "this first")  # bold


def test_a_hostile_reply_is_shown_escaped_and_inert(tmp_path: Path, state: Path) -> None:
    hostile = (
        f"{TITLE}Look: {CONTROLS}\n\n{OSC_8} and {OSC_52}\n\n"
        "[docs](https://evil.example/steal) <!-- hidden from the owner -->\n\n"
        f"```sh\n{OSC_52}rm -rf ~\n```\nEnd of reply."
    )
    with (
        running_loopd(tmp_path, ScriptedModel([hostile])) as loopd,
        pane(state, *chat_args(loopd)) as term,
    ):
        term._tmux("set-option", "-g", "set-clipboard", "on")  # an OSC 52 would land
        title = term.format("#{pane_title}")
        term.wait_for("Ctrl-D ends")
        term.type("show me")
        term.keys("Enter")
        term.wait_for(lambda s: PROMPT.search(s.partition("End of reply.")[2]) is not None)
        screen, escaped = term.screen(), term.screen(escapes=True)  # one screen, settled
        assert term.format("#{pane_title}") == title
        buffers = term.buffers()
    assert "Ctrl-D ends" in screen  # \x1b[2J cleared nothing
    assert "pwned" not in buffers
    assert "cHduZWQ" not in buffers
    for spelled in SPELLED:
        assert spelled in screen, spelled
    assert "\\u001b]52;c;cHduZWQ=\\u0007" in screen
    assert "\\u001b]8;;https://evil.example/" in screen
    assert "https://evil.example/steal" in screen  # a link shows where it goes
    assert "<!-- hidden from the owner -->" in screen  # HTML is text, never dropped
    # nothing but colours and styles reached the terminal: tmux keeps no other state
    assert set(re.sub(r"\x1b\[[0-9;]*m", "", escaped)) <= set(screen) | {"\n"}


# --- the status line --------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[InProcessBrokerd, InProcessLoopd, Path]]:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "keys.txt").write_text("the vault code is 1234\n")
    write_grant(
        tmp_path / "grants",
        "notes-read",
        tool="read_file",
        result_class="secret",
        paths=[str(notes)],
    )
    read = json.dumps(
        {
            "name": "call_tool",
            "arguments": {"name": "read_file", "arguments": {"path": str(notes / "keys.txt")}},
        }
    )
    model = ScriptedModel([read, "It says 1234."])
    limits = TurnLimits(context=8192)
    with (
        running_brokerd(tmp_path) as brokerd,
        running_loopd(
            tmp_path, model, home=brokerd.home, broker_socket=brokerd.broker_socket, limits=limits
        ) as loopd,
    ):
        yield brokerd, loopd, notes


def test_the_status_line_shows_the_context_and_brokerds_taint(
    world: tuple[InProcessBrokerd, InProcessLoopd, Path], state: Path
) -> None:
    brokerd, loopd, _ = world
    with pane(state, *chat_args(loopd, "s1", brokerd.admin_socket)) as term:
        term.wait_for("Ctrl-D ends")
        before = term.wait_for(lambda s: s.splitlines()[-1].startswith("s1 ·")).splitlines()[-1]
        term.type("what is in my keys file?")
        term.keys("Enter")
        screen = term.wait_for("It says 1234.")
        screen = term.wait_for(lambda s: "taint secret" in s.splitlines()[-1])
    states = brokerd.admin(SessionStates())[-1].message
    assert isinstance(states, SessionStateList)
    (brokers,) = [s for s in states.items if s.session == "s1"]
    assert brokers.taint is DataClass.SECRET
    assert before.startswith("s1 · taint private")  # a new session, as brokerd has it
    entries = SessionLogs(loopd.home).open("s1").entries
    last = [e for e in entries if isinstance(e, ModelEntry)][-1]
    used = (last.prompt or 0) + len(last.ids)
    status = screen.splitlines()[-1]
    assert f"context {used:,}/8,192 ({100 * used / 8192:.0f}%)" in status
    assert "tok/s" in status
    assert "[tool call_tool" in screen  # the call, as the plain chat shows it
    assert "[result call_tool:" in screen


# --- reasoning, folded ------------------------------------------------------------------


def test_reasoning_streams_dim_and_folded_and_a_key_shows_it_all(
    tmp_path: Path, state: Path
) -> None:
    thoughts = [f"step {n}: weigh option {n}" for n in range(1, 9)]
    reply = "\n".join(thoughts) + "\n</think>\n\nGo with option 8."
    model = qwen([reply], pace_s=0.01)
    dialect, _ = choose_dialect(LoopdConfig(), model)
    with (
        running_loopd(tmp_path, model, dialect=dialect) as loopd,
        pane(state, *chat_args(loopd)) as term,
    ):
        term.wait_for("Ctrl-D ends")
        term.type("which option?")
        term.keys("Enter")
        streaming = term.wait_for("step 6:", escapes=True)
        done = term.wait_for("Go with option 8.")
        after = term.screen(escapes=True)
        term.wait_for(lambda s: PROMPT.search(s) is not None)
        term.keys("C-t")
        shown = term.wait_for("step 1: weigh option 1")
    # while it streamed: a header, the last lines only, all dim
    assert "thinking" in streaming
    assert "step 2: weigh" not in streaming
    assert "2" in styles_of(streaming, "step 6:")
    # then one dim line says how long and how much
    assert re.search(r"thought \d+s, 8 lines; Ctrl-T at the prompt shows them", done)
    assert "step 8:" not in done
    assert "2" in styles_of(after, "thought ")
    # and the key shows every line of it
    for thought in thoughts:
        assert thought in shown


# --- input: history, paste --------------------------------------------------------------


def test_history_persists_across_chats_and_is_the_owners_alone(tmp_path: Path, state: Path) -> None:
    model = ScriptedModel(["Noted.", "Noted again."])
    history = state / "state" / "boxmaker" / "chat-history"
    history.parent.mkdir(parents=True, mode=0o755)
    history.write_text("")
    history.chmod(0o644)  # left readable by another program: narrowed
    with (
        running_loopd(tmp_path, model) as loopd,
        pane(state, *chat_args(loopd, "h1")) as term,
    ):
        term.wait_for("Ctrl-D ends")
        term.type("remember the milk")
        term.keys("Enter")
        term.wait_for("Noted.")
        term.wait_for(lambda s: PROMPT.search(s.split("Noted.")[1]) is not None)
        term.keys("C-d")
        assert term.exit_status() == 0
        assert stat.S_IMODE(history.stat().st_mode) == 0o600
        assert stat.S_IMODE(history.parent.stat().st_mode) == 0o700
        assert "remember the milk" in history.read_text()
        with pane(state, *chat_args(loopd, "h2")) as term:
            term.wait_for("Ctrl-D ends")
            term.keys("Up")
            term.wait_for("> remember the milk")
            term.keys("Enter")
            term.wait_for("Noted again.")
    (user,) = [e for e in SessionLogs(loopd.home).open("h2").entries if isinstance(e, UserEntry)]
    assert user.text == "remember the milk"


def test_a_pasted_block_is_one_message(tmp_path: Path, state: Path) -> None:
    block = "def f(x):\n    return x\n\nprint(f(2))"
    with (
        running_loopd(tmp_path, ScriptedModel(["It prints 2."])) as loopd,
        pane(state, *chat_args(loopd, "p1")) as term,
    ):
        term.wait_for("Ctrl-D ends")
        term.type("what does this print? ")
        term.paste(block)
        term.wait_for("print(f(2))")
        term.keys("Enter")
        term.wait_for("It prints 2.")
    (user,) = [e for e in SessionLogs(loopd.home).open("p1").entries if isinstance(e, UserEntry)]
    assert user.text == "what does this print? " + block


def test_a_slash_command_completes_and_runs_without_a_turn(tmp_path: Path, state: Path) -> None:
    model = ScriptedModel([])  # any turn would fail: the model has no reply
    with running_loopd(tmp_path, model) as loopd, pane(state, *chat_args(loopd, "k1")) as term:
        term.wait_for("Ctrl-D ends")
        term.type("/he")
        term.wait_for("these commands and the keys")  # the completion menu
        term.keys("Tab")
        term.wait_for("> /help")
        term.keys("Enter")
        screen = term.wait_for("Esc then Enter starts a new line")
    assert "/compact" in screen
    assert model.prompts == []


# --- stopping a reply -------------------------------------------------------------------

LONG = " ".join(f"Sentence {n} of a story that goes on." for n in range(1000))


def test_ctrl_c_stops_the_reply_keeps_the_session_and_a_second_one_leaves(
    tmp_path: Path, state: Path
) -> None:
    model = ScriptedModel([LONG, "Still here."], pace_s=0.005, serial=True)
    limits = TurnLimits(
        reply_tokens=len(LONG), max_tokens=len(LONG) + 100, repeat_check_tokens=len(LONG)
    )
    with (
        running_loopd(tmp_path, model, limits=limits) as loopd,
        pane(state, *chat_args(loopd, "x1")) as term,
    ):
        term.wait_for("Ctrl-D ends")
        term.type("write me a long story")
        term.keys("Enter")
        term.wait_for("Sentence 3 ")
        term.keys("C-c")
        pressed = time.monotonic()
        term.wait_for("(stopped; the session goes on)")
        term.wait_for(lambda s: PROMPT.search(s.split("session goes on)")[1]) is not None)
        back = time.monotonic() - pressed
        wait_until(lambda: bool(model.returned), 10, "the generation to stop")
        stopped = model.returned[0] - pressed
        term.type("are you there?")
        term.keys("Enter")
        term.wait_for("Still here.")
        term.wait_for(lambda s: PROMPT.search(s.split("Still here.")[1]) is not None)
        term.keys("C-c")
        term.wait_for("Ctrl-C again, or Ctrl-D, ends the chat")
        term.keys("C-c")
        # it leaves with status 0, wherever the key came: in prompt_toolkit's raw mode (a
        # key), or between it and the line mode (a SIGINT, inside the chat's guard). The
        # one status-less exit seen in CI was tmux's: a pane dead before it was reaped
        assert term.exit_status() == 0
    entries = SessionLogs(loopd.home).open("x1").entries
    cut = [e for e in entries if isinstance(e, ModelEntry) and e.interrupted]
    assert len(cut) == 1
    assert 0 < len(cut[0].ids) < len(LONG)
    assert cut[0].text in model.prompt_text(-1)  # the next prompt holds it as logged
    assert back < 1.0, back
    assert stopped < 1.0, stopped


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


def test_after_ctrl_c_loopds_processor_falls_to_idle_within_a_second(
    tmp_path: Path, state: Path
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_bytes(
        orjson.dumps(
            {
                "replies": [LONG],
                "pace_s": 0.005,
                "busy": True,
                "limits": {
                    "reply_tokens": len(LONG),
                    "max_tokens": len(LONG) + 100,
                    "repeat_check_tokens": len(LONG),
                },
            }
        )
    )
    loopd = subprocess.Popen(
        [sys.executable, "-m", "boxmaker.testing.scripted_loopd", str(tmp_path), str(spec)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert loopd.stdout is not None
        socket_path = loopd.stdout.readline().strip()
        args = ["--session", "cpu", "--socket", socket_path, "--admin-socket", "/nonexistent"]
        hz = os.sysconf("SC_CLK_TCK")
        with pane(state, *args) as term:
            term.wait_for("Ctrl-D ends")
            term.type("write me a long story")
            term.keys("Enter")
            term.wait_for("Sentence 3 ")
            start = _cpu_ticks(loopd.pid)
            time.sleep(1.0)
            busy = (_cpu_ticks(loopd.pid) - start) / hz
            term.keys("C-c")
            term.wait_for("(stopped; the session goes on)", timeout_s=1.0)
            time.sleep(1.0)  # within a second of the key
            start = _cpu_ticks(loopd.pid)
            time.sleep(1.0)
            idle = (_cpu_ticks(loopd.pid) - start) / hz
    finally:
        loopd.terminate()
        loopd.wait(10)
        if loopd.stdout is not None:
            loopd.stdout.close()
    # writing, it kept the processor busy (a core, less on a machine shared with others)
    assert busy > 0.1, busy
    assert idle < 0.05, idle  # a second after Ctrl-C, next to nothing
    assert busy > 2 * idle
