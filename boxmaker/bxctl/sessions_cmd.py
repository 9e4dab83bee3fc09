"""`bxctl sessions`, `bxctl sessions show ID`, `bxctl sessions compact ID`: the owner's
view of the sessions, and compacting one.

I/O: loop.sock (`sessions`, `session_show`, `compact`) and admin.sock
(`session_states`). `bxctl sessions` joins loopd's summaries (turns, tokens,
compactions, last activity, from its session logs) with brokerd's state (taint and
untrusted, which is what decides): one row per session either knows, newest last
activity first (sessions loopd has no log for last, by id):

    session  turns  tokens  compacted  taint    untrusted  last activity
    chat-2       4   1,812          1  private  yes        2026-11-30T12:05:00.000Z
    chat-1       1     604          0  private  no         2026-11-30T11:00:00.000Z  no broker state

The last column says what is missing: `no broker state` (brokerd has no file for
the session: it decides as for a new one, private and trusted, and untrusted is
shown as loopd's log has it), `no session log` (loopd has none). When brokerd
cannot be asked, loopd's view is printed (taint `?`, untrusted as loopd has it),
with one line on stderr naming why and the runbook pointer, and the exit status is
1. `--json` prints one object instead:

    {"sessions": [{"session", "turns", "tokens", "compactions", "last", "taint",
     "untrusted", "untrusted_by", "broker_state", "log"}, ...], "brokerd": bool}

with null for what is not known (`broker_state` false: brokerd has no state for
it; null: brokerd was not reached).

`show ID` prints the log as the owner reads it, page after page as loopd sends
them (`session_entries`, `next`): each entry a head line `[index] type`, with the
tool's name and `untrusted` where they apply, then its text, then a blank line.
Every text is printed as data (`core.display.escape.escape_model_text`, as `bxctl chat`
prints the model's words): controls, bidi and invisible characters appear as
`\\uXXXX`. An entry loopd cut to fit an answer ends with a line saying so. `--json`
prints each entry as one JSON line, escaped the same way.

What an entry's text says cannot pass for a head: every line of every text (the
model's, a tool result's, the owner's, a summary's) is printed after TEXT_INDENT,
two spaces, an empty line of the text included. So a line that starts in the
first column is always bxctl's own: a head `[index] type`, loopd's `[cut ...]`
line, or the empty line that ends an entry. Model text holding `\\n\\n[99] user\\n`
prints as `  ` then `  [99] user`, inside the entry it belongs to. Nothing else
changes: the text's characters all show, in order, after the indent (newline is
the only line break left unescaped; vertical tab, form feed, NEL and U+2028
are escaped with the other hidden characters).

`compact ID` compacts the session now: its events are printed as `bxctl chat
--say` prints a turn's (the `context compacted` line among them; an approval is
shown, not asked), then loopd's one-line answer on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from boxmaker.bxctl.chat_printer import Printer
from boxmaker.bxctl.chat_turns import OnPending, stream_turn
from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, CliError, Parser, err, out
from boxmaker.bxctl.client import (
    LOOPD,
    default_admin_socket,
    default_loop_socket,
    request,
    stream,
)
from boxmaker.core.display.escape import escape_arguments, escape_model_text
from boxmaker.core.ids import is_identifier
from boxmaker.core.labels import DataClass
from boxmaker.core.wire.broker_admin import (
    SessionStateItem,
    SessionStateList,
    SessionStates,
    UntrustedBy,
)
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.loop import (
    Compact,
    SessionEntries,
    SessionList,
    Sessions,
    SessionShow,
    SessionSummary,
    ShownEntry,
)

NO_BROKER_STATE = "no broker state"
TEXT_INDENT = "  "  # before each line of an entry's text: only bxctl's lines start in column 1
NO_SESSION_LOG = "no session log"
# what brokerd decides with for a session it has no file for (brokerd.session_state)
NEW_SESSION_TAINT = DataClass.PRIVATE


def add_parser(commands: Any) -> None:
    sessions: Parser = commands.add_parser(
        "sessions",
        help="list the sessions (turns, tokens, taint), show or compact one",
        description="With no ACTION: list the sessions, newest last activity first.",
    )
    sessions.add_argument("--json", action="store_true", help="print one JSON object")
    _sockets(sessions, None)
    sessions.set_defaults(handler=cmd_sessions)
    actions = sessions.add_subparsers(
        dest="action", metavar="ACTION", parser_class=Parser, help="(optional)"
    )

    show: Parser = actions.add_parser("show", help="print a session's log, escaped as data")
    show.add_argument("session", type=_session_id, help="the session id")
    show.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="one JSON line per entry"
    )
    _sockets(show, argparse.SUPPRESS, admin=False)
    show.set_defaults(handler=cmd_show)

    compact: Parser = actions.add_parser(
        "compact", help="replace the session's older turns with a summary now"
    )
    compact.add_argument("session", type=_session_id, help="the session id")
    _sockets(compact, argparse.SUPPRESS)
    compact.set_defaults(handler=cmd_compact)


def _sockets(parser: Parser, default: Any, *, admin: bool = True) -> None:
    """--socket and --admin-socket; a subcommand's default leaves the parent's value alone."""
    parser.add_argument(
        "--socket",
        type=Path,
        default=default,
        help="loopd's socket (default: $BOXMAKER_HOME/run/loop/loop.sock)",
    )
    if not admin:
        return
    parser.add_argument(
        "--admin-socket",
        type=Path,
        default=default,
        help="brokerd's admin socket (default: $BOXMAKER_HOME/run/owner-broker/admin.sock)",
    )


def _session_id(text: str) -> str:
    if not is_identifier(text):
        raise argparse.ArgumentTypeError(
            f"{escape_arguments(repr(text))} is not a session id (1 to 128 characters of"
            " A-Z a-z 0-9 . _ : -, not starting with .)"
        )
    return text


def _request_id() -> str:
    return f"bxctl-{os.getpid()}"


def _loopd(path: Path, message: Message) -> list[Message]:
    """loopd's answers to `message`; an `error` answer is a `CliError`."""
    answers = [a.message for a in stream(path, message, _request_id(), server=LOOPD)]
    final = answers[-1]
    if isinstance(final, Error):
        raise CliError(
            f"loopd refused {message.kind}: {final.code}: {escape_arguments(final.message)}"
        )
    return answers


