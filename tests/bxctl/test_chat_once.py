"""`bxctl chat`: the reply shows once on a terminal, and both streams keep it when piped.

The real console script talks to a fake loopd on a real socket, which streams the
reply as one content event or as many (as tokens arrive), then its exact answer.
bxctl runs on a pseudo-terminal (standard output and error the same terminal, or
not), or with pipes and files; what the terminal shows is read from its master end,
where each newline reads as "\\r\\n".
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from boxmaker.bxctl import chat_lines, chat_printer
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.wire.loop import ContentEvent, Event, ReasoningEvent, ToolDeniedEvent
from boxmaker.testing.peer_scripts import fake_loopd_script
from boxmaker.testing.processes import clean_environment, console_script
from boxmaker.testing.sockets import ScriptedServer
from boxmaker.testing.terminal import Terminal

ANSWER = "The build is clean."
ONE = [ContentEvent(text=ANSWER)]
TOKENS = [ContentEvent(text=t) for t in ["The", " build", " is", " clean", "."]]


def say(loop: ScriptedServer, tmp_path: Path) -> list[str]:
    """`bxctl chat --say hi` against `loop` (brokerd is never needed: nothing waits)."""
    admin = tmp_path / "no-brokerd" / "admin.sock"
    return [
        *console_script("bxctl"),
        *["chat", "--say", "hi", "--socket", str(loop.path), "--admin-socket", str(admin)],
    ]


def fake_loopd(tmp_path: Path, events: Sequence[Event], content: str) -> ScriptedServer:
    return ScriptedServer(tmp_path / "fl" / "loop.sock", fake_loopd_script(events, content))


def on_one_terminal(tmp_path: Path, events: Sequence[Event], content: str) -> tuple[int, str]:
    """`bxctl chat --say` with standard output and error one terminal: status, screen."""
    with fake_loopd(tmp_path, events, content) as loop, Terminal(say(loop, tmp_path)) as term:
        screen = term.read_to_end()
    return term.process.returncode, screen


# --- one terminal: once ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "content", "screen"),
    [
        pytest.param(ONE, ANSWER, ANSWER + "\r\n", id="one content event"),
        pytest.param(TOKENS, ANSWER, ANSWER + "\r\n", id="one event per token"),
        pytest.param(TOKENS[:3], ANSWER, ANSWER + "\r\n", id="the answer completes a run"),
        pytest.param(
            [ContentEvent(text=" The build"), ContentEvent(text=" is clean.\n")],
            ANSWER,
            " The build is clean.\r\n",
            id="whitespace around the run",
        ),
        pytest.param(
            [ContentEvent(text="one\n\ntwo"), ContentEvent(text="\tthree")],
            "one\n\ntwo\tthree",
            "one\r\n\r\ntwo\tthree\r\n",
            id="lines within the reply",
        ),
        pytest.param(
            [
                ReasoningEvent(text="thinking"),
                ContentEvent(text="Let me look."),
                ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT),
                *TOKENS,
            ],
            ANSWER,
            f"{chat_printer.DIM}thinking{chat_printer.RESET}\r\nLet me look.\r\n"
            f"[denied read_file: no_grant]\r\n{ANSWER}\r\n",
            id="only the run that ends the turn is the answer",
        ),
    ],
)
def test_on_one_terminal_the_reply_shows_once(
    tmp_path: Path, events: list[Event], content: str, screen: str
) -> None:
    status, shown = on_one_terminal(tmp_path, events, content)
    assert status == 0, shown
    assert shown == screen


@pytest.mark.parametrize(
    ("events", "screen"),
    [
        pytest.param([], ANSWER + "\r\n", id="no content event"),
        pytest.param(
            [ContentEvent(text="Working"), ContentEvent(text=" on it")],
            f"Working on it\r\n{ANSWER}\r\n",
            id="a run that is not the answer",
        ),
        pytest.param(
            [ContentEvent(text="The build is dirty.")],
            f"The build is dirty.\r\n{ANSWER}\r\n",
            id="a run that differs from the answer",
        ),
    ],
)
def test_on_one_terminal_an_answer_the_stream_did_not_show_is_printed_whole(
    tmp_path: Path, events: list[Event], screen: str
) -> None:
    status, shown = on_one_terminal(tmp_path, events, ANSWER)
    assert status == 0, shown
    assert shown == screen


def test_model_text_is_escaped_in_the_rest_of_the_answer_too(tmp_path: Path) -> None:
    events = [ContentEvent(text="look: ")]
    status, shown = on_one_terminal(tmp_path, events, "look: \x1b[2Jgone")
    assert status == 0, shown
    assert shown == "look: \\u001b[2Jgone\r\n"


# --- not one terminal: both streams, as before ------------------------------------------


@pytest.mark.parametrize("events", [ONE, TOKENS], ids=["one content event", "one per token"])
def test_piped_both_streams_carry_the_reply(tmp_path: Path, events: list[Event]) -> None:
    with fake_loopd(tmp_path, events, ANSWER) as loop:
        done = subprocess.run(
            say(loop, tmp_path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=clean_environment(),
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ANSWER + "\n"
    assert done.stdout == ANSWER + "\n"


def test_both_streams_in_one_file_show_the_reply_once(tmp_path: Path) -> None:
    log = tmp_path / "chat.log"
    with fake_loopd(tmp_path, TOKENS, ANSWER) as loop, log.open("wb") as file:
        status = subprocess.run(
            say(loop, tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=file,
            stderr=file,  # one file: one reader
            env=clean_environment(),
            timeout=60,
            check=False,
        ).returncode
    assert status == 0
    assert log.read_text() == f"{ANSWER}\n"  # issue 42: `scripts/run > log 2>&1`


@pytest.fixture
def other_terminal() -> Iterator[tuple[int, int]]:
    """A second pseudo-terminal: (master, slave)."""
    master, slave = os.openpty()
    yield master, slave
    os.close(slave)
    os.close(master)


def test_stdout_to_a_file_and_the_stream_on_the_terminal(tmp_path: Path) -> None:
    answer = tmp_path / "answer.txt"
    with (
        fake_loopd(tmp_path, TOKENS, ANSWER) as loop,
        answer.open("wb") as file,
        Terminal(say(loop, tmp_path), stdout=file.fileno()) as term,
    ):
        screen = term.read_to_end()
    assert term.process.returncode == 0, screen
    assert screen == ANSWER + "\r\n"
    assert answer.read_text() == ANSWER + "\n"


def test_stderr_to_a_file_and_the_answer_on_the_terminal(tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    with (
        fake_loopd(tmp_path, TOKENS, ANSWER) as loop,
        events.open("wb") as file,
        Terminal(say(loop, tmp_path), stderr=file.fileno()) as term,
    ):
        screen = term.read_to_end()
    assert term.process.returncode == 0, screen
    assert screen == ANSWER + "\r\n"
    assert events.read_text() == ANSWER + "\n"


def test_two_terminals_each_show_their_stream(
    tmp_path: Path, other_terminal: tuple[int, int]
) -> None:
    master, slave = other_terminal
    with (
        fake_loopd(tmp_path, TOKENS, ANSWER) as loop,
        Terminal(say(loop, tmp_path), stdout=slave) as term,
    ):
        screen = term.read_to_end()
    assert term.process.returncode == 0, screen
    assert screen == ANSWER + "\r\n"
    assert os.read(master, 4096) == (ANSWER + "\r\n").encode()


# --- the rules, as functions -------------------------------------------------------------


def test_same_output_is_one_tty_file_or_pipe(tmp_path: Path) -> None:
    master, slave = os.openpty()
    other_master, other_slave = os.openpty()
    read_end, write_end = os.pipe()
    by_name = os.open(os.ttyname(slave), os.O_WRONLY | os.O_NOCTTY)
    files = {
        name: open(fd, "w", closefd=False)  # noqa: SIM115 (closed below)
        for name, fd in [
            ("slave", slave),
            ("by_name", by_name),
            ("other", other_slave),
            ("pipe", write_end),
        ]
    }
    try:
        same = chat_printer.same_output
        assert same(files["slave"], files["slave"])
        assert same(files["slave"], files["by_name"])  # another descriptor, one terminal
        assert not same(files["slave"], files["other"])
        assert not same(files["slave"], files["pipe"])
        assert same(files["pipe"], files["pipe"])  # one pipe: one reader
        with open(tmp_path / "a", "w") as a, open(tmp_path / "b", "w") as b:
            assert not same(a, b)
            with open(tmp_path / "a", "a") as again:
                assert same(a, again)  # one file
    finally:
        for file in files.values():
            file.close()
        for fd in (master, slave, other_master, other_slave, read_end, write_end, by_name):
            os.close(fd)


@pytest.mark.parametrize(
    ("shown", "answer", "rest"),
    [
        (None, "a b", None),
        ("", "a b", None),
        (" \n", "a b", None),
        ("a b", "a b", ""),
        ("a", "a b", " b"),
        ("  a", "a b", " b"),
        ("a b\n", "a b", ""),
        ("a b", "a b\n", "\n"),
        ("a c", "a b", None),
        ("a b c", "a b", None),
        ("b", "a b", None),
    ],
    ids=repr,
)
def test_unshown_rest(shown: str | None, answer: str, rest: str | None) -> None:
    assert chat_lines.unshown_rest(shown, answer) == rest
