"""loopd's own prompt path for the embedded model, used to render training conversations.

No I/O. The dialect is the one loopd chooses for the embedded default
(`boxmaker.loopd.dialects.choose_dialect` with the default settings and a base
model with no chat template: the hand-written gemma format), the system text is
`boxmaker.loopd.tools.system_prompt` for that dialect, and every text that did not
come from the model is neutralised with the dialect's tags, as the turn loop does
for a model with no marker list of its own (the real Gemma vocabulary lists more).

A conversation is rendered to segments: each a text, whether it is scaffolding
(tokenize with special parsing) and whether the model wrote it (loss on it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from boxmaker.core.model.chat_format import Role, Segment, Text, Turn
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.sanitize.tags import neutralise
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.tools import system_prompt


class _BaseGemma:
    """The embedded default as `choose_dialect` sees it: no chat template, and a
    vocabulary where each of the format's markers is one token."""

    chat_template: str | None = None

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        if special and text.startswith("<") and text.endswith(">"):
            return [0]
        return [ord(c) for c in text]


@dataclass(frozen=True)
class Prompting:
    dialect: Dialect
    system: str
    tags: tuple[str, ...]


@cache
def prompting() -> Prompting:
    """The embedded model's dialect, system text and neutralising tags, as loopd has them."""
    dialect, _why = choose_dialect(LoopdConfig(), _BaseGemma())  # type: ignore[arg-type]
    tags = tuple(dict.fromkeys((*dialect.markers, *dialect.marked_openers)))
    return Prompting(dialect, system_prompt(dialect.teach, dialect.prompt_teaches_syntax), tags)


def neutralised(text: str) -> str:
    """`text` as the turn loop logs a user turn or a tool result."""
    return neutralise(text, prompting().tags).text


@dataclass(frozen=True)
class Piece:
    text: str
    special: bool
    model: bool

    def as_json(self) -> dict[str, object]:
        return {"text": self.text, "special": self.special, "model": self.model}


def _text(segment: Segment) -> Text:
    if not isinstance(segment, Text):
        raise TypeError("a training conversation holds no token ids")
    return segment


def render(turns: Sequence[Turn]) -> list[Piece]:
    """The conversation's segments up to the end of its last model turn, the model's own
    texts and their closing marker flagged; each prefix before a model turn is exactly the
    prompt loopd renders at that point."""
    p = prompting()
    full = [_text(s) for s in p.dialect.render(p.system, turns, None)]
    own: set[int] = set()
    last = 0
    for i, turn in enumerate(turns):
        if turn.role is not Role.MODEL:
            continue
        before = [_text(s) for s in p.dialect.render(p.system, turns[:i], None)]
        if full[: len(before)] != before or full[len(before)].text != turn.text:
            raise AssertionError("the prompt is not a prefix of the conversation")
        close = full[len(before) + 1]
        if not close.special:
            raise AssertionError("a model turn is not closed by a marker")
        own |= {len(before), len(before) + 1}
        last = len(before) + 2
    return [Piece(s.text, s.special, i in own) for i, s in enumerate(full[:last])]
