"""`bxctl sanitize check [TEXT]`: which sanitizer rules a text sets off, and what each would do.

I/O: reads TEXT, or standard input when there is no TEXT, and prints; it writes
nothing else and asks no daemon (003 section 6.6: it calls `boxmaker.core.sanitize`
directly).

The rules of this command:

1. The text is checked as memoryd checks a write, by default: all three actions,
   `check(text, MEMORY_TAGS, memory=True)`, where `MEMORY_TAGS` are the
   chat-template tags of every format loopd knows. So a tag is refused (memory's
   rule, stricter than neutralising) and also counted as loopd would neutralise it.
   `--no-memory` checks it as text that is not a memory write: tags are then only
   neutralised. The default is memory because the runbook entries for a refused,
   flagged or excluded memory entry send the owner here to confirm.
2. Text must be UTF-8: standard input, or the bytes of the TEXT argument (Python
   hands an undecodable byte of an argument over as a lone surrogate; it is
   turned back into its byte). One exception: a UTF-16 surrogate spelled in
   UTF-8's way (bytes ED A0 80 to ED BF BF, which strict UTF-8 rejects) is let
   through as that surrogate, so the sanitizer's own rule names it, as memoryd
   would for a `\\udxxx` escape in JSON. Any other invalid byte is one line on
   stderr naming its offset, and exit 2 (`EXIT_USAGE`): nothing was checked.
3. Each refuse and flag finding is one line, in text order, in three aligned
   columns (action, rule, excerpt and position); the neutralise findings are one
   summary line after them, their count:

       refuse      secret-github  ghp_… at 12
       flag        exfil-url      "send … to https://…" at 40
       neutralise  1 tag

   The rule column is as wide as the longest rule printed, plus two spaces.
   Positions are code-point offsets into the text, counting from 0.
4. An excerpt is shown as data. A flag's excerpt quotes the text, so it is
   printed between double quotes (a `"` inside as `\\"`); a refusal's names what
   was found (`U+202E RIGHT-TO-LEFT OVERRIDE`, `ghp_…`, a tag) and is printed
   bare. In both, a backslash is doubled and every hidden character (controls,
   newline and tab included, format and bidi characters, private use;
   `boxmaker.core.display.escape`) is spelled `\\uhhhh`, so an excerpt cannot move the
   cursor, hide text or reorder the line, and reads one way.
5. Nothing fires: `sanitize: ok`, exit 0 (`EXIT_OK`). Something fires: its lines
   on stdout, `see runbook.md#sanitizer-rules` on stderr, exit 1 (`EXIT_PROBLEM`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from boxmaker.bxctl.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError, Parser, err, out
from boxmaker.core import sanitize
from boxmaker.core.display.escape import escape_arguments
from boxmaker.core.runbook import Runbook
from boxmaker.core.sanitize import Action, Finding

# text -> its findings, in text order (the real one, or a fake in tests)
Checker = Callable[[str], Sequence[Finding]]

_ACTION_WIDTH = max(len(action.value) for action in Action) + 2


def add_parser(commands: Any) -> None:
    group: Parser = commands.add_parser("sanitize", help="check text against the sanitizer")
    sub = group.add_subparsers(dest="sanitize_command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    check = sub.add_parser(
        "check",
        help="print each sanitizer rule a text sets off (exit 1 if any does)",
        description=(
            "Run the three actions of the sanitizer (refuse, neutralise, flag) over TEXT,"
            " or standard input when TEXT is not given, and print each rule that fires"
            " with what it would do, its excerpt and its position (a code-point offset)."
            " By default the text is checked as memoryd checks a write, with the"
            " chat-template tags of every format loopd knows: a tag is refused and"
            " counted as neutralised. Writes nothing; needs no daemon. Exit 0 when"
            " nothing fires, 1 when something does, 2 when the text is not UTF-8."
        ),
    )
    check.add_argument("text", nargs="?", metavar="TEXT", help="the text (default: stdin)")
    check.add_argument(
        "--memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=(
            "check as a memory write, where chat-template tags are refused (the default);"
            " --no-memory: as other text, where they are only neutralised"
        ),
    )
    check.set_defaults(handler=cmd_check)


def checker(*, memory: bool) -> Checker:
    """The sanitizer's check with the tags of every format loopd knows."""
    tags = sanitize.MEMORY_TAGS
    return lambda text: sanitize.check(text, tags, memory=memory)


def read_text(text: str | None, stdin: BinaryIO | None) -> str:
    """TEXT, or all of `stdin`, decoded as UTF-8 (rule 2); CliError (exit 2) when it is not."""
    if text is not None:
        try:  # the bytes of the argument: Python keeps undecodable ones as U+DC80..U+DCFF
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate given in-process, not from argv
            return text
        return _decode(data, "TEXT")
    if stdin is None:  # started with standard input closed
        raise CliError("no TEXT and no standard input: give the text to check", EXIT_USAGE)
    try:
        data = stdin.read()
    except OSError as exc:
        raise CliError(f"cannot read standard input: {exc.strerror or exc}") from exc
    return _decode(data, "standard input")


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{what} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}):"
            " convert it first, for example with iconv",
            EXIT_USAGE,
        ) from exc


def show(excerpt: str, *, quoted: bool = False) -> str:
    """An excerpt as data: one line, backslashes doubled, hidden characters spelled;
    `quoted`, between double quotes, with any inside it escaped."""
    text = escape_arguments(excerpt.replace("\\", "\\\\"))
    return '"' + text.replace('"', '\\"') + '"' if quoted else text


def render(findings: Sequence[Finding]) -> list[str]:
    """The lines printed for `findings` (empty when none): rules 3 and 4 above."""
    lines: list[str] = []
    rule_width = max((len(f.rule) for f in findings if f.action != Action.NEUTRALISE), default=0)
    tags = 0
    for finding in sorted(findings, key=lambda f: f.start):
        if finding.action == Action.NEUTRALISE:
            tags += 1
            continue
        excerpt = show(finding.excerpt, quoted=finding.action == Action.FLAG)
        where = f"{excerpt} at {finding.start}" if excerpt else f"at {finding.start}"
        lines.append(
            f"{finding.action.value:<{_ACTION_WIDTH}}{finding.rule:<{rule_width + 2}}{where}"
        )
    if tags:
        noun = "tag" if tags == 1 else "tags"
        lines.append(f"{Action.NEUTRALISE.value:<{_ACTION_WIDTH}}{tags} {noun}")
    return lines


def examine(text: str, check: Checker) -> tuple[list[str], int]:
    """What the command prints on stdout for `text`, and its exit status."""
    findings = check(text)
    if not findings:
        return ["sanitize: ok"], EXIT_OK
    return render(findings), EXIT_PROBLEM


def cmd_check(args: argparse.Namespace, check: Checker | None = None) -> int:
    text = read_text(args.text, None if sys.stdin is None else sys.stdin.buffer)
    lines, status = examine(text, check or checker(memory=args.memory))
    for line in lines:
        out(line)
    if status != EXIT_OK:
        err(Runbook.SANITIZER_RULES.pointer)
    return status
