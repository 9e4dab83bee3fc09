"""A line of a reply outside code blocks, as Markdown Mattermost's renderers all read alike.

No I/O. The rules behind `core.reply_escape` (its docstring says why). A line is read left
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
   reference, with `` ` ``, `!`, `[`, `]`, `~` and backslash in it escaped (so a
   renderer that does not link it still shows it and makes nothing of it). What stands
   in parentheses right after a `]` that is not such a link (an image's
   destination, taken apart by rule 3) is escaped as an untrusted reply's, so it
   is neither a link nor a preview.
3. Any other character: written literally (`literal`) when it is in the mode's
   set, as it is otherwise. Literally means a backslash escape where marked's fork
   honours one (`BACKSLASHED`, which CommonMark and commonmark.js honour too), else
   a character reference (`REFERENCES`), which all of them decode after parsing;
   a backtick always as `&#96;`, so no renderer that ends an autolink between a
   backslash and its backtick leaves a backtick to open code. Untrusted: every
   ASCII punctuation character that can open or spell anything (`UNTRUSTED_ESCAPED`),
   so nothing links or autolinks in any flavour: Mattermost's URL rules (the web
   app's, the mobile app's, the server's) all match a literal `:`, `.`, `/` or `@`
   in the source. Clean: `CLEAN_ESCAPED`, the characters that open code, images,
   links, HTML and strikethrough, an `&` that would start a character reference,
   and `.` or `)` after the digits that start a line, so no ordered list
   renumbers them. Emphasis, headings, lists, quotes and tables stay.

Before that, when a line is indented four columns or more, its first space or tab
is written as a character reference (`&#32;`, `&#9;`): the line then starts no
indented code block (inside which the escapes would show) in any renderer. (A
no-break space would not do: marked turns it into a space before it parses.)
"""

from __future__ import annotations

import re

INERT_NEVER = frozenset("\\`![]<>&$~*|")
# the ASCII punctuation marked's fork escapes with a backslash, as CommonMark does
BACKSLASHED = frozenset("`*{}[]()#+-.!_>|~")
# the rest of what must be literal, as character references, which all of them decode
REFERENCES = {
    "`": "&#96;",
    "\\": "&#92;",
    "<": "&lt;",
    "&": "&amp;",
    ":": "&#58;",
    "/": "&#47;",
    "@": "&#64;",
    "$": "&#36;",
}
UNTRUSTED_ESCAPED = BACKSLASHED | frozenset(REFERENCES)
CLEAN_ESCAPED = frozenset("\\`![]<~")

_INDENT = re.compile(r"[ \t]*")
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
_DESTINATION = re.compile(r"\([^\s)]*\)?")
_WORD = re.compile(r"[\w.\-+]")
_IN_URL = frozenset("\\`![]~")
_ENTITY = re.compile(r"&(?:#[0-9]{1,8}|#[xX][0-9A-Fa-f]{1,8}|[A-Za-z][A-Za-z0-9]{0,31});")


def escape_line(line: str, untrusted: bool) -> str:
    """`line` (no line ending, not inside a code block) as the rules above write it."""
    indent = _INDENT.match(line)
    start = indent.end() if indent else 0
    lead = line[:start]
    if line[start:] and _width(lead) >= 4:
        lead = f"&#{ord(lead[0])};{lead[1:]}"
    escaped = UNTRUSTED_ESCAPED if untrusted else CLEAN_ESCAPED
    ordered = None if untrusted else _ORDERED.match(line)
    out = [lead]
    position = start
    while position < len(line):
        char = line[position]
        kept = _kept(line, position, untrusted)
        if kept is not None:
            written, position = kept
            out.append(written)
            continue
        if char == "&" and not untrusted and not _ENTITY.match(line, position):
            out.append(char)  # no character reference: shown as it is
        elif char in escaped or (
            char == "&" or (ordered is not None and position == ordered.end())
        ):
            out.append(literal(char))
        else:
            out.append(char)
        position += 1
    return "".join(out)


def literal(char: str) -> str:
    """`char`, an ASCII punctuation character, written so that it is shown and opens nothing."""
    return REFERENCES.get(char) or f"\\{char}"


def _width(whitespace: str) -> int:
    width = 0
    for char in whitespace:
        width = width + 4 - width % 4 if char == "\t" else width + 1
    return width


def _kept(line: str, position: int, untrusted: bool) -> tuple[str, int] | None:
    """What rules 1 and 2 write at `position`, and where the line goes on; None: neither."""
    char = line[position]
    if char == "`":
        return _code_span(line, position, untrusted)
    if untrusted:
        return None
    if (
        char == "["
        and line[position - 1 : position] != "!"
        and (link := _LINK.match(line, position))
    ):
        text = "".join(literal(c) if c in UNTRUSTED_ESCAPED else c for c in link.group(1))
        return f"[{text}]({link.group(2)})", link.end()
    if char == "(" and position and line[position - 1] == "]":  # an image's: no link, no preview
        destination = _DESTINATION.match(line, position)
        assert destination is not None
        written = "".join(literal(c) if c in UNTRUSTED_ESCAPED else c for c in destination.group())
        return written, destination.end()
    if char == "<" and (autolink := _AUTOLINK.match(line, position)):
        return autolink.group(), autolink.end()
    bare = _BARE.match(line, position)
    if bare is None or (position and _WORD.match(line[position - 1])):
        return None
    run = bare.group()
    entity = _ENTITY.search(run)
    if entity is not None:
        run = run[: entity.start()]
    return "".join(literal(c) if c in _IN_URL else c for c in run), position + len(run)


def _code_span(line: str, position: int, untrusted: bool) -> tuple[str, int]:
    """A kept span (rule 1) at `position`, or the run of backticks there escaped."""
    run = _BACKTICKS.match(line, position)
    assert run is not None
    length = len(run.group())
    for closer in _BACKTICKS.finditer(line, run.end()):
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
