"""What of a reply the owner may see while the model is still writing it. Pure; no I/O.

A reply arrives in pieces as the model writes it. Only when it ends does
`tool_calls.parse_reply` decide what is content and what is a tool call, and the
reply's content is that decision. While it is being written, what is streamed is
the part of that content which nothing written next can change; everything that
could still be (part of) a tool call is held back. The rules, for the text written
so far in a given `CallSyntax`, in the order they apply (`streamable`):

1. **A whole-reply call is still possible: hold everything.** Such a reply is a
   tool call exactly when it ends as one, and only its end can tell, so nothing
   is streamed while the text, without its leading whitespace,
   - bare_json: is empty or could still open a bare call (`{`, or a ``` fence,
     optionally `json`, then whitespace with a newline, then `{`);
   - no syntax (the default): is so, and holds no `<tool_call>` (once one
     appears the reply is read as tagged_json and the bare form no longer
     applies);
   - llama3_json: is empty, starts with `{`, or is the start of
     `<|python_tag|>` or anything after one.
   Once it can no longer be one, a bare_json or llama3_json reply is all content.
2. **Calls are never streamed.** Each call is left out, as `parse_reply` leaves
   it out, from its opener to its closer, or to the end of the text while it is
   still open:
   - tagged_json and the default: `<tool_call>` to `</tool_call>`;
   - xml: from the first `<tool_call>`, or the first `<function=` that starts a
     line (a call written bare, `core.model.xml_calls` rule 1), to the end of the
     reply: a value may hold `</tool_call>`, and only the whole reply tells
     where each call ends, and whether a bare one is a call;
   - deepseek_r1: `<｜tool▁calls▁begin｜>` to `<｜tool▁calls▁end｜>`;
   - gemma4: `<|tool_call>` to `<tool_call|>`;
   - mistral: `[TOOL_CALLS]` and everything after it, to the end of the reply.
   So is a tail that could be the start of an opener still being written (`<`,
   `<tool_`, `[TOOL_`, ...; xml: a last line that could be the start of
   `<function=`).
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
"""  # noqa: RUF002 (DeepSeek's markers are full-width)

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boxmaker.core.model.tool_calls import (
    CLOSE,
    OPEN,
    CallSyntax,
    SyntaxRow,
    parse_reply,
    row_of,
)
from boxmaker.core.model.xml_calls import FUNCTION, bare_opener

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


def _could_open(text: str, row: SyntaxRow) -> bool:
    """Whether `text` (no leading whitespace) could still grow into a whole-reply call of
    `row`'s syntax: empty, an object, a fence (where it allows one), or its prefix."""
    if row.fenced and _could_open_bare_call(text):
        return True
    if not text or text.startswith("{"):
        return True
    prefix = row.prefix
    return prefix is not None and (text.startswith(prefix) or prefix.startswith(text))


def _held_tail(text: str, opener: str) -> int:
    """The length of the longest tail of `text` that is a proper start of `opener`."""
    for size in range(min(len(opener) - 1, len(text)), 0, -1):
        if opener.startswith(text[-size:]):
            return size
    return 0


def _outside_calls(text: str, opener: str, closer: str | None) -> str:
    """`text` without its calls (rule 2), open or closed, nor a tail that may open one."""
    parts: list[str] = []
    at = 0
    while True:
        start = text.find(opener, at)
        if start < 0:
            rest = text[at:]
            parts.append(rest[: len(rest) - _held_tail(rest, opener)])
            return "".join(parts)
        parts.append(text[at:start])
        if closer is None or (end := text.find(closer, start + len(opener))) < 0:
            # still open: it runs to the end of what is written
            return "".join(parts)
        at = end + len(closer)


def _before_calls(text: str, opener: str) -> str:
    """`text` up to its first call, wrapped or bare (rule 2, xml), nor a tail that may
    open one."""
    wrapped = text.find(opener)
    end = wrapped if wrapped >= 0 else len(text)
    bare = bare_opener(text, 0, end)
    if bare >= 0:
        return text[:bare]
    if wrapped >= 0:
        return text[:wrapped]
    line = text.rfind("\n") + 1
    if FUNCTION.startswith(text[line:].lstrip(" \t")):
        return text[:line]  # the last line may still become a bare call
    return text[: len(text) - _held_tail(text, opener)]


def streamable(text: str, syntax: CallSyntax | SyntaxRow | None = None) -> str:
    """The part of the reply's content that `text`, the reply so far, already fixes."""
    if syntax is None:
        if OPEN not in text and _could_open_bare_call(text.lstrip()):
            return ""  # rule 1
        return _outside_calls(text, OPEN, CLOSE).strip()  # rules 2 and 3
    row = row_of(syntax)
    if row.whole_reply:
        return "" if _could_open(text.lstrip(), row) else text.strip()  # rules 1 and 3
    (opener,) = row.openers
    if row.read_reply is not None:  # it finds its own calls: held from the first one
        return _before_calls(text, opener).strip()  # rules 2 and 3
    return _outside_calls(text, opener, row.closer).strip()  # rules 2 and 3


class ReplyStream:
    """One reply's content, released as the model's text arrives (see the rules above)."""

    def __init__(
        self,
        syntax: CallSyntax | SyntaxRow | None = None,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.syntax, self.schemas = syntax, schemas
        self.text = ""  # everything fed so far
        self._sent = 0  # how much of the content has been released

    def feed(self, piece: str) -> str:
        """Take the next piece of the reply; return the content it releases (maybe "")."""
        if not piece:
            return ""
        self.text += piece
        ready = streamable(self.text, self.syntax)
        released = ready[self._sent :]
        self._sent = max(self._sent, len(ready))
        return released

    def finish(self) -> str:
        """The reply has ended: the rest of its content (maybe "")."""
        content = parse_reply(self.text, self.syntax, self.schemas).content
        rest = content[self._sent :]
        self._sent = len(content)
        return rest
