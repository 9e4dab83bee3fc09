"""`bxctl chat`: talk to the agent, see what it does, and answer its approvals.

I/O: loop.sock (one connection per turn), admin.sock (approvals), standard
input (one buffered reader for both the chat lines and the answers), standard
error (events and questions) and standard output (the answers).

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

The reply shows once. Content events are the reply as it streams (one event, or
many as the tokens arrive): their texts are written to standard error one after
another, as one run that the next other event, or the end of the turn, ends with a
newline. The answer (`turn_done`'s content, which is exact) goes to standard output.
To two places (two pipes, a file and a terminal), that is all: both streams carry
the reply, so a script reading standard output gets the answer whatever the events
were. When standard output and standard error are one place that one reader reads
(one terminal, or one file or pipe, `scripts/run > log 2>&1`: equal `st_dev`,
`st_rdev` and `st_ino`), the reader would read the reply twice, so the answer is not
repeated:
    - the run of content events that ends the turn is compared with the answer,
      ignoring whitespace before both and, when the run holds all of it, after both;
    - when the run showed the answer or its beginning, standard output gets only
      what the run has not shown, then the newline (none when the run showed all
      and already ended with one): the answer completes the line;
    - otherwise (no content event, or a run that differs from the answer, such as a
      turn stopped at its token limit), the run ends with its newline and the whole
      answer is printed, as when piped: the answer is never lost to save a repeat.
`--json` prints events and the answer in different forms; it is never shortened.

Ctrl-C while a turn runs closes its connection: loopd stops the reply at its next
token and keeps what it wrote (marked interrupted, with a notice to the model), and
the prompt comes back in the same session. Ctrl-C at the prompt says how to leave; a
second one, or Ctrl-D, ends the chat.

`/compact`, typed as a chat line, compacts the session now instead of sending a
turn (`compact` on loop.sock: answered as a turn, its answer one line saying what
was done; a memory tool the model calls in its chance to save waits for approval
as in any turn). A session with no turn yet has nothing to compact, and a
compaction loopd refuses is one line: the chat goes on either way. When loopd
compacts (asked, or by itself before a turn whose prompt would pass its
threshold), the `context_compacted` event is one line, `context compacted: 1,812
-> 604 tokens` (in `--json` mode, the event itself).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import IO, Any, TextIO

import orjson

from boxmaker.bxctl.approvals_cmd import approve, pending_items, refuse, write_block
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser
from boxmaker.bxctl.client import LOOPD, default_admin_socket, default_loop_socket, stream
from boxmaker.core.display.escape import escape_arguments, escape_model_text
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.model.compaction_plan import compacted_line
from boxmaker.core.runbook import Runbook
from boxmaker.core.timestamps import format_timestamp
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.loop import (
    ApprovalPendingEvent,
    Compact,
    ContentEvent,
    ContextCompactedEvent,
    Event,
    ReasoningEvent,
    SessionShow,
    ToolCallStartedEvent,
    ToolDeniedEvent,
    ToolResultEvent,
    Turn,
    TurnDone,
    TurnEvent,
    UsageEvent,
)

RESET = "\x1b[0m"
DIM = "\x1b[2m"
COMPACT = "/compact"


class OnPending(Enum):
    EVENT_ONLY = "json"
    SHOW = "say"
    ASK = "interactive"


def add_parser(commands: Any) -> None:
    chat: Parser = commands.add_parser("chat", help="talk to the agent (interactive by default)")
    chat.add_argument("--say", metavar="TEXT", help="send one message, print the answer, exit")
    chat.add_argument("--json", action="store_true", help="print every event as one JSON line")
    chat.add_argument("--session", help="the session id (default: a new one)")
    chat.add_argument("--resume", action="store_true", help="go on with an existing session")
    chat.add_argument("--socket", type=Path, help="loopd's socket (default: under $BOXMAKER_HOME)")
    chat.add_argument(
        "--admin-socket", type=Path, help="brokerd's admin socket (default: under $BOXMAKER_HOME)"
    )
    chat.set_defaults(handler=cmd_chat)


def _now() -> str:
    return format_timestamp(datetime.now(UTC))


class Printer:
    """Writes events for a person: everything the model chose is escaped as data.

    Content events are written as one run (see the module docstring); `shown` is
    the run's text as the model wrote it, for the answer to be compared with.
    """

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        self._dimmed = False
        self._content: list[str] | None = None  # the open run of content events

    def event(self, out: TextIO, event: Event) -> None:
        if self.json_mode:
            line = orjson.dumps(event.model_dump(mode="json", by_alias=True)).decode()
            out.write(escape_arguments(line) + "\n")  # the same JSON, nothing hidden
            return
        if isinstance(event, UsageEvent):
            return  # for the console's status line; a plain run shows the reply alone
        if not isinstance(event, ContentEvent):
            self.end_content(out)
        match event:
            case ReasoningEvent(text=text):
                if not self._dimmed:
                    out.write(DIM)
                    self._dimmed = True
                out.write(escape_model_text(text))
            case ContentEvent(text=text):
                self.end_reasoning(out)
                if self._content is None:
                    self._content = []
                self._content.append(text)
                out.write(escape_model_text(text))
            case ToolCallStartedEvent(name=name, arguments=arguments):
                self.end_reasoning(out)
                out.write(f"[tool {escape_model_text(name)} {escape_arguments(arguments)}]\n")
            case ToolResultEvent(name=name, content=content, truncated=truncated):
                flags = [event.class_.value] + (["untrusted"] if event.untrusted else [])
                flags += ["truncated"] if truncated else []
                size = len(content.encode())
                out.write(f"[result {escape_model_text(name)}: {size} bytes, {', '.join(flags)}]\n")
            case ToolDeniedEvent(name=name, reason=reason):
                self.end_reasoning(out)
                out.write(f"[denied {escape_model_text(name)}: {reason}]\n")
                pointer = _pointer(reason)
                if pointer is not None:
                    out.write(pointer + "\n")
            case ApprovalPendingEvent():
                self.end_reasoning(out)
            case ContextCompactedEvent(before=before, after=after):
                self.end_reasoning(out)
                out.write(compacted_line(before, after) + "\n")

    @property
    def shown(self) -> str | None:
        """The open content run's text, unescaped; None when no run is open."""
        return None if self._content is None else "".join(self._content)

    def end_reasoning(self, out: TextIO) -> None:
        if self._dimmed:
            out.write(RESET + "\n")
            self._dimmed = False

    def end_content(self, out: TextIO) -> None:
        """End the open content run with its newline."""
        if self._content is not None:
            out.write("\n")
            self._content = None

    def hand_over_content(self) -> None:
        """Close the open content run without its newline: the answer ends the line."""
        self._content = None

    def end_blocks(self, out: TextIO) -> None:
        self.end_content(out)
        self.end_reasoning(out)


