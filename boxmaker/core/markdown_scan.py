"""What a CommonMark parser sees in a post: the parse behind reply escaping, and its proof. No I/O.

The parser is markdown-it-py's CommonMark with GFM tables and strikethrough
(Mattermost renders both) and raw HTML off (Mattermost shows a tag as text), with
a nesting limit of 100; a text nested deeper than `DEPTH_GUARD` is never proven.

`scan(text)` parses `text` and says where each construct that can fetch or link
sits, as offsets into `text`:

- each leaf block's inline content (paragraphs, headings, table cells) is parsed
  by the real inline rules, recording the source span of every code span, image,
  link and autolink (an image inside a link is recorded too);
- fenced and indented code blocks are left alone: nothing in them is parsed;
- lines that belong to no block with content (reference definitions, blank
  lines, breaks) are listed, with the labels the text defines.

A leaf block's content is mapped back to `text` line by line (each content line
is found in its source line); a block that cannot be mapped makes the whole scan
fail (None), and the caller posts the text as code.

`leaks(message, links=..., last_paragraph=...)` is the proof: the message parsed
afresh, every image, and with `links` every link, every reference definition and
every bare URL in text outside code (what Mattermost autolinks: `scheme://`,
`www.`, an email address, the schemes in `_SCHEMES`), described one per line;
with `last_paragraph`, also whether the message does not end with exactly that
paragraph at the top level. An empty list proves the message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

NESTING_LIMIT = 100
DEPTH_GUARD = 90

# Schemes without `//` that a client may autolink (Mattermost's defaults and common custom ones)
_SCHEMES = "mailto|tel|sms|callto|xmpp|sip|sips|data|javascript|vbscript|file|magnet|news|irc"
_NOT_AFTER_SCHEME = r"[^\s:<>`|\\]"
EMAIL = r"[A-Za-z0-9._+\-]+@[A-Za-z0-9_\-]+\.[A-Za-z0-9]"
PROOF_URL = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*://|www\.|(?:{_SCHEMES}):(?={_NOT_AFTER_SCHEME})|{EMAIL}",
    re.IGNORECASE,
)

_LINE_END = re.compile(r"\r\n|\r|\n")
_SPANS = "boxmaker_spans"
_STATE = "boxmaker_state"
_DEPTH = "boxmaker_depth"
_RECORDED = ("backticks", "image", "link", "autolink")
_LEAF_BLOCKS = frozenset({"inline", "fence", "code_block", "hr", "html_block", "table_open"})


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "maxNesting": NESTING_LIMIT})
    return md.enable(["table", "strikethrough"])


@dataclass(frozen=True, slots=True)
class Span:
    """A construct the inline parser found: `kind` is a rule name, offsets are into the text."""

    kind: str
    pieces: tuple[tuple[int, int], ...]  # (start, end) in the text, one per line it covers


@dataclass(frozen=True, slots=True)
class Fence:
    first: int  # line index of the opening fence
    end: int  # line index after the block
    markup: str
    closed: bool


@dataclass(frozen=True, slots=True)
class Scan:
    lines: tuple[tuple[int, int], ...]  # each line's (start, end) in the text, line ending excluded
    spans: tuple[Span, ...]
    fences: tuple[Fence, ...]
    inline: tuple[tuple[int, int], ...]  # each line of inline content: (start, end) in the text
    loose_lines: tuple[int, ...]  # non-blank lines in no leaf block (reference definitions)
    references: frozenset[str]


def line_ranges(text: str) -> tuple[tuple[int, int], ...]:
    """Each line's (start, end) in `text`; CR, LF and CRLF all end a line, as in CommonMark."""
    ranges: list[tuple[int, int]] = []
    start = 0
    for match in _LINE_END.finditer(text):
        ranges.append((start, match.start()))
        start = match.end()
    ranges.append((start, len(text)))
    return tuple(ranges)


def _recording(name: str, rule: Callable[[StateInline, bool], bool]) -> Any:
    def recorded(state: StateInline, silent: bool) -> bool:
        start = state.pos
        found = rule(state, silent)
        if found and not silent and state is state.env.get(_STATE):
            state.env[_SPANS].append((name, start, state.pos))
        return found

    return recorded


def _scanner() -> MarkdownIt:
    md = _parser()
    md.disable("inline")  # the core rule: `scan` runs the inline parser itself, recording
    for rule in list(md.inline.ruler.__rules__):
        if rule.name in _RECORDED:
            md.inline.ruler.at(rule.name, _recording(rule.name, rule.fn))
    md.inline.ruler.before("text", "boxmaker_depth", _note_depth)
    return md


def _note_depth(state: StateInline, silent: bool) -> bool:
    """Tried at every position: keeps the deepest nesting level seen, matches nothing."""
    state.env[_DEPTH] = max(state.env.get(_DEPTH, 0), state.level)
    return False


_PROOF = _parser()
_SCANNER = _scanner()


def _content_lines(
    content: str, text: str, lines: Sequence[tuple[int, int]], first: int
) -> list[int] | None:
    """Where each line of a block's `content` starts in `text`, or None if one is not found."""
    starts: list[int] = []
    for index, part in enumerate(content.split("\n")):
        if first + index >= len(lines):
            return None
        start, end = lines[first + index]
        source = text[start:end].replace("\0", "\ufffd")
        if source.endswith(part):
            starts.append(end - len(part))
        elif source.rstrip(" \t").endswith(part):
            starts.append(start + len(source.rstrip(" \t")) - len(part))
        elif (found := source.find(part)) >= 0:
            starts.append(start + found)
        else:
            return None
    return starts


