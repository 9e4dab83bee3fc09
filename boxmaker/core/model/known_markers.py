"""The markers boxmaker knows by their text, stated once. Pure; no I/O.

Each row is a marker a model family writes, and what it means to loopd:

    stop       it ends a reply, besides the end a template's own scaffolding shows
               (a dialect of the model's own template stops at each the vocabulary
               has as one token: `core.model.dialect.from_template`)
    reasoning  it opens a reasoning block, `closes` naming the marker that ends it
               (`core.model.template_prompt` finds a template's pair by its closer)

The hand-written formats' own stops (`core.model.chat_format`) are theirs. The marker
shapes (`core.model.marker_shapes`) take the names of these markers as marker names,
so a vocabulary's token spelling one is on loopd's marker list (`loopd.markers`) and
the marker self-test (`loopd.dialects.self_test`) holds it to one token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Use(StrEnum):
    STOP = "stop"
    REASONING = "reasoning"


@dataclass(frozen=True, slots=True)
class KnownMarker:
    text: str
    use: Use
    who: str  # the families that write it, and when
    closes: str | None = None  # a reasoning opener's closer


KNOWN: tuple[KnownMarker, ...] = (
    KnownMarker("<|eom_id|>", Use.STOP, "Llama 3.1 to 3.3: a reply that calls a tool"),
    KnownMarker("<|endoftext|>", Use.STOP, "Qwen, Phi: the end of a text"),
    KnownMarker("<|im_end|>", Use.STOP, "ChatML (Qwen, Hermes): the end of a turn"),
    KnownMarker("<|eot_id|>", Use.STOP, "Llama 3: the end of a turn"),
    KnownMarker("<end_of_turn>", Use.STOP, "Gemma 2 and 3: the end of a turn"),
    KnownMarker("<|tool_response>", Use.STOP, "Gemma 4: a reply that calls a tool"),
    KnownMarker("<think>", Use.REASONING, "Qwen3, QwQ, DeepSeek-R1, Qwen3.5", "</think>"),
    KnownMarker("<|channel>", Use.REASONING, "Gemma 4's thought channel", "<channel|>"),
)

STOPS: tuple[str, ...] = tuple(m.text for m in KNOWN if m.use is Use.STOP)
REASONING_PAIRS: tuple[tuple[str, str], ...] = tuple(
    (m.text, m.closes) for m in KNOWN if m.use is Use.REASONING and m.closes is not None
)
_NAMED = re.compile(r"</?([A-Za-z][A-Za-z0-9_]*)>")


def marker_names() -> frozenset[str]:
    """The names of the known markers written as a bare angle-bracketed name (`think`,
    `end_of_turn`); a barred one (`<|im_end|>`) has a marker's shape by its bars."""
    texts = [*(m.text for m in KNOWN), *(m.closes for m in KNOWN if m.closes)]
    return frozenset(found.group(1) for t in texts if (found := _NAMED.fullmatch(t)))
