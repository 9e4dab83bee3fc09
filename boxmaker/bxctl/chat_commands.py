"""The chat's own commands, typed as a whole line: `/compact`, `/sessions`, `/status`,
`/help`; and where a session stands, as brokerd says.

I/O: loop.sock (`sessions`), admin.sock (`session_states`, `approvals`).

A line is a command only when, stripped, it is one of the names: anything else
(`/etc/hosts: what is in it?`) is a message to the model, never lost to a typo.
`/compact` is the chat's to run (it is a turn); the others are lines written here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from boxmaker.bxctl.approvals_cmd import pending_items
from boxmaker.bxctl.cli import CliError
from boxmaker.bxctl.sessions_cmd import NEW_SESSION_TAINT, broker_states, loop_sessions, merge
from boxmaker.bxctl.sessions_cmd import table as sessions_table
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.display.status_line import Standing, status_line

COMMANDS = {
    "/compact": "compact this session now",
    "/sessions": "every session: turns, tokens, taint",
    "/status": "where this session stands",
    "/help": "these commands and the keys",
}
PLAIN_KEYS = ("Ctrl-C stops a reply and keeps the session; Ctrl-C twice, or Ctrl-D, ends",)
CONSOLE_KEYS = (
    "Enter sends; Esc then Enter starts a new line; a paste is one message",
    "Up and Down walk the history (kept 0600 in the owner's state directory)",
    "Tab completes a / command",
    "Ctrl-T shows the last reply's reasoning, all of it",
    *PLAIN_KEYS,
)


def command_of(line: str) -> str | None:
    """The command `line` is, or None when it is a message."""
    word = line.strip()
    return word if word in COMMANDS else None


def help_lines(console: bool) -> list[str]:
    width = max(len(name) for name in COMMANDS)
    lines = [f"{name.ljust(width)}  {meaning}" for name, meaning in COMMANDS.items()]
    return lines + list(CONSOLE_KEYS if console else PLAIN_KEYS)


def sessions_lines(loop_socket: Path, admin_socket: Path) -> list[str]:
    """`bxctl sessions`' table; a line saying why when loopd cannot be asked."""
    try:
        summaries = loop_sessions(loop_socket)
    except CliError as exc:
        return [f"bxctl: {exc.message}"]
    lines: list[str] = []
    try:
        states = broker_states(admin_socket)
    except CliError as exc:
        states = None
        lines.append(f"bxctl: taint not shown, untrusted as loopd's logs have it: {exc.message}")
    rows = merge(summaries, states)
    if not rows:
        return [*lines, "no sessions"]
    return lines + [escape_arguments(line) for line in sessions_table(rows)]


def broker_standing(admin_socket: Path, standing: Standing) -> Standing:
    """`standing` with brokerd's taint, untrusted flag and waiting approvals for its
    session (a session brokerd has no state for yet: a new session's taint)."""
    try:
        states = broker_states(admin_socket)
        waiting = sum(1 for item in pending_items(admin_socket) if item.session == standing.session)
    except CliError:
        return replace(standing, broker_answered=False)
    state = next((s for s in states if s.session == standing.session), None)
    return replace(
        standing,
        taint=NEW_SESSION_TAINT if state is None else state.taint,
        untrusted=False if state is None else state.untrusted,
        waiting=waiting,
        broker_answered=True,
    )


def status_lines(standing: Standing) -> list[str]:
    """`/status`: the status line, and what to do about what it shows."""
    lines = [status_line(standing)]
    if not standing.broker_answered:
        lines.append("brokerd could not be asked: `bxctl status` says why")
    if standing.untrusted:
        lines.append("untrusted: `bxctl sessions` says which call made it so")
    if standing.waiting:
        lines.append("waiting approvals: `bxctl approvals` lists them")
    if standing.used is None:
        lines.append("no reply yet: the context is counted after the first")
    return lines
