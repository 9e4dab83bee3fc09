"""A reply's text into the Markdown gatewayd posts, so nothing in it is fetched unasked. No I/O.

003 section 9, the owner's choice "C". Mattermost's server fetches the first plain
URL of a post for a preview and every Markdown image, and each client fetches the
images too (no image proxy); a code span or a code block stops both.

Rules, applied to the whole text every time (gatewayd re-escapes the full reply on
each edit), deterministically:

1. Every image (`![alt](url)`, `![alt][ref]`, `![alt][]`, `![alt]` with a
   definition), wherever it is outside code, is put inside a code span: it shows
   as text and nothing is fetched. An HTML `<img ...>` tag is too: Mattermost
   shows raw HTML as text anyway, this is defence in depth.
2. When `untrusted` (the session has read untrusted content): every link is put
   inside a code span too: Markdown links and reference links, autolinks
   (`<https://x>`), bare URLs (`scheme://...`, `www.`, `scheme:` followed by a
   non-space such as `mailto:a@b`, email addresses), and each line holding a
   reference definition. The reply then ends, after a blank line, with the one
   line `NOTICE`, and `unsafe_links` is True (the post's `unsafe_links` prop,
   which also tells Mattermost to fetch nothing for the post).
3. A clean reply keeps its links as they are (clickable; the server previews the
   first plain URL, by the owner's choice); only rule 1 applies.
4. Code spans, fenced and indented code blocks are left as they are: nothing in
   them is rendered.
5. A code span is a run of N backticks, N being the shortest length that no
   backtick run in the text has (so a wrapper never closes, or is closed by, a
   span of the text), padded with a space inside when its content starts or ends
   with a backtick, and a space outside where it would touch a backtick or
   follow a backslash. A construct that spans lines, or holds a `|` (a table
   cell boundary to GFM), is wrapped piece by piece: one span per line and cell,
   leading whitespace and `>` left outside.
6. Wrapping can change how the rest parses (an outer bracket becomes a link once
   the inner one is code), so the text is scanned again until a scan finds
   nothing to wrap, at most `_ROUNDS` times.
7. The proof: the result is parsed afresh (`markdown_scan.leaks`) and must hold
   no image, and when untrusted no link, no reference definition and no bare
   URL outside code, and end with the notice. If anything is found, or the text
   cannot be scanned, the whole text is posted in one fenced code block instead
   (a fence longer than any backtick run in it), with the notice when untrusted;
   `fenced` says so. Nothing in a fenced block is rendered, so that is always
   safe.

Characters are never removed: escaping only adds backticks and spaces around
them (a fence line before and after, when fenced), so the owner can read every
character of the reply.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from boxmaker.core.markdown_scan import EMAIL, Scan, Span, leaks, scan

NOTICE = (
    "Links in this reply are shown as code because this conversation has read untrusted content."
)

_ROUNDS = 6
_ALWAYS = frozenset({"image"})
_UNTRUSTED = frozenset({"image", "link", "autolink"})
_SKIPPED = frozenset({"backticks", "image", "link", "autolink"})
_GAP_ALWAYS = re.compile(r"<img\b[^>\n]*>?", re.IGNORECASE)
# what rule 2 calls a bare URL, a superset of the proof's; it runs to a space, `<` or backtick
_GAP_UNTRUSTED = re.compile(
    r"<img\b[^>\n]*>?"
    r"|(?:[A-Za-z][A-Za-z0-9+.\-]*://|www\.|(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{1,31}:"
    rf"(?=[^\s:<>`|\\])|{EMAIL})[^\s<`]*",
    re.IGNORECASE,
)
_BACKTICKS = re.compile(r"(\\?)(`+)")
_LIST_MARKER = re.compile(r"[ \t>]*(?:(?:[-+*]|\d{1,9}[.)])[ \t]+[ \t>]*)*")


@dataclass(frozen=True, slots=True)
class EscapedReply:
    """The Markdown to post, its `unsafe_links` prop, and whether it fell back to one code block."""

    message: str
    unsafe_links: bool
    fenced: bool = False


def escape_reply(text: str, untrusted: bool) -> EscapedReply:
    """`text` as it may be posted (module docstring)."""
    body = _escaped_body(text, untrusted)
    if body is not None:
        message = _with_notice(body) if untrusted else body
        if not leaks(message, links=untrusted, last_paragraph=NOTICE if untrusted else None):
            return EscapedReply(message, untrusted)
    fenced = _fenced(text)
    return EscapedReply(_with_notice(fenced) if untrusted else fenced, untrusted, fenced=True)


def _with_notice(body: str) -> str:
    return f"{body}\n\n{NOTICE}" if body else NOTICE


def _fenced(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    ending = "" if text == "" or text.endswith(("\n", "\r")) else "\n"
    return f"{fence}\n{text}{ending}{fence}"


def _escaped_body(text: str, untrusted: bool) -> str | None:
    """Rules 1 to 6; None when the text cannot be scanned or does not settle."""
    for _ in range(_ROUNDS):
        found = scan(text)
        if found is None:
            return None
        pieces = sorted(_pieces(found, text, untrusted))
        if not pieces:
            return _closed(text, found) if untrusted else text
        text = _wrapped(text, pieces)
    return None


def _closed(text: str, found: Scan) -> str:
    """`text` with a fence left open at its end closed, so the notice after it is not code."""
    fence = found.fences[-1] if found.fences else None
    after = found.lines[fence.end :] if fence is not None else ()
    if fence is None or fence.closed or any(text[start:end].strip() for start, end in after):
        return text
    start, end = found.lines[fence.first]
    opener = text[start:end]
    prefix = opener[: opener.index(fence.markup)]
    indent = "".join(char if char in " \t>" else " " for char in prefix)
    ending = "" if text.endswith(("\n", "\r")) else "\n"
    return f"{text}{ending}{indent}{fence.markup}"


def _pieces(found: Scan, text: str, untrusted: bool) -> Iterator[tuple[int, int]]:
    """The (start, end) of every piece of text to put in its own code span."""
    kinds = _UNTRUSTED if untrusted else _ALWAYS
    wrapped = [span for span in found.spans if span.kind in kinds]
    outer = [span for span in wrapped if not any(_inside(span, other) for other in wrapped)]
    for span in outer:
        for start, end in span.pieces:
            yield from _split(text, start, end)
    skipped = [piece for span in found.spans if span.kind in _SKIPPED for piece in span.pieces]
    gap = _GAP_UNTRUSTED if untrusted else _GAP_ALWAYS
    for start, end in found.inline:
        for low, high in _gaps(start, end, skipped):
            for match in gap.finditer(text, low, high):
                yield from _split(text, match.start(), match.end())
    if untrusted and found.references:
        for index in found.loose_lines:
            start, end = found.lines[index]
            marker = _LIST_MARKER.match(text, start, end)
            yield from _split(text, marker.end() if marker else start, end)


def _inside(span: Span, other: Span) -> bool:
    if span is other:
        return False
    low, high = other.pieces[0][0], other.pieces[-1][1]
    return low <= span.pieces[0][0] and span.pieces[-1][1] <= high


def _gaps(start: int, end: int, skipped: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of a line outside every skipped piece."""
    position = start
    for low, high in sorted(piece for piece in skipped if piece[0] < end and piece[1] > start):
        if low > position:
            yield position, low
        position = max(position, high)
    if position < end:
        yield position, end


