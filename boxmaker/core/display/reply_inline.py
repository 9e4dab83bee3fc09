"""A line of a reply outside code blocks, as Markdown Mattermost's renderers all read alike.

No I/O. The rules behind `core.display.reply_escape` (its docstring says why). A line is read left
to right; at each position the first of these that applies is written:

1. A code span kept: a run of backticks, the shortest text, then a run of as many
   backticks on the same line, whose text is "inert": no backtick, none of
   `INERT_NEVER`, an `_` only between letters or digits, and when untrusted none of
   `:`, `@`, `/` and no `www.`. Written with one backtick on each side. Inert text
   makes nothing even in a renderer that does not see the span (an emphasis that
   starts before it, a table cell boundary): so the renderers can disagree about
   the span and still show no image, no link and every character.
2. When clean, a link kept clickable: `[text](url)` with a plain `URL` and text of
   no brackets, backticks or backslashes on the line, written `[` + text with every
   ASCII punctuation escaped + `](url)`; an autolink `<url>` written as it is; a
   bare URL (where Mattermost's renderers start one: `scheme:`, `www.`,
   `host.tld/`) up to a space or `<`, less an `&` that would start a character
   reference, with `!`, `[`, `]` and `~` in it escaped (so a renderer that does not
   link it still shows it and makes nothing of it). But a URL is not kept when the
   run of characters from where it starts to the next white space holds one that is
   written as a character reference (a backtick, a backslash, `<`, the `&` of a
   reference, a destination run's start `](` or a definition's `]:`), wherever it
   starts, even inside a word: the mobile app's autolinker runs on over them and
   shows its link's text as written (`&grave;` for a backtick), so that run is
   written as an untrusted reply's and links nowhere ("a plain run").
   An image's URL is neither a link nor a preview: what a renderer could take for a
   destination is written as an untrusted reply's (every character of
   `UNTRUSTED_ESCAPED` literal, nothing kept), a "destination run":
   - from a `(` right after a `]` that is not such a link, to where its parentheses
     balance (a backslash-escaped one and what stands between `<` and `>` not
     counted), which is as far as CommonMark reads a destination and at least as
     far as marked's fork (to the first `)`); when they are still open at the end
     of the line, the next line goes on in the run (`parentheses`), as a
     destination may follow a line ending;
   - from `region_from` to the end of the line: `core.display.reply_lines` passes it for a
     reference definition's destination.
   Every other kept construct ends before `region_from`.
3. Any other character: written literally (`literal`) when it is in the mode's
   set, as it is otherwise. Literally means a backslash escape where marked's fork
   honours one (`BACKSLASHED`, which CommonMark and commonmark.js honour too), else
   a character reference (`REFERENCES`), which all of them decode after parsing;
   a backtick always as `&grave;`, so no renderer that ends an autolink between a
   backslash and its backtick leaves a backtick to open code. The references a
   clean reply writes in text that a URL may run into (`&grave;`, `&bsol;`, `&lt;`,
   `&amp;`) end in a name: the web app's autolinker trims such a reference whole
   from a link's end, where a numeric one would lose only its `;` and be shown as
   written (`&#96`). Untrusted: every
   ASCII punctuation character that can open or spell anything (`UNTRUSTED_ESCAPED`),
   so nothing links or autolinks in any flavour: Mattermost's URL rules (the web
   app's, the mobile app's, the server's) all match a literal `:`, `.`, `/` or `@`
   in the source. Clean: `CLEAN_ESCAPED`, the characters that open code, images,
   links, HTML and strikethrough, an `&` that would start a character reference,
   and `.` or `)` after the digits that start a line, so no ordered list
   renumbers them. Emphasis, lists, quotes and tables stay, and headings as
   `core.display.reply_lines` rule 3 says.

Before all of these, at a position of `overrides` its text is written (the rules of a
line's start that depend on the lines around it: `core.display.reply_lines`); then a
destination run left open by the line before goes on (rule 2); from `region_from` on,
the line is a destination run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

INERT_NEVER = frozenset("\\`![]<>&$~*|")
# the ASCII punctuation marked's fork escapes with a backslash, as CommonMark does
BACKSLASHED = frozenset("`*{}[]()#+-.!_>|~")
# the rest of what must be literal, as character references, which all of them decode
REFERENCES = {
    "`": "&grave;",
    "\\": "&bsol;",
    "<": "&lt;",
    "&": "&amp;",
    ":": "&#58;",
    "/": "&#47;",
    "@": "&#64;",
    "$": "&#36;",
}
UNTRUSTED_ESCAPED = BACKSLASHED | frozenset(REFERENCES)
CLEAN_ESCAPED = frozenset("\\`![]<~")

_BACKTICKS = re.compile(r"`+")
_ORDERED = re.compile(r"[ \t]*[0-9]{1,9}(?=[.)])")
_UNTRUSTED_INERT = re.compile(r"[:@/]|www\d{0,3}\.", re.IGNORECASE)
_LOOSE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_URL = r"(?:https?|ftp)://[^\s<>\[\]!`\\()]+|mailto:[^\s<>\[\]!`\\()]+"
_LINK = re.compile(rf"\[([^\[\]`\\\r\n]{{1,300}})\]\(({_URL})\)", re.IGNORECASE)
_AUTOLINK = re.compile(rf"<({_URL})>", re.IGNORECASE)
# where Mattermost's renderers start an autolink (the web app's URL_PREFIX), to a space or `<`
_BARE = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9+.\-]*:(?:/{1,3}|[^\W_]|%)|www\d{0,3}\.|[\w.\-]+\.[^\W\d_]{2,4}/)[^\s<]*"
)
_WORD = re.compile(r"[\w.\-+]")
_IN_URL = frozenset("![]~")
_WHITE = re.compile(r"\s")
_REFERENCED = re.compile(r"[`\\<]|\][(:]")
_ENTITY = re.compile(r"&(?:#[0-9]{1,8}|#[xX][0-9A-Fa-f]{1,8}|[A-Za-z][A-Za-z0-9]{0,31});")


_NO_OVERRIDES: Mapping[int, str] = {}


def escape_line(
    line: str,
    untrusted: bool,
    *,
    overrides: Mapping[int, str] = _NO_OVERRIDES,
    parentheses: int = 0,
    region_from: int | None = None,
) -> tuple[str, int]:
    """`line` (no line ending, not inside a code block) as the rules above write it, and
    how many parentheses of a destination run are open at its end (0: none).

    `parentheses`: the line starts inside a destination run with that many open.
    """
    ordered = None if untrusted else _ORDERED.match(line)
    end = len(line) if region_from is None else region_from
    out: list[str] = []
    position = 0
    plain_until = 0  # a plain run (rule 2) goes on to here
    checked_until = 0  # no URL starting before here holds a reference: none after it does
    while position < len(line):
        char = line[position]
        if position in overrides:
            out.append(overrides[position])
            position += 1
            continue
        if parentheses:
            stop = min((at for at in overrides if at > position), default=len(line))
            written, position, parentheses = _destination(line, position, parentheses, stop)
            out.append(written)
            continue
        if position >= end:
            out.append(_as_untrusted(line[position:]))
            break
        if char == "(" and not untrusted and position and line[position - 1] == "]":
            written, position, parentheses = _destination(line, position, 0, len(line))
            out.append(written)
            continue
        if not untrusted and position >= max(plain_until, checked_until):
            referenced, word_end = _plain_run(line, position, end)
            if referenced:
                plain_until = word_end
            elif word_end:
                checked_until = word_end
        plain = untrusted or position < plain_until
        kept = None if position < plain_until else _kept(line, position, untrusted, end)
        if kept is not None:
            written, position = kept
            out.append(written)
            continue
        escaped = UNTRUSTED_ESCAPED if plain else CLEAN_ESCAPED
        if char == "&" and not plain and not _ENTITY.match(line, position):
            out.append(char)  # no character reference: shown as it is
        elif char in escaped or (
            char == "&" or (ordered is not None and position == ordered.end())
        ):
            out.append(literal(char))
        else:
            out.append(char)
        position += 1
    return "".join(out), parentheses


def literal(char: str) -> str:
    """`char`, an ASCII punctuation character, written so that it is shown and opens nothing."""
    return REFERENCES.get(char) or f"\\{char}"


def _as_untrusted(text: str) -> str:
    return "".join(literal(c) if c in UNTRUSTED_ESCAPED else c for c in text)


def _destination(line: str, position: int, depth: int, stop: int) -> tuple[str, int, int]:
    """A destination run (rule 2) from `position`, before `stop`, with `depth` parentheses
    open: what is written, where the line goes on, and how many are still open there."""
    start = position
    while position < stop:
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char == "<":
            closer = line.find(">", position, stop)
            position = stop if closer < 0 else closer + 1
            continue
        position += 1
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                break
    position = min(position, stop)
    return _as_untrusted(line[start:position]), position, depth


def _plain_run(line: str, position: int, end: int) -> tuple[bool, int]:
    """Whether a URL starts at `position` whose run is a plain run (rule 2), and where the
    run ends (0: no URL starts there)."""
    if _BARE.match(line, position, end) is None:
        return False, 0
    word_end = _word_end(line, position)
    run = line[position:word_end]
    return _REFERENCED.search(run) is not None or _ENTITY.search(run) is not None, word_end


def _word_end(line: str, position: int) -> int:
    white = _WHITE.search(line, position)
    return len(line) if white is None else white.start()


def _kept(line: str, position: int, untrusted: bool, end: int) -> tuple[str, int] | None:
    """What rules 1 and 2 write at `position`, ending by `end`, and where the line goes on;
    None: neither."""
    char = line[position]
    if char == "`":
        return _code_span(line, position, untrusted, end)
    if untrusted:
        return None
    if (
        char == "["
        and line[position - 1 : position] != "!"
        and (link := _LINK.match(line, position, end))
    ):
        return f"[{_as_untrusted(link.group(1))}]({link.group(2)})", link.end()
    if char == "<" and (autolink := _AUTOLINK.match(line, position, end)):
        return autolink.group(), autolink.end()
    bare = _BARE.match(line, position, end)
    if bare is None or (position and _WORD.match(line[position - 1])):
        return None
    run = bare.group()
    entity = _ENTITY.search(run)
    if entity is not None:
        run = run[: entity.start()]
    return "".join(literal(c) if c in _IN_URL else c for c in run), position + len(run)


def _code_span(line: str, position: int, untrusted: bool, end: int) -> tuple[str, int]:
    """A kept span (rule 1) at `position`, or the run of backticks there escaped."""
    run = _BACKTICKS.match(line, position, end)
    assert run is not None
    length = len(run.group())
    for closer in _BACKTICKS.finditer(line, run.end(), end):
        if len(closer.group()) != length:
            continue
        content = line[run.end() : closer.start()]
        if _inert(content, untrusted):
            return f"`{content}`", closer.end()
        break
    return literal("`") * length, run.end()


def _inert(content: str, untrusted: bool) -> bool:
    if not content.strip(" ") or INERT_NEVER.intersection(content):
        return False
    if _LOOSE_UNDERSCORE.search(content):
        return False
    return not (untrusted and _UNTRUSTED_INERT.search(content))
