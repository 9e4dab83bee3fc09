"""What of a reply the owner may see while the model is still writing it. Pure; no I/O.

A reply arrives in pieces as the model writes it. Only when it ends does
`tool_calls.parse_reply` decide what is content and what is a tool call, and the
reply's content is that decision. While it is being written, what is streamed is
the part of that content which nothing written next can change; everything that
could still be (part of) a tool call is held back. The rules, for the text written
so far, in the order they apply (`streamable`):

1. **A bare call is still possible: hold everything.** While the text has no
   `<tool_call>` and, without its leading whitespace, is empty or could still open
   a bare call (`{`, or a ``` fence, optionally `json`, then whitespace with a
   newline, then `{`), nothing is streamed: such a reply is a tool call exactly
   when it ends as one, and only its end can tell. Once `<tool_call>` appears the
   reply is read as tagged and the bare form no longer applies.
2. **Tagged calls are never streamed.** Each `<tool_call>` up to its `</tool_call>`
   (or up to the end of the text, while it is still open) is left out, as
   `parse_reply` leaves it out; so is a tail that could be the start of a
   `<tool_call>` still being written (`<`, `<tool_`, ...).
3. **Whitespace at the edges waits.** The content is stripped, so leading
   whitespace is never streamed, and trailing whitespace waits for what follows
   it: streamed before more content, dropped if the reply ends there.

What is left is always a prefix of the reply's content, whatever comes next, and
it only grows as text is added. `ReplyStream` emits its growth piece by piece and,
at the end, the rest of the content, so the pieces it emits together are exactly
the reply's content and never include what turns out to be a tool call.

Pieces are text: the model holds back an incomplete UTF-8 byte sequence until it
is complete, and the turn markers are token ids that end the reply (or render as
nothing) before any text is made, so a piece never holds part of a character or
of a marker.
"""

from __future__ import annotations

from boxmaker.core.tool_calls import CLOSE, OPEN, parse_reply

_FENCE = "```"
_FENCE_LANGUAGE = "json"


def _could_open_bare_call(text: str) -> bool:
    """Whether `text` (no leading whitespace) could still grow into a bare tool call."""
    if not text or text.startswith("{"):
        return True
    if len(text) < len(_FENCE):
        return _FENCE.startswith(text)
    if not text.startswith(_FENCE):
        return False
    after = text[len(_FENCE) :]
    if _FENCE_LANGUAGE.startswith(after):  # "", "j", ... "json"
        return True
    rests = [after]
    if after.startswith(_FENCE_LANGUAGE):
        rests.append(after[len(_FENCE_LANGUAGE) :])
    for rest in rests:
        body = rest.lstrip()
        if not body:  # whitespace so far: the newline and the `{` may follow
            return True
        if "\n" in rest[: len(rest) - len(body)] and body.startswith("{"):
            return True
    return False


def _held_tail(text: str) -> int:
    """The length of the longest tail of `text` that is a proper start of `<tool_call>`."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0


def _outside_calls(text: str) -> str:
    """`text` without its tagged calls (rule 2), open or closed, nor a tail that may open one."""
    parts: list[str] = []
    at = 0
    while True:
        start = text.find(OPEN, at)
        if start < 0:
            rest = text[at:]
            parts.append(rest[: len(rest) - _held_tail(rest)])
            return "".join(parts)
        parts.append(text[at:start])
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:  # still open: it runs to the end of what is written
            return "".join(parts)
        at = end + len(CLOSE)


def streamable(text: str) -> str:
    """The part of the reply's content that `text`, the reply so far, already fixes."""
    if OPEN not in text and _could_open_bare_call(text.lstrip()):
        return ""  # rule 1
    return _outside_calls(text).strip()  # rules 2 and 3


class ReplyStream:
    """One reply's content, released as the model's text arrives (see the rules above)."""

    def __init__(self) -> None:
        self.text = ""  # everything fed so far
        self._sent = 0  # how much of the content has been released

    def feed(self, piece: str) -> str:
        """Take the next piece of the reply; return the content it releases (maybe "")."""
        if not piece:
            return ""
        self.text += piece
        ready = streamable(self.text)
        released = ready[self._sent :]
        self._sent = max(self._sent, len(ready))
        return released

    def finish(self) -> str:
        """The reply has ended: the rest of its content (maybe "")."""
        content = parse_reply(self.text).content
        rest = content[self._sent :]
        self._sent = len(content)
        return rest
