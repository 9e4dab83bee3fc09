"""`bxctl chat`: talk to the agent, see what it does, and answer its approvals.

I/O: loop.sock (one connection per turn), admin.sock (approvals, the session's
standing), standard input, standard error (events and questions) and standard
output (the answers).

Three ways to chat:
    - `--say TEXT` (and `--json`): one turn, or lines on standard input, printed as
      plain lines (`chat_printer`), for scripts and pipes;
    - the plain chat: standard input read line by line, the same plain lines; when
      standard input or standard error is not a terminal, when TERM is `dumb`, or
      with `--plain`;
    - the console (`console_chat`) on a terminal: line editing, history, markdown,
      folded reasoning and a status line.
The exchanges with loopd and brokerd, and the approval rules, are one for all
(`chat_turns`); so is the rule that the reply shows once (`chat_printer`).

Ctrl-C while a turn runs closes its connection: loopd stops the reply at its next
token and keeps what it wrote (marked interrupted, with a notice to the model), and
the prompt comes back in the same session. Ctrl-C at the prompt says how to leave; a
second one, or Ctrl-D, ends the chat.

The chat's commands (`chat_commands`) are typed as a whole line. `/compact`
compacts the session now instead of sending a turn (`compact` on loop.sock:
answered as a turn, its answer one line saying what was done; a memory tool the
model calls in its chance to save waits for approval as in any turn). A session
with no turn yet has nothing to compact, and a compaction loopd refuses is one
line: the chat goes on either way. When loopd compacts (asked, or by itself before
a turn whose prompt would pass its threshold), the `context_compacted` event is one
line, `context compacted: 1,812 -> 604 tokens` (in `--json` mode, the event itself).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from boxmaker.bxctl.chat_commands import (
    broker_standing,
    command_of,
    help_lines,
    sessions_lines,
    status_lines,
)
from boxmaker.bxctl.chat_printer import Printer, same_output
from boxmaker.bxctl.chat_turns import ChatLink, OnPending
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser
from boxmaker.bxctl.client import default_admin_socket, default_loop_socket
from boxmaker.core.display.status_line import Standing


def add_parser(commands: Any) -> None:
    chat: Parser = commands.add_parser("chat", help="talk to the agent (interactive by default)")
    chat.add_argument("--say", metavar="TEXT", help="send one message, print the answer, exit")
    chat.add_argument("--json", action="store_true", help="print every event as one JSON line")
    chat.add_argument("--session", help="the session id (default: a new one)")
    chat.add_argument("--resume", action="store_true", help="go on with an existing session")
    chat.add_argument(
        "--plain", action="store_true", help="plain lines on a terminal too (no console)"
    )
    chat.add_argument("--socket", type=Path, help="loopd's socket (default: under $BOXMAKER_HOME)")
    chat.add_argument(
        "--admin-socket", type=Path, help="brokerd's admin socket (default: under $BOXMAKER_HOME)"
    )
    chat.set_defaults(handler=cmd_chat)


def wants_console(args: argparse.Namespace) -> bool:
    """The console: an interactive chat on a terminal that can draw one."""
    if args.json or args.say is not None or args.plain:
        return False
    if os.environ.get("TERM", "dumb") == "dumb":
        return False
    return sys.stdin.isatty() and sys.stderr.isatty()


def cmd_chat(args: argparse.Namespace) -> int:
    if args.json:
        on_pending = OnPending.EVENT_ONLY
    elif args.say is not None:
        on_pending = OnPending.SHOW
    else:
        on_pending = OnPending.ASK
    link = ChatLink(
        loop_socket=args.socket or default_loop_socket(),
        admin_socket=args.admin_socket or default_admin_socket(),
        session=args.session or f"chat-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}",
        resume=bool(args.resume),
        on_pending=on_pending,
        reader=sys.stdin,  # one buffered reader for the chat lines and the answers
        out=sys.stderr,
    )
    once = not args.json and same_output(sys.stdout, sys.stderr)  # the reply shows once
    if args.say is not None:
        printer = Printer(args.json)
        done = link.turn(args.say, printer)
        printer.answer(done, once, link.out, sys.stdout)
        return EXIT_OK
    if wants_console(args):
        from boxmaker.bxctl.console_chat import console_chat  # prompt_toolkit only here

        return console_chat(link, once)
    return plain_chat(link, Printer(args.json), once)


def plain_chat(link: ChatLink, printer: Printer, once: bool) -> int:
    """Line by line from standard input, plain lines out."""
    out = link.out
    out.write(f"session {link.session}; Ctrl-C stops a reply, Ctrl-D ends\n")
    interrupted = False  # the last Ctrl-C came at the prompt: a second one leaves
    notice = ""  # said with the next prompt, inside the same guard
    while True:
        try:
            # the prompt's writes are guarded too: a second Ctrl-C typed the moment the
            # hint shows must leave the chat, not end bxctl by the signal
            out.write(f"{notice}> ")
            out.flush()
            notice = ""
            line = link.reader.readline()
        except KeyboardInterrupt:
            if interrupted:
                # leaving: one Ctrl-C more, while Python shuts down, must not end the
                # process by the signal
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                out.write("\n")
                return EXIT_OK
            interrupted = True
            notice = "\n(Ctrl-C again, or Ctrl-D, ends the chat)\n"
            continue
        interrupted = False
        if not line:
            out.write("\n")
            return EXIT_OK
        text = line.rstrip("\n")
        if not text.strip():
            continue
        command = command_of(text)
        if command == "/compact":
            done = link.compact(printer)
            if done is not None:
                printer.answer(done, False, out, sys.stdout)
            continue
        if command is not None:
            out.write("".join(line + "\n" for line in command_lines(link, command, False)))
            continue
        try:
            done = link.turn(text, printer)
            # a Ctrl-C as the reply ends stops its printing, not the chat
            printer.answer(done, once, out, sys.stdout)
        except CliError as exc:
            out.write(f"bxctl: {exc.message}\n")
            return EXIT_PROBLEM
        except KeyboardInterrupt:
            # the connection is closed: loopd stops the reply and keeps what it wrote
            notice = "(stopped; the session goes on)\n"


def command_lines(
    link: ChatLink, command: str, console: bool, standing: Standing | None = None
) -> list[str]:
    """What `/sessions`, `/status` or `/help` writes."""
    if command == "/sessions":
        return sessions_lines(link.loop_socket, link.admin_socket)
    if command == "/status":
        known = standing or Standing(session=link.session)
        return status_lines(broker_standing(link.admin_socket, known))
    return help_lines(console)