def _inline_spans(content: str, env: dict[str, Any]) -> list[tuple[str, int, int]] | None:
    state = StateInline(content, _SCANNER, env, [])
    env[_STATE], env[_SPANS], env[_DEPTH] = state, [], 0
    _SCANNER.inline.tokenize(state)
    spans: list[tuple[str, int, int]] = env.pop(_SPANS)
    del env[_STATE]
    return None if env.pop(_DEPTH) >= DEPTH_GUARD else spans


def _pieces(
    start: int, end: int, content: str, starts: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    pieces: list[tuple[int, int]] = []
    offset = 0
    for index, part in enumerate(content.split("\n")):
        low, high = max(start, offset), min(end, offset + len(part))
        if low < high:
            pieces.append((starts[index] + low - offset, starts[index] + high - offset))
        offset += len(part) + 1
    return tuple(pieces)


def _cells(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """A table row's cells, split at each pipe not preceded by a backslash (markdown-it's rule)."""
    cell = start
    for position in range(start, end):
        if text[position] == "|" and (position == start or text[position - 1] != "\\"):
            yield cell, position
            cell = position + 1
    yield cell, end


def scan(text: str) -> Scan | None:
    """Where the constructs of `text` are; None when it cannot be mapped or nests too deep."""
    lines = line_ranges(text)
    env: dict[str, Any] = {}
    tokens = _SCANNER.parse(text, env)
    if any(token.level >= DEPTH_GUARD for token in tokens):
        return None
    covered: set[int] = set()
    spans: list[Span] = []
    fences: list[Fence] = []
    sources: list[tuple[str, list[int]]] = []
    tables: list[range] = []
    for token in tokens:
        if token.type not in _LEAF_BLOCKS or token.map is None:
            continue
        first, end = token.map
        covered.update(range(first, end))
        if token.type == "fence":
            fences.append(_fence(token, text, lines))
        elif token.type == "table_open":
            tables.append(range(first, end))
            for index in range(first, min(end, len(lines))):
                for low, high in _cells(text, *lines[index]):
                    cell = text[low:high]
                    stripped = cell.strip(" \t")
                    offset = low + len(cell) - len(cell.lstrip(" \t"))
                    sources.append((stripped.replace("\0", "\ufffd"), [offset]))
        elif token.type == "inline" and not any(first in table for table in tables):
            starts = _content_lines(token.content, text, lines, first)
            if starts is None:
                return None
            sources.append((token.content, starts))
    inline: list[tuple[int, int]] = []
    for content, starts in sources:
        inline.extend(_pieces(0, len(content), content, starts))
        found = _inline_spans(content, env)
        if found is None:
            return None
        spans.extend(Span(kind, _pieces(low, high, content, starts)) for kind, low, high in found)
    loose = tuple(
        index
        for index, (start, end) in enumerate(lines)
        if index not in covered and text[start:end].strip()
    )
    references = frozenset(env.get("references", {}))
    return Scan(lines, tuple(spans), tuple(fences), tuple(inline), loose, references)


def _fence(token: Token, text: str, lines: Sequence[tuple[int, int]]) -> Fence:
    first, end = token.map or (0, 0)
    last = text[slice(*lines[end - 1])].lstrip(" \t>") if end - first >= 2 else ""
    char = token.markup[:1]
    closed = bool(re.fullmatch(rf"{re.escape(char)}{{{len(token.markup)},}}[ \t]*", last))
    return Fence(first, end, token.markup, closed)


def _text_runs(children: Sequence[Token]) -> Iterator[str]:
    run: list[str] = []
    for child in children:
        if child.type in ("text", "text_special"):
            run.append(child.content)
            continue
        if run:
            yield "".join(run)
            run = []
    if run:
        yield "".join(run)


def leaks(message: str, *, links: bool, last_paragraph: str | None = None) -> list[str]:
    """What in `message` could still fetch or link; an empty list proves it (module docstring)."""
    env: dict[str, Any] = {}
    tokens = _PROOF.parse(message, env)
    found: list[str] = []
    if any(token.level >= DEPTH_GUARD for token in tokens):
        found.append("nested too deep to prove")
    for token in tokens:
        children = token.children or []
        if any(child.level >= DEPTH_GUARD for child in children):
            found.append("nested too deep to prove")
        for child in children:
            if child.type == "image":
                found.append(f"image {child.attrGet('src')!r}")
            elif links and child.type == "link_open":
                found.append(f"link {child.attrGet('href')!r}")
        if links:
            for run in _text_runs(children):
                found.extend(f"bare URL at {m.group()!r}" for m in PROOF_URL.finditer(run))
    if links:
        found.extend(f"reference definition {label!r}" for label in env.get("references", {}))
    if last_paragraph is not None:
        tail = [(t.type, t.level, t.content) for t in tokens[-3:]]
        wanted = [
            ("paragraph_open", 0, ""),
            ("inline", 1, last_paragraph),
            ("paragraph_close", 0, ""),
        ]
        if tail != wanted:
            found.append("the last paragraph is not the notice")
    return found