def _split(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """A piece cut at each `|` not escaped by a backslash, with its whitespace left outside."""
    cuts = [
        position
        for position in range(start, end)
        if text[position] == "|" and (position == start or text[position - 1] != "\\")
    ]
    for low, high in zip([start, *(cut + 1 for cut in cuts)], [*cuts, end], strict=True):
        part = text[low:high]
        stripped = part.strip()
        if stripped:
            first = low + len(part) - len(part.lstrip())
            yield first, first + len(stripped)


def _wrapper_length(text: str) -> int:
    lengths: set[int] = set()
    for match in _BACKTICKS.finditer(text):
        lengths.add(len(match.group(2)))
        if match.group(1):
            lengths.add(len(match.group(2)) - 1)
    length = 1
    while length in lengths:
        length += 1
    return length


def _wrapped(text: str, pieces: list[tuple[int, int]]) -> str:
    """`text` with each piece in a code span (rule 5); overlapping pieces are merged."""
    fence = "`" * _wrapper_length(text)
    merged: list[tuple[int, int]] = []
    for start, end in pieces:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    out: list[str] = []
    position = 0
    tail = ""  # the last character written by the previous wrapper
    for start, end in merged:
        out.append(text[position:start])
        content = text[start:end]
        pad = " " if content.startswith("`") or content.endswith("`") else ""
        previous = text[start - 1 : start] if start > position else tail
        before = " " if previous in ("`", "\\") else ""
        after = " " if text[end : end + 1] == "`" else ""
        out.append(f"{before}{fence}{pad}{content}{pad}{fence}{after}")
        tail = out[-1][-1]
        position = end
    out.append(text[position:])
    return "".join(out)
