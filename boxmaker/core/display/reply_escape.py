"""A reply's text into the Markdown gatewayd posts, so nothing in it is fetched unasked. No I/O.

003 section 9, the owner's choice "C". Mattermost's server fetches every Markdown
image of a post and the first plain URL (a preview), and each client fetches the
images too (no image proxy). Mattermost renders with its own parsers: the web app
with a fork of marked, the mobile app with a fork of commonmark.js, the server
with a CommonMark parser of its own, each with extensions, and they disagree on
where code ends, what a link destination is, and what a bare URL is. So the
escaping does not depend on parsing as any of them does: it writes Markdown in
which every construct that could fetch or link is spelled so that all of them read
it the same way, and everything else is literal.

Rules, applied to the whole text every time (gatewayd re-escapes the full reply on
each edit), deterministically:

1. Code blocks: a line of three or more backticks or tildes (up to three spaces
   before) opens one, closed by a line of at least as many of the same character,
   or by the end of the text. It is written in one canonical form: a blank line,
   a fence of backticks longer than any run in the block, the language when it is
   a plain word (`LANGUAGE`; any other info string is written first as a line of
   its own, escaped), the lines as they are, the same fence, a blank line. A
   fence in a quote or a list item is not one: it is escaped as text.
2. Every other line goes through `core.display.reply_lines.escape_text_line`, with what the
   lines before it left open (indentation, setext underlines, headings, reference
   definitions, destinations over lines), and `core.display.reply_inline.escape_line`: code
   spans of inert text kept, and (clean) links kept clickable; every character that
   can open code, an image, a link, an autolink, HTML or an entity escaped with a
   backslash; when untrusted every ASCII punctuation character, so no URL or
   address in any form can autolink in any of the renderers. A code block is
   "plain" when marked's fork ends it where rule 1 does: its info string holds no
   backtick or tilde, and no line in it is a closing fence to marked's fork (its
   fence, then any backticks and tildes, then spaces) that CommonMark does not
   close on; after a block that is not plain, headings are no longer kept
   (`core.display.reply_lines` rule 3).
3. When `untrusted` (the session has read untrusted content) the reply ends,
   after a blank line, with the one line `NOTICE`, and `unsafe_links` is True
   (the post's `unsafe_links` prop, which also tells Mattermost to fetch nothing
   for the post).
4. The proof: the result is parsed afresh (`markdown_scan.leaks`, markdown-it) and
   must hold no image, and when untrusted no link, no reference definition and no
   bare URL outside code, and end with the notice. If anything is found, the whole
   text is posted in one fenced code block instead (a fence longer than any
   backtick run in it), with the notice when untrusted; `fenced` says so. The
   real renderers are run on hostile replies by the tests
   (tests/gatewayd/test_mattermost_renderers.py).

Characters are never removed: escaping adds backslashes, character references,
fence lines and blank lines; line endings become LF. The owner can read every
character of the reply. The work a renderer does on the result stays linear: no
bracket, no unclosed construct, nothing for a backtracking rule to retry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from boxmaker.core.display.markdown_scan import leaks
from boxmaker.core.display.reply_inline import escape_line
from boxmaker.core.display.reply_lines import LineState, escape_text_line, start_state

NOTICE = (
    "Links in this reply are shown as code because this conversation has read untrusted content."
)
LANGUAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_+#.\-]{0,31}")

_LINE_END = re.compile(r"\r\n|\r|\n")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


@dataclass(frozen=True, slots=True)
class EscapedReply:
    """The Markdown to post, its `unsafe_links` prop, and whether it fell back to one code block."""

    message: str
    unsafe_links: bool
    fenced: bool = False


def escape_reply(
    text: str, untrusted: bool, ending: str = "", *, start: LineState | None = None
) -> EscapedReply:
    """`text` as it may be posted (module docstring); `ending`, a paragraph of gatewayd's
    own, comes after it as it is (before the notice), and is proven with the rest.
    `start`: when `text` is a part of a longer reply, the state that part starts with
    (`core.display.reply_lines.start_state`); by default `text` is the whole reply."""
    body = _escaped_body(text, untrusted, start_state(text) if start is None else start)
    if ending:
        body = f"{body}\n\n{ending}" if body else ending
    message = _with_notice(body) if untrusted else body
    if not leaks(message, links=untrusted, last_paragraph=NOTICE if untrusted else None):
        return EscapedReply(message, untrusted)
    fenced = _fenced(text)
    if ending:
        fenced = f"{fenced}\n\n{ending}"
    return EscapedReply(_with_notice(fenced) if untrusted else fenced, untrusted, fenced=True)


def _with_notice(body: str) -> str:
    return f"{body}\n\n{NOTICE}" if body else NOTICE


def _fence_for(lines: list[str]) -> str:
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    return "`" * max(3, longest + 1)


def _fenced(text: str) -> str:
    lines = _LINE_END.split(text)
    fence = _fence_for(lines)
    return "\n".join([fence, *lines, fence]) if text else f"{fence}\n{fence}"


def _escaped_body(text: str, untrusted: bool, state: LineState) -> str:
    """Rules 1 and 2 over every line."""
    lines = _LINE_END.split(text)
    out: list[str] = []
    index = 0
    while index < len(lines):
        opener = _FENCE.fullmatch(lines[index])
        if opener is None or (opener.group(1)[0] == "`" and "`" in opener.group(2)):
            written, state = escape_text_line(lines[index], untrusted, state)
            out.append(written)
            index += 1
            continue
        markup, info = opener.groups()
        end = _closing(lines, index + 1, markup)
        content = lines[index + 1 : end]
        _block(out, content, info.strip(), untrusted)
        state = state.after_block(_plain(markup, info, content))
        index = end + 1
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return "\n".join(out)


def _closing(lines: list[str], start: int, markup: str) -> int:
    closer = re.compile(rf" {{0,3}}{re.escape(markup[0])}{{{len(markup)},}}[ \t]*")
    for index in range(start, len(lines)):
        if closer.fullmatch(lines[index]):
            return index
    return len(lines)


def _plain(markup: str, info: str, content: list[str]) -> bool:
    """Whether marked's fork ends this block where `_closing` does (rule 2)."""
    if "`" in info or "~" in info:
        return False
    marked_closer = re.compile(rf" {{0,3}}{re.escape(markup)}[~`]* *")
    return not any(marked_closer.fullmatch(line) for line in content)


def _block(out: list[str], content: list[str], info: str, untrusted: bool) -> None:
    """A code block in the canonical form of rule 1, appended to `out`."""
    if out and out[-1]:
        out.append("")
    language = info if LANGUAGE.fullmatch(info) else ""
    if info and not language:
        out.extend([escape_line(info, untrusted)[0], ""])
    fence = _fence_for(content)
    out.extend([f"{fence}{language}", *content, fence, ""])
