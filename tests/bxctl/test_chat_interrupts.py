"""The plain chat's Ctrl-C rules, with the interrupt raised at the exact moment under
test (a terminal cannot time a second SIGINT that finely: tests/bxctl/test_chat.py
drives the same rules through a pseudo-terminal).

A KeyboardInterrupt can come at any bytecode. The chat's promise is that a second
Ctrl-C at the prompt ends the chat with status 0, however soon after the first it
comes; it must never end bxctl by the signal (status 130, "bxctl: interrupted").
"""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.bxctl.chat_cmd import plain_chat
from boxmaker.bxctl.chat_printer import Printer
from boxmaker.bxctl.chat_turns import ChatLink, OnPending
from boxmaker.bxctl.cli import EXIT_OK

HINT = "(Ctrl-C again, or Ctrl-D, ends the chat)"


class InterruptedOut(io.StringIO):
    """Standard error that takes a Ctrl-C while a write holding `at` is under way."""

    def __init__(self, at: str) -> None:
        super().__init__()
        self.at = at
        self.fired = False

    def write(self, text: str) -> int:
        if self.at in text and not self.fired:
            self.fired = True
            raise KeyboardInterrupt
        return super().write(text)


class InterruptedReader(io.StringIO):
    """Standard input whose first read is a Ctrl-C; then the lines given."""

    def __init__(self, lines: str) -> None:
        super().__init__(lines)
        self.first = True

    # typeshed overrides _IOBase.readline the same way for its text streams
    def readline(self, size: int = -1, /) -> str:  # type: ignore[override]
        if self.first:
            self.first = False
            raise KeyboardInterrupt
        return super().readline(size)


@pytest.fixture
def sigint_kept() -> Iterator[None]:
    """The chat ignores SIGINT as it leaves; this process's handler comes back after."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def chat(reader: io.StringIO, out: io.StringIO) -> int:
    """The plain chat; a Ctrl-C that escapes it fails the test (it would not stop pytest)."""
    try:
        return plain_chat(link_of(reader, out), Printer(False), True)
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C escaped the chat: bxctl would end by it, status 130")


def link_of(reader: io.StringIO, out: io.StringIO) -> ChatLink:
    nowhere = Path("/nonexistent/loop.sock")  # no turn is sent: nothing connects
    return ChatLink(
        loop_socket=nowhere,
        admin_socket=nowhere,
        session="interrupts-1",
        resume=False,
        on_pending=OnPending.ASK,
        reader=reader,
        out=out,
    )


@pytest.mark.usefixtures("sigint_kept")
def test_a_second_ctrl_c_as_the_hint_is_written_ends_the_chat_with_status_0() -> None:
    out = InterruptedOut(at=HINT)
    status = chat(InterruptedReader("never read\n"), out)
    assert out.fired
    assert status == EXIT_OK
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # a third one cannot kill it


def test_one_ctrl_c_at_the_prompt_says_how_to_leave_and_the_chat_goes_on() -> None:
    out = io.StringIO()
    status = chat(InterruptedReader(""), out)
    assert status == EXIT_OK  # then Ctrl-D (the end of input)
    said = out.getvalue()
    assert said.count(HINT) == 1
    assert said.endswith(f"{HINT}\n> \n")