def loop_sessions(path: Path) -> list[SessionSummary]:
    """loopd's summaries: the items of every page, in order."""
    items: list[SessionSummary] = []
    for answer in _loopd(path, Sessions()):
        if not isinstance(answer, SessionList):
            raise CliError(f"loopd answered {answer.kind} to sessions")
        items.extend(answer.items)
    return items


def broker_states(path: Path) -> list[SessionStateItem]:
    """brokerd's session states: the items of every page, in order."""
    items: list[SessionStateItem] = []
    for envelope in request(path, SessionStates(), _request_id()):
        answer = envelope.message
        if not isinstance(answer, SessionStateList):
            raise CliError(f"brokerd answered {answer.kind} to session_states")
        items.extend(answer.items)
    return items


@dataclass(frozen=True)
class Row:
    """One session as `bxctl sessions` shows it."""

    session: str
    summary: SessionSummary | None  # loopd's; None: loopd has no log
    taint: DataClass | None  # None: brokerd was not reached
    untrusted: bool
    untrusted_by: UntrustedBy | None
    broker_state: bool | None  # None: brokerd was not reached

    @property
    def note(self) -> str:
        if self.summary is None:
            return NO_SESSION_LOG
        return NO_BROKER_STATE if self.broker_state is False else ""


def merge(summaries: list[SessionSummary], states: list[SessionStateItem] | None) -> list[Row]:
    """One row per session, newest last activity first, then those with no log by id."""
    known = {} if states is None else {s.session: s for s in states}
    rows: list[Row] = []
    for summary in summaries:
        state = known.pop(summary.session, None)
        if states is None:
            rows.append(Row(summary.session, summary, None, summary.untrusted, None, None))
        elif state is None:
            taint = NEW_SESSION_TAINT
            rows.append(Row(summary.session, summary, taint, summary.untrusted, None, False))
        else:
            by = state.untrusted_by
            rows.append(Row(summary.session, summary, state.taint, state.untrusted, by, True))
    rows.sort(key=lambda r: r.session)
    rows.sort(key=lambda r: r.summary.last if r.summary else "", reverse=True)
    for state in sorted(known.values(), key=lambda s: s.session):
        rows.append(
            Row(state.session, None, state.taint, state.untrusted, state.untrusted_by, True)
        )
    return rows


