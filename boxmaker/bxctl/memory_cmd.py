"""`bxctl memory log [--limit N]` and `bxctl memory reindex`: the owner asks memoryd.

I/O: one request on memoryd's owner socket (`owner-memory/admin.sock` under
`BOXMAKER_HOME`, or `--socket`). bxctl never imports memoryd: it only talks to
it. The journal's lines are printed as data (`boxmaker.core.display.escape`), oldest
first, newest last, so nothing in them can move the cursor or change colours.
After them, `memory log` names the identity entries the memory block leaves out
now, one line each with its file and rule (`over-budget`: no room; a refuse rule;
`untrusted`: marked so by hand), as memoryd reports them:

    memory block: leaves out 3 entries; see runbook.md#memory-entry-excluded
    memory block: m-3f2a9c01b4de in memory.md: over-budget
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from boxmaker.bxctl.cli import EXIT_OK, CliError, Parser, out
from boxmaker.bxctl.client import MEMORYD, default_memory_socket, stream
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.runbook import Runbook
from boxmaker.core.wire.common import Error
from boxmaker.core.wire.envelope import Message
from boxmaker.core.wire.memory import MAX_MEMORY_LOG, MemoryLog, MemoryLogReply, Reindex, Reindexed

DEFAULT_LIMIT = 20
_FILES = {"memory": "memory.md", "user": "user.md"}  # memoryd's files, as the owner knows them


def add_parser(commands: Any) -> None:
    memory: Parser = commands.add_parser("memory", help="memoryd's journal and recall index")
    actions = memory.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True

    log: Parser = actions.add_parser("log", help="print the last lines of memoryd's journal")
    log.add_argument(
        "--limit",
        type=_limit,
        default=DEFAULT_LIMIT,
        help=f"how many lines, 1 to {MAX_MEMORY_LOG} (default: {DEFAULT_LIMIT})",
    )
    _socket_option(log)
    log.set_defaults(handler=cmd_log)

    reindex: Parser = actions.add_parser(
        "reindex", help="rebuild memoryd's recall index from its files (after a hand edit)"
    )
    _socket_option(reindex)
    reindex.set_defaults(handler=cmd_reindex)


def _socket_option(parser: Parser) -> None:
    parser.add_argument(
        "--socket",
        type=Path,
        default=None,
        help="memoryd's owner socket (default: $BOXMAKER_HOME/run/owner-memory/admin.sock)",
    )


def _limit(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_MEMORY_LOG:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number from 1 to {MAX_MEMORY_LOG}")
    return int(text)


def _ask(path: Path, message: Message) -> Message:
    """memoryd's final answer to `message` on `path`; an `error` answer is a `CliError`."""
    answers = list(stream(path, message, f"bxctl-{os.getpid()}", server=MEMORYD))
    final = answers[-1].message
    if isinstance(final, Error):
        raise CliError(
            f"memoryd refused {message.kind}: {final.code}: {escape_arguments(final.message)}"
        )
    return final


def journal_lines(lines: Iterable[str]) -> list[str]:
    """The journal's lines as printed: each escaped, so it is shown as data."""
    return [escape_arguments(line) for line in lines]


def excluded_lines(answer: MemoryLogReply) -> list[str]:
    """What the memory block leaves out, as printed (none when it leaves out nothing)."""
    total = len(answer.excluded) + answer.excluded_more
    if not total:
        return []
    noun = "entry" if total == 1 else "entries"
    lines = [f"memory block: leaves out {total:,} {noun}; {Runbook.MEMORY_ENTRY_EXCLUDED.pointer}"]
    lines += [
        f"memory block: {e.id} in {_FILES[e.kind]}: {escape_arguments(e.rule)}"
        for e in answer.excluded
    ]
    if answer.excluded_more:
        lines.append(f"memory block: and {answer.excluded_more:,} more, not named here")
    return lines


def cmd_log(args: argparse.Namespace) -> int:
    answer = _ask(args.socket or default_memory_socket(), MemoryLog(limit=args.limit))
    if not isinstance(answer, MemoryLogReply):
        raise CliError(f"memoryd answered {answer.kind} to memory_log")
    for line in journal_lines(answer.lines):
        out(line)
    for line in excluded_lines(answer):
        out(line)
    return EXIT_OK


def cmd_reindex(args: argparse.Namespace) -> int:
    answer = _ask(args.socket or default_memory_socket(), Reindex())
    if not isinstance(answer, Reindexed):
        raise CliError(f"memoryd answered {answer.kind} to reindex")
    out(f"memory: reindexed, {answer.entries} entries")
    return EXIT_OK
