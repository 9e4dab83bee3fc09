"""`bxctl chat` on a terminal: the console.

I/O: the terminal (standard input and standard error), standard output for answers
when it goes elsewhere, loop.sock and admin.sock (through `chat_turns.ChatLink` and
`chat_commands`), the history file.

The owner types with prompt_toolkit (`console_input`); each turn is drawn by a
`console_view.ConsoleView`. The status line's taint, untrusted flag and waiting
approvals are brokerd's, asked when the chat starts, after each tool result and
each waiting approval, and after each turn; the context and the rate are loopd's
(`usage` events). Approvals are asked as in the plain chat: brokerd's block, then
one line read in the terminal's own line mode, and only the full id approves.

History that cannot be made private (its directory not the owner's to narrow) is
off for the chat, with one line saying why: what the owner types is never written
where others could read it.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import replace

from rich.console import Console

from boxmaker.bxctl.chat_cmd import command_lines
from boxmaker.bxctl.chat_commands import broker_standing, command_of
from boxmaker.bxctl.chat_turns import ChatLink
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError
from boxmaker.bxctl.console_input import ConsoleInput, history_path, private_file
from boxmaker.bxctl.console_screen import DIM, Screen, styled
from boxmaker.bxctl.console_view import ConsoleView, wrap_plain
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.display.status_line import Standing, status_line

WELCOME = "session {session}; /help lists commands and keys; Ctrl-C stops a reply, Ctrl-D ends"
NO_REASONING = "(the last reply had no reasoning)"


def color_system() -> str | None:
    """Rich's name for what standard error's terminal shows; None with NO_COLOR."""
    if os.environ.get("NO_COLOR"):
        return None
    return Console(file=sys.stderr).color_system


def console_chat(link: ChatLink, once: bool) -> int:
    out = link.out
    screen = Screen(out)
    view = ConsoleView(screen, Standing(session=link.session), color_system())

    def refresh() -> None:
        view.standing = broker_standing(link.admin_socket, view.standing)

    view.on_standing_change = refresh
    refresh()

    def show_reasoning() -> None:
        width, _ = screen.size()
        text = view.last_reasoning
        lines = wrap_plain(text, width) if text.strip() else [NO_REASONING]
        out.write("".join(styled(line, DIM) + "\n" for line in lines))
        out.flush()

    history = history_path()
    try:
        kept = private_file(history)
    except OSError as exc:
        kept = None
        out.write(f"bxctl: history is off for this chat: {history}: {exc.strerror}\n")
    console = ConsoleInput(kept, lambda: status_line(view.standing), show_reasoning)
    out.write(WELCOME.format(session=escape_arguments(link.session)) + "\n")

    def run_line(text: str) -> int | None:
        """The owner's line: a command or a turn; an exit status when the chat must end."""
        command = command_of(text)
        if command is not None and command != "/compact":
            screen.frame(command_lines(link, command, True, view.standing), [])
            return None
        view.begin()
        try:
            done = link.compact(view) if command == "/compact" else link.turn(text, view)
        except CliError as exc:
            out.write(f"bxctl: {exc.message}\n")
            return EXIT_PROBLEM
        except KeyboardInterrupt:
            # the connection is closed: loopd stops the reply and keeps what it wrote
            out.write("(stopped; the session goes on)\n")
            refresh()
            return None
        if done is None:  # a compaction refused, or nothing to compact: said in one line
            view.end_blocks(out)
        else:
            view.answer(done, once or command == "/compact", out, sys.stdout)
        view.standing = replace(view.standing, working_s=None)
        refresh()
        return None

    interrupted = False  # the last Ctrl-C came at the prompt: a second one leaves
    notice = ""  # written inside the guard: a Ctrl-C as it shows counts as the second
    while True:
        try:
            out.write(notice)
            notice = ""
            text = console.read()
            interrupted = False
            status = run_line(text) if text.strip() else None
        except KeyboardInterrupt:
            # at the prompt, or between two (the terminal in its line mode for a moment)
            if interrupted:
                # leaving: a Ctrl-C more, while Python shuts down (its handler gone), must
                # not end the process by the signal
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                return EXIT_OK
            interrupted = True
            notice = "(Ctrl-C again, or Ctrl-D, ends the chat)\n"
            continue
        except EOFError:
            return EXIT_OK
        if status is not None:
            return status