def table(rows: list[Row]) -> list[str]:
    """The rows as aligned text columns (numbers right, words left), a head line first."""
    head = ("session", "turns", "tokens", "compacted", "taint", "untrusted", "last activity")
    cells = [head]
    for row in rows:
        s = row.summary
        cells.append(
            (
                row.session,
                "-" if s is None else f"{s.turns:,}",
                "-" if s is None else f"{s.tokens:,}",
                "-" if s is None else f"{s.compactions:,}",
                "?" if row.taint is None else row.taint.value,
                "yes" if row.untrusted else "no",
                "-" if s is None else s.last,
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(head))]
    right = {1, 2, 3}
    lines = []
    notes = ["", *(row.note for row in rows)]
    for line, note in zip(cells, notes, strict=True):
        parts = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        lines.append(("  ".join(parts) + ("  " + note if note else "")).rstrip())
    return lines


def json_object(rows: list[Row], reached: bool) -> dict[str, Any]:
    """The `--json` object (module docstring)."""
    items = []
    for row in rows:
        s = row.summary
        by = row.untrusted_by
        items.append(
            {
                "session": row.session,
                "turns": None if s is None else s.turns,
                "tokens": None if s is None else s.tokens,
                "compactions": None if s is None else s.compactions,
                "last": None if s is None else s.last,
                "taint": None if row.taint is None else row.taint.value,
                "untrusted": row.untrusted,
                "untrusted_by": None if by is None else by.model_dump(mode="json"),
                "broker_state": row.broker_state,
                "log": s is not None,
            }
        )
    return {"sessions": items, "brokerd": reached}


def cmd_sessions(args: argparse.Namespace) -> int:
    summaries = loop_sessions(args.socket or default_loop_socket())
    states: list[SessionStateItem] | None
    try:
        states = broker_states(args.admin_socket or default_admin_socket())
    except CliError as exc:
        states = None
        err(f"bxctl: taint not shown, untrusted as loopd's logs have it: {exc.message}")
    rows = merge(summaries, states)
    if args.json:
        out(escape_arguments(orjson.dumps(json_object(rows, states is not None)).decode()))
    elif not rows:
        out("no sessions")
    else:
        for line in table(rows):
            out(escape_arguments(line))
    return EXIT_OK if states is not None else EXIT_PROBLEM


def entry_lines(session: str, entry: ShownEntry) -> list[str]:
    """One entry as `show` prints it: its head line, its text as data and indented (the
    module docstring), a blank line."""
    head = f"[{entry.index}] {entry.type}"
    if entry.name is not None:
        head += f" {escape_arguments(entry.name)}"
    if entry.untrusted:
        head += ", untrusted"
    text = escape_model_text(entry.text)
    lines = [head, *(TEXT_INDENT + line for line in text.split("\n"))]
    if entry.cut:
        lines.append(
            f"[cut to fit one answer: the whole entry is line {entry.index + 1}"
            f" of loopd's loop/sessions/{session}.jsonl]"
        )
    return [*lines, ""]


def cmd_show(args: argparse.Namespace) -> int:
    path = args.socket or default_loop_socket()
    start = 0
    shown = 0
    while True:
        answers = _loopd(path, SessionShow(session=args.session, start=start))
        answer = answers[-1]
        if len(answers) != 1 or not isinstance(answer, SessionEntries):
            raise CliError(f"loopd answered {answer.kind} to session_show")
        for entry in answer.entries:
            shown += 1
            if args.json:
                line = orjson.dumps(entry.model_dump(mode="json", exclude_none=True)).decode()
                out(escape_arguments(line))
            else:
                for line in entry_lines(args.session, entry):
                    out(line)
        if answer.next is None:
            break
        if answer.next <= start:
            raise CliError(f"loopd answered a page of {args.session} that does not move on")
        start = answer.next
    if not shown and not args.json:
        out(f"session {args.session}: no entries")
    return EXIT_OK


def cmd_compact(args: argparse.Namespace) -> int:
    done = stream_turn(
        args.socket or default_loop_socket(),
        Compact(session=args.session),
        OnPending.SHOW,
        args.admin_socket or default_admin_socket(),
        Printer(False),
        sys.stdin,
        sys.stderr,
    )
    sys.stderr.flush()
    out(escape_model_text(done.content))
    return EXIT_OK