def same_output(first: IO[str], second: IO[str]) -> bool:
    """Whether both streams write to one place that one reader reads: one terminal,
    one file or one pipe (equal device and inode, and for a tty its device number)."""
    try:
        a, b = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (OSError, ValueError):  # not a file (a test's capture), or closed
        return False
    return (a.st_dev, a.st_rdev, a.st_ino) == (b.st_dev, b.st_rdev, b.st_ino)


def unshown_rest(shown: str | None, answer: str) -> str | None:
    """What of `answer` the content run `shown` has not shown; None when it showed else.

    Whitespace before both is ignored (the run may open with what the answer
    drops), and so is whitespace after both when the run holds all of the answer.
    """
    if shown is None or not shown.strip():
        return None
    head, body = shown.lstrip(), answer.lstrip()
    if body.startswith(head):
        return body[len(head) :]
    if head.rstrip() == body.rstrip():
        return ""
    return None


def _pointer(reason: DenyReason) -> str | None:
    """The runbook pointer the deny-reason table gives `reason`, if any."""
    return None if reason.runbook is None else reason.runbook.pointer


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
    printer: Printer,
    input: IO[str],
    out: TextIO,
) -> TurnDone:
    """Send one turn (or a compaction, answered as one), print its events as they come,
    and answer its approvals."""
    what = "the turn" if isinstance(turn, Turn) else "the compaction"
    done: TurnDone | None = None
    answers = stream(loop_socket, turn, "turn", server=LOOPD, timeout_s=None)
    try:
        for envelope in answers:
            message = envelope.message
            if isinstance(message, TurnEvent):
                printer.event(out, message.event)
                pending = message.event
                if (
                    isinstance(pending, ApprovalPendingEvent)
                    and on_pending is not OnPending.EVENT_ONLY
                ):
                    ask = on_pending is OnPending.ASK
                    handle_pending(admin_socket, pending.approval, ask, _now(), input, out)
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
        printer.end_blocks(out)  # the error's line starts a line of its own
        raise
    finally:
        answers.close()  # a Ctrl-C closes the turn's connection now: loopd stops the turn
    printer.end_reasoning(out)  # a content run stays open for the answer
    return done


