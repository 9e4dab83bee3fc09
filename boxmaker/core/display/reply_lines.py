"""A reply's lines outside code blocks, each escaped with what the lines before it left open.

No I/O. `core.display.reply_escape` walks a reply's lines and hands every line outside a code
block to `escape_text_line`, with the `LineState` the line before it left; the line
goes to `core.display.reply_inline.escape_line` with the positions these rules write
themselves and where a destination run starts. They exist because the renderers read a
line by the lines around it, so that a line escaped alone could still hide characters
or make a heading or an image's link. In the order they are applied:

1. **Indentation.** A line's start is its white space and, in a clean reply, the
   container markers in it (`>`, and `-`, `+`, `*` or one to nine digits then `.` or
   `)`, before white space or the end); an untrusted reply escapes every marker, so
   none opens a container. The first space or tab of a white-space run there is
   written as a character reference (`&#32;`, `&#9;`) when the run spans four
   columns or more at the line's beginning, or five or more after a marker (the
   marker's own space and four): so no line, in a quote or a list item or not, starts
   an indented code block (inside which the escapes would show) in any renderer. (A
   no-break space would not do: marked turns it into a space before it parses.)
2. **Setext underlines.** A line of only `=` and `-` (marked's fork takes a mix of
   them) after its white space and quote markers, right after a line that holds
   text, has its first `=` or `-` written as a character reference (`&#61;`,
   `&#45;`): it underlines nothing, so no line becomes a heading and the underline is
   shown. After a blank line, `---` stays a thematic break.
3. **Headings** (clean; an untrusted reply escapes every `#`). A `#` heading stays one
   while no line before it can have made a renderer read it as something else: until
   a line of text whose start (after rule 1's white space and markers) opens HTML (`<`
   then a letter, `/`, `!` or `?`: an HTML block, which the escaping shows as text,
   may run on over blank lines) or looks like a fence (three backticks or tildes: a
   fence in a container, or one that marked's fork reads and CommonMark does not),
   or a code block that marked's fork may end elsewhere (`core.display.reply_escape` says
   which; `after_block`). From there on, a heading opener (one to six `#`, then white
   space or the end, at the start of the line's text) is written `\\#`. The first
   part of a long reply starts with headings kept, every later part without
   (`start_state`): a part may start inside a code block.
4. **Reference definitions** (clean, when the reply holds an image opener `![`
   anywhere, in any of its parts: which definition an image uses is matched by each
   renderer its own way, so any image makes every definition an image's). What
   follows `]:` on a line is a destination run (`core.display.reply_inline` rule 2), and when
   nothing but white space does, so is the whole next line (CommonMark takes the
   destination from there). A definition's URL is then neither a link nor a preview,
   as an inline image's is not. In a reply with no image a definition's URL stays a
   link, as any bare URL of a clean reply does.
5. **Destinations over lines.** A destination run the line before left open goes on
   from this line's start (after rule 1's overrides) until its parentheses balance.

A blank line (white space only; in a clean reply quote markers too) ends a paragraph in
every renderer, so it ends an open destination run and a pending definition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from boxmaker.core.display.reply_inline import escape_line

_MARKER = re.compile(r">|(?:[-+*]|[0-9]{1,9}[.)])(?=[ \t]|$)")
_SETEXT = re.compile(r"[ \t>]*([=-])[=-]*[ \t]*")
_HEADING = re.compile(r"#{1,6}(?=[ \t]|$)")
_OPENS = re.compile(r"<[A-Za-z/!?]|```|~~~")
_BLANK = {False: re.compile(r"[ \t>]*"), True: re.compile(r"[ \t]*")}
_UNDERLINE = {"=": "&#61;", "-": "&#45;"}


@dataclass(frozen=True, slots=True)
class LineState:
    """What the lines before a line leave open for it (module docstring)."""

    images: bool = False  # rule 4: the reply holds an image opener
    headings: bool = True  # rule 3: heading openers are still kept
    text: bool = False  # rule 2: the line before holds text
    parentheses: int = 0  # rule 5: a destination run's parentheses still open
    definition: bool = False  # rule 4: this line is a definition's destination

    def after_block(self, plain: bool) -> LineState:
        """The state after a code block; `plain`: every renderer ends it where the escaping
        does (rule 3)."""
        return replace(
            self, headings=self.headings and plain, text=False, parentheses=0, definition=False
        )


def start_state(reply: str, *, first_part: bool = True) -> LineState:
    """The state a reply (or a part of `reply`, the whole) starts with: rules 3 and 4."""
    return LineState(images="![" in reply, headings=first_part)


def escape_text_line(line: str, untrusted: bool, state: LineState) -> tuple[str, LineState]:
    """`line` (no line ending, outside code blocks) as written, and the state it leaves."""
    if _BLANK[untrusted].fullmatch(line):
        written, _ = escape_line(line, untrusted)
        return written, replace(state, text=False, parentheses=0, definition=False)
    overrides, start = _indentation(line, untrusted)
    underline = _SETEXT.fullmatch(line) if state.text else None
    if underline is not None:
        overrides[underline.start(1)] = _UNDERLINE[underline.group(1)]
    headings = state.headings
    if not untrusted:
        if not headings and _HEADING.match(line, start):
            overrides[start] = "\\#"
        headings = headings and not _OPENS.match(line, start)
    region_from: int | None = None
    definition = False
    if state.images and not untrusted:
        label_end = line.find("]:")
        if state.definition:
            region_from = 0
        elif label_end >= 0:
            region_from = label_end + 2
            definition = not line[region_from:].strip(" \t")
    written, parentheses = escape_line(
        line,
        untrusted,
        overrides=overrides,
        parentheses=state.parentheses,
        region_from=region_from,
    )
    after = LineState(state.images, headings, True, parentheses, definition)
    return written, after


def _indentation(line: str, untrusted: bool) -> tuple[dict[int, str], int]:
    """Rule 1: the overrides of a line's start, and where its text starts."""
    overrides: dict[int, str] = {}
    position = column = 0
    least = 4
    while True:
        run, run_column = position, column
        while position < len(line) and line[position] in " \t":
            column = column + 4 - column % 4 if line[position] == "\t" else column + 1
            position += 1
        if position < len(line) and column - run_column >= least:
            overrides[run] = f"&#{ord(line[run])};"
        marker = None if untrusted else _MARKER.match(line, position)
        if marker is None:
            return overrides, position
        column += marker.end() - position
        position = marker.end()
        least = 5
