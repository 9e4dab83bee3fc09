"""One chat session's exchanges with loopd and brokerd, for both chats (plain, console).

I/O: loop.sock (one connection per turn), admin.sock (approvals), the reader the
answers to approvals are read from, and the stream the approval blocks go to.

Two rules hold everything here. What the owner is shown about a waiting call
comes from brokerd, never from loopd's event, which gives the id and nothing
else: a compromised loopd must not choose what the owner approves. And only the
id, typed in full, approves: lines typed while a turn ran are already waiting in
standard input, and a stray line must refuse, never approve.

Exits of `handle_pending` ("report" is one line on `out`, and the call stays
pending at brokerd):
    1 brokerd cannot be asked        report "approval N: cannot ask brokerd: ..."
    2 N is not in the list           report "approval N is no longer pending"
    3 on a terminal, reset its attributes; then the two-line block
    4 not asking (--say)             return
    5 ask "type N to approve, anything else refuses: "
    6 read one line (end of input is an empty answer)
    7 exactly N approves; anything else refuses
    8 the command prints its own line; any other failure is reported

A Ctrl-C while a turn runs closes its connection: loopd stops the reply at its next
token and keeps what it wrote (marked interrupted, with a notice to the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import IO, Protocol, TextIO

from boxmaker.bxctl.approvals_cmd import approve, pending_items, refuse, write_block
from boxmaker.bxctl.cli import CliError
from boxmaker.bxctl.client import LOOPD, stream
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    Compact,
    Event,
    SessionShow,
    Turn,
    TurnDone,
    TurnEvent,
)

RESET = "\x1b[0m"


class OnPending(Enum):
    EVENT_ONLY = "json"
    SHOW = "say"
    ASK = "interactive"


class TurnView(Protocol):
    """What shows a turn's events: the plain chat's printer, or the console."""

    def event(self, out: TextIO, event: Event) -> None: ...

    def end_reasoning(self, out: TextIO) -> None: ...

    def end_blocks(self, out: TextIO) -> None: ...


def now() -> str:
    return format_timestamp(datetime.now(UTC))


def handle_pending(
    admin_socket: Path, approval: int, ask: bool, now: str, input: IO[str], out: TextIO
) -> None:
    """Show a waiting call as brokerd describes it; in interactive mode, ask the owner."""
    try:
        items = pending_items(admin_socket)
    except CliError as exc:
        out.write(f"approval {approval}: cannot ask brokerd: {exc.message}\n")
        return
    item = next((i for i in items if i.approval == approval), None)
    if item is None:
        out.write(f"approval {approval} is no longer pending\n")
        return
    if out.isatty():  # reset what the terminal may have been left in; piped, no escapes
        out.write(RESET)
    write_block(out, item, now)
    if not ask:
        return
    out.write(f"type {approval} to approve, anything else refuses: ")
    out.flush()
    line = input.readline()
    line = line.removesuffix("\n").removesuffix("\r")
    try:
        if line == str(approval):
            approve(admin_socket, approval, out)
        else:
            refuse(admin_socket, approval, stream=out)
    except CliError as exc:
        out.write(f"approval {approval}: {exc.message}\n")


def stream_turn(
    loop_socket: Path,
    turn: Turn | Compact,
    on_pending: OnPending,
    admin_socket: Path,
    view: TurnView,
    input: IO[str],
    out: TextIO,
) -> TurnDone:
    """Send one turn (or a compaction, answered as one), show its events as they come,
    and answer its approvals."""
    what = "the turn" if isinstance(turn, Turn) else "the compaction"
    done: TurnDone | None = None
    answers = stream(loop_socket, turn, "turn", server=LOOPD, timeout_s=None)
    try:
        for envelope in answers:
            message = envelope.message
            if isinstance(message, TurnEvent):
                view.event(out, message.event)
                pending = message.event
                if (
                    isinstance(pending, ApprovalPendingEvent)
                    and on_pending is not OnPending.EVENT_ONLY
                ):
                    ask = on_pending is OnPending.ASK
                    handle_pending(admin_socket, pending.approval, ask, now(), input, out)
                out.flush()
            elif isinstance(message, TurnDone):
                done = message
            elif isinstance(message, Error):
                raise CliError(f"loopd refused {what}: {message.code}: {message.message}")
        if done is None:
            raise CliError(
                f"loopd ended {what} without an answer; {Runbook.LOOPD_UNAVAILABLE.pointer}"
            )
    except (CliError, KeyboardInterrupt):
        view.end_blocks(out)  # the error's line starts a line of its own
        raise
    finally:
        answers.close()  # a Ctrl-C closes the turn's connection now: loopd stops the turn
    view.end_reasoning(out)  # a content run stays open for the answer
    return done


def session_exists(loop_socket: Path, session: str) -> bool:
    """Whether loopd has a log of `session` (a turn stopped at once may not have one)."""
    try:
        answers = list(stream(loop_socket, SessionShow(session=session), "show", server=LOOPD))
    except CliError:
        return False
    return not isinstance(answers[-1].message, Error)


@dataclass
class ChatLink:
    """One chat session: its sockets, its id, and whether loopd has a log of it yet."""

    loop_socket: Path
    admin_socket: Path
    session: str
    resume: bool
    on_pending: OnPending
    reader: IO[str]  # the answers to approvals (and, in the plain chat, the messages)
    out: TextIO  # events, approval blocks and questions

    def turn(self, text: str, view: TurnView) -> TurnDone:
        """One turn; after it (answered or not) the session exists at loopd."""
        turn = Turn(session=self.session, text=text, resume=self.resume)
        try:
            done = self._stream(turn, view)
        except KeyboardInterrupt:
            self.resume = self.resume or session_exists(self.loop_socket, self.session)
            raise
        self.resume = True
        return done

    def compact(self, view: TurnView) -> TurnDone | None:
        """`/compact`: the session compacted now; None (after one line saying why) when
        there is nothing to compact yet or loopd refused."""
        if not self.resume:
            self.out.write(f"bxctl: session {self.session} has no turn yet: nothing to compact\n")
            return None
        try:
            return self._stream(Compact(session=self.session), view)
        except CliError as exc:
            self.out.write(f"bxctl: {exc.message}\n")
            return None

    def _stream(self, turn: Turn | Compact, view: TurnView) -> TurnDone:
        return stream_turn(
            self.loop_socket,
            turn,
            self.on_pending,
            self.admin_socket,
            view,
            self.reader,
            self.out,
        )
