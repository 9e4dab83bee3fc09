"""A reply too long for one post, as several: each part escaped from scratch. Pure; no I/O.

Mattermost refuses a post (or an edit) whose message passes MAX_POST_CHARS code
points, so gatewayd posts a long reply as its answer post and follow-up posts in
the thread. The rules:

1. **Parts are escaped alone.** Each part is a piece of the reply's text run
   through `core.display.reply_escape.escape_reply` by itself, so no part depends on
   another for its safety, and each carries the untrusted notice when the turn
   was untrusted. What each part starts with is the whole reply's
   (`core.display.reply_lines.start_state`): every part escapes reference definitions as
   images' when the reply holds an image anywhere, and only the first keeps
   headings, as a later part may start inside a code block.
2. **Cut on lines.** A part is the most whole lines whose escaped message fits;
   a line that does not fit alone is cut between code points at the longest prefix
   that fits. Every character of the reply is in exactly one part, in order, but
   the white space at the end of a part that is cut.
3. **Say so.** Every part but the last ends with a paragraph of gatewayd's own
   (`escape_reply`'s `ending`, posted as it is) saying the reply goes on in the
   next post, so an owner who reads one post knows it is not the whole answer.
4. **Bounded work.** Each cut is found by binary search on the count of lines
   (then of characters): about log2(n) escapes per part, not n.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from boxmaker.core.display.reply_escape import escape_reply
from boxmaker.core.display.reply_lines import LineState, start_state
from boxmaker.core.fitting import largest

MAX_POST_CHARS = 16_383  # Mattermost's limit on a post's message, in code points
CONTINUED = "(continued in the next post)"


def split_reply(text: str, untrusted: bool, limit: int = MAX_POST_CHARS) -> list[str]:
    """`text` as the messages of one or more posts, each within `limit` once escaped."""
    parts: list[str] = []
    rest = text
    first, later = start_state(text), start_state(text, first_part=False)
    while True:
        start = later if parts else first
        if _fits(rest, untrusted, limit, start):
            parts.append(escape_reply(rest, untrusted, start=start).message)
            return parts
        # escaping shortens a text by its CRs at most: a part is about `limit` characters of it
        window = rest[:limit]
        cut = _longest_prefix(window, partial(_cut_fits, untrusted, limit, start))
        if cut == 0:
            raise ValueError(f"a post of {limit} characters cannot hold any part of this reply")
        part = escape_reply(rest[:cut].rstrip(), untrusted, ending=CONTINUED, start=start)
        parts.append(part.message)
        rest = rest[cut:]


def _fits(text: str, untrusted: bool, limit: int, start: LineState, ending: str = "") -> bool:
    return len(escape_reply(text, untrusted, ending, start=start).message) <= limit


def _cut_fits(untrusted: bool, limit: int, start: LineState, head: str) -> bool:
    """Whether `head` fits as a part that goes on in the next post."""
    return _fits(head.rstrip(), untrusted, limit, start, CONTINUED)


def _longest_prefix(text: str, fits: Callable[[str], bool]) -> int:
    """The length of the longest prefix of `text` that `fits` and ends a line (or, when
    no line fits whole, the longest that fits at all); 0 when none does."""
    ends = [at + 1 for at, char in enumerate(text) if char == "\n"]
    found = largest(len(ends), lambda count: fits(text[: ends[count - 1]]))
    if found:
        return ends[found - 1]
    first_line = ends[0] if ends else len(text)
    return largest(first_line, lambda count: fits(text[:count]))