def cmd_chat(args: argparse.Namespace) -> int:
    loop_socket: Path = args.socket or default_loop_socket()
    admin_socket: Path = args.admin_socket or default_admin_socket()
    if args.json:
        on_pending = OnPending.EVENT_ONLY
    elif args.say is not None:
        on_pending = OnPending.SHOW
    else:
        on_pending = OnPending.ASK
    session = args.session or f"chat-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    printer = Printer(args.json)
    reader = sys.stdin  # one buffered reader for the chat lines and the answers
    out = sys.stderr
    once = not args.json and same_output(sys.stdout, out)  # the reply shows once
    resume = bool(args.resume)
    if args.say is not None:
        done = stream_turn(
            loop_socket,
            Turn(session=session, text=args.say, resume=resume),
            on_pending,
            admin_socket,
            printer,
            reader,
            out,
        )
        write_answer(done, printer, once, out, sys.stdout)
        return EXIT_OK
    out.write(f"session {session}; Ctrl-C stops a reply, Ctrl-D ends\n")
    interrupted = False  # the last Ctrl-C came at the prompt: a second one leaves
    while True:
        out.write("> ")
        out.flush()
        try:
            line = reader.readline()
        except KeyboardInterrupt:
            if interrupted:
                out.write("\n")
                return EXIT_OK
            interrupted = True
            out.write("\n(Ctrl-C again, or Ctrl-D, ends the chat)\n")
            continue
        interrupted = False
        if not line:
            out.write("\n")
            return EXIT_OK
        text = line.rstrip("\n")
        if not text.strip():
            continue
        if text.strip() == COMPACT:
            compact(loop_socket, session, resume, on_pending, admin_socket, printer, reader, out)
            continue
        try:
            done = stream_turn(
                loop_socket,
                Turn(session=session, text=text, resume=resume),
                on_pending,
                admin_socket,
                printer,
                reader,
                out,
            )
        except CliError as exc:
            out.write(f"bxctl: {exc.message}\n")
            return EXIT_PROBLEM
        except KeyboardInterrupt:
            # the connection is closed: loopd stops the reply and keeps what it wrote
            out.write("(stopped; the session goes on)\n")
            resume = resume or session_exists(loop_socket, session)
            continue
        resume = True
        write_answer(done, printer, once, out, sys.stdout)


def session_exists(loop_socket: Path, session: str) -> bool:
    """Whether loopd has a log of `session` (a turn stopped at once may not have one)."""
    try:
        answers = list(stream(loop_socket, SessionShow(session=session), "show", server=LOOPD))
    except CliError:
        return False
    return not isinstance(answers[-1].message, Error)


def compact(
    loop_socket: Path,
    session: str,
    resume: bool,
    on_pending: OnPending,
    admin_socket: Path,
    printer: Printer,
    reader: IO[str],
    out: TextIO,
) -> None:
    """`/compact`: the session compacted now, its answer written as a turn's; a refusal
    (or nothing to compact yet) is one line, and the chat goes on."""
    if not resume:
        out.write(f"bxctl: session {session} has no turn yet: nothing to compact\n")
        return
    try:
        done = stream_turn(
            loop_socket, Compact(session=session), on_pending, admin_socket, printer, reader, out
        )
    except CliError as exc:
        out.write(f"bxctl: {exc.message}\n")
        return
    write_answer(done, printer, False, out, sys.stdout)


def write_answer(
    done: TurnDone, printer: Printer, once: bool, out: TextIO, answer_out: TextIO
) -> None:
    """The answer on `answer_out`; with `once`, only what the streamed run has not shown."""
    if printer.json_mode:
        line = orjson.dumps(done.model_dump(mode="json")).decode()
        answer_out.write(escape_arguments(line) + "\n")
        answer_out.flush()
        return
    shown = printer.shown
    rest = unshown_rest(shown, done.content) if once else None
    if rest is None:
        printer.end_content(out)
        rest = done.content
        end = "\n"
    else:
        printer.hand_over_content()
        end = "" if not rest and (shown or "").endswith("\n") else "\n"  # a line ends once
    out.flush()  # what the events wrote comes first
    answer_out.write(escape_model_text(rest) + end)
    answer_out.flush()
