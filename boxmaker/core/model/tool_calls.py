"""Reading tool calls out of what the model wrote. Pure; no I/O.

Each model family writes its calls in the syntax its chat template teaches it
(`CallSyntax`); the caller names the one in use:

    tagged_json  <tool_call>{"name": N, "arguments": {...}}</tool_call>, any number
                 (Hermes, Qwen2.5, Qwen3, QwQ);
    xml          <tool_call><function=N><parameter=K>V</parameter>...</function>
                 </tool_call>, any number (Qwen3-Coder, Qwen3.5);
    llama3_json  the whole reply, after an optional <|python_tag|>, is
                 {"name": N, "parameters": {...}}, one or more, separated by `;`
                 or newlines (Llama 3.1 to 3.3);
    mistral      [TOOL_CALLS] then [{"name": N, "arguments": {...}}, ...] (Nemo),
                 or N[ARGS]{...}, repeated (Small 3.2), to the end of the reply;
    deepseek_r1  <｜tool▁calls▁begin｜> ... <｜tool▁calls▁end｜> around
                 <｜tool▁call▁begin｜>function<｜tool▁sep｜>N + a ```json fence
                 + <｜tool▁call▁end｜>, any number (the R1 distills);
    gemma4       <|tool_call>call:N{k:v,...}<tool_call|>, any number (Gemma 4);
    phi4         <|tool_call|>{"name": N, "arguments": {...}}<|/tool_call|>, any
                 number (Phi-4-mini);
    bare_json    the whole reply is {"name": N, "arguments": {...}}, one or more,
                 optionally in a ```json fence (Gemma 2 and 3, and templates
                 with no tool syntax).

No syntax (`None`, the default) reads tagged_json when the reply holds a
`<tool_call>`, else bare_json. How a reply is cut, in this order:

1. **Spans.** In tagged_json, deepseek_r1, gemma4 and phi4 a call opens at its
   opener (`call_openers`) and runs to the first closer after it (`CLOSERS`),
   or to the end of the reply when none follows; in mistral it runs to the end
   of the reply. In xml a value may hold the closers as text: `core.model.xml_calls`
   finds where each call ends (and reads a call written without its
   `<tool_call>` where one could stand). The content is the reply without its calls.
2. **Whole replies.** In llama3_json and bare_json the reply, without its edge
   whitespace (and a ```json fence, bare_json; a leading <|python_tag|>,
   llama3_json), is calls when it starts with <|python_tag|> (llama3_json), or
   when its top-level keys say so: it starts with an object, ends with `}`, and
   that object has `name` and its arguments field (`parameters` or `arguments`,
   llama3_json; `arguments`, bare_json) among its own keys; or, where it is not
   JSON, it starts with `{"name":` (a call cut short or mistyped, read as a
   problem). A JSON answer whose `name` is nested, or that has no arguments
   field, is content. The content is then empty; otherwise the whole reply is
   content.
3. **Edges.** The content is stripped of whitespace at its ends.
4. **Never dropped.** A call that cannot be read (see `call_syntaxes`, which
   reads each one) becomes a `BadToolCall` the turn loop hands back to the model
   as its result, so the model sees what was wrong and tries again. A call left
   open at the end of the reply is one saying it was not closed, except in
   tagged_json, which reads what was written, as it always has.
"""  # noqa: RUF002 (DeepSeek's markers are full-width)

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from boxmaker.core.model.call_syntaxes import (
    ARGS,
    CALL_ID,
    DS_CALL_BEGIN,
    DS_CALL_END,
    DS_SEP,
    FENCE,
    GEMMA_QUOTE,
    TOOL_CALLS,
    BadToolCall,
    Call,
    Schemas,
    ToolCall,
    read_deepseek_calls,
    read_gemma_call,
    read_json_call,
    read_json_calls,
    read_mistral_calls,
)
from boxmaker.core.model.xml_calls import read_xml_reply

__all__ = [
    "CLOSE",
    "CLOSERS",
    "OPEN",
    "PYTHON_TAG",
    "WHOLE_REPLY",
    "BadToolCall",
    "CallSyntax",
    "Reply",
    "ToolCall",
    "call_openers",
    "parse_reply",
    "syntax_markers",
]


class CallSyntax(StrEnum):
    """How a model family writes its tool calls. Values are never renamed."""

    TAGGED_JSON = "tagged_json"
    XML = "xml"
    LLAMA3_JSON = "llama3_json"
    MISTRAL = "mistral"
    DEEPSEEK_R1 = "deepseek_r1"
    GEMMA4 = "gemma4"
    PHI4 = "phi4"
    BARE_JSON = "bare_json"


OPEN, CLOSE = "<tool_call>", "</tool_call>"
DS_OPEN, DS_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001
GEMMA_OPEN, GEMMA_CLOSE = "<|tool_call>", "<tool_call|>"
PYTHON_TAG = "<|python_tag|>"
PHI_OPEN, PHI_CLOSE = "<|tool_call|>", "<|/tool_call|>"

# The one table: what opens a call in each syntax. A span syntax's opener has its
# closer in CLOSERS (None: the call runs to the end of the reply); a whole-reply
# syntax's openers are what such a reply may start with.
_OPENERS: dict[CallSyntax, tuple[str, ...]] = {
    CallSyntax.TAGGED_JSON: (OPEN,),
    CallSyntax.XML: (OPEN,),
    CallSyntax.LLAMA3_JSON: (PYTHON_TAG, "{"),
    CallSyntax.MISTRAL: (TOOL_CALLS,),
    CallSyntax.DEEPSEEK_R1: (DS_OPEN,),
    CallSyntax.GEMMA4: (GEMMA_OPEN,),
    CallSyntax.PHI4: (PHI_OPEN,),
    CallSyntax.BARE_JSON: ("{", "```"),
}
CLOSERS: Mapping[str, str | None] = {
    OPEN: CLOSE,
    TOOL_CALLS: None,
    DS_OPEN: DS_CLOSE,
    GEMMA_OPEN: GEMMA_CLOSE,
    PHI_OPEN: PHI_CLOSE,
}
WHOLE_REPLY = frozenset({CallSyntax.LLAMA3_JSON, CallSyntax.BARE_JSON})


# Every marker a syntax writes besides its openers and closers
_INNER: dict[CallSyntax, tuple[str, ...]] = {
    CallSyntax.MISTRAL: (ARGS, CALL_ID),
    CallSyntax.DEEPSEEK_R1: (DS_CALL_BEGIN, DS_CALL_END, DS_SEP),
    CallSyntax.GEMMA4: (GEMMA_QUOTE,),
}


def syntax_markers(syntax: CallSyntax | None) -> tuple[str, ...]:
    """Every marker-like text a call in `syntax` is written with (openers, closers and
    inner marks; never a bare `{` or fence): what the model's text must show, where
    the vocabulary has them as special tokens that would otherwise render as nothing."""
    marks = [o for o in call_openers(syntax) if o[:1] in "<["]
    marks += [c for o in marks if (c := CLOSERS.get(o))]
    marks += _INNER.get(syntax, ()) if syntax is not None else ()
    if syntax is CallSyntax.LLAMA3_JSON:
        marks.append(PYTHON_TAG)
    return tuple(dict.fromkeys(marks))


def call_openers(syntax: CallSyntax | None) -> tuple[str, ...]:
    """The texts that open a call in `syntax` (for a whole-reply syntax: at the reply's
    start, after whitespace); `None` is tagged_json's and bare_json's together."""
    if syntax is None:
        return _OPENERS[CallSyntax.TAGGED_JSON] + _OPENERS[CallSyntax.BARE_JSON]
    return _OPENERS[syntax]


@dataclass(frozen=True, slots=True)
class Reply:
    content: str  # what the model said outside its tool calls
    calls: tuple[ToolCall | BadToolCall, ...]


def _read_span(syntax: CallSyntax, body: str, closed: bool, schemas: Schemas | None) -> list[Call]:
    """The calls in one span's `body` (what lies between its opener and closer)."""
    if syntax is CallSyntax.TAGGED_JSON:
        return [read_json_call(body.strip())]
    if syntax is CallSyntax.MISTRAL:
        return read_mistral_calls(body)
    if syntax is CallSyntax.DEEPSEEK_R1:
        return read_deepseek_calls(body, closed)
    if not closed:
        return [BadToolCall(f"the tool call was not closed with {CLOSERS[_OPENERS[syntax][0]]}")]
    if syntax is CallSyntax.PHI4:
        return [read_json_call(body.strip())]
    return [read_gemma_call(body, schemas)]


def _cut_spans(text: str, syntax: CallSyntax, schemas: Schemas | None) -> Reply:
    """Rule 1: every call from its opener to its closer (or the end) is cut out."""
    (opener,) = _OPENERS[syntax]
    closer = CLOSERS[opener]
    parts: list[str] = []
    calls: list[Call] = []
    at = 0
    while (start := text.find(opener, at)) >= 0:
        parts.append(text[at:start])
        body_at = start + len(opener)
        if closer is None or (end := text.find(closer, body_at)) < 0:
            calls.extend(_read_span(syntax, text[body_at:], False, schemas))
            at = len(text)
            break
        calls.extend(_read_span(syntax, text[body_at:end], True, schemas))
        at = end + len(closer)
    parts.append(text[at:])
    return Reply(content="".join(parts).strip(), calls=tuple(calls))


_CALL_START = re.compile(r'\{\s*"name"\s*:')


def _keys_say_call(candidate: str, fields: tuple[str, ...]) -> bool:
    """Rule 2: whether a whole reply's top-level keys make it a call."""
    if not (candidate.startswith("{") and candidate.endswith("}")):
        return False
    try:
        first, _ = json.JSONDecoder().raw_decode(candidate)
    except (ValueError, RecursionError):
        return _CALL_START.match(candidate) is not None
    return isinstance(first, dict) and "name" in first and any(f in first for f in fields)


def _whole_reply(text: str, syntax: CallSyntax) -> Reply:
    """Rule 2: the reply is calls, or it is all content."""
    stripped = text.strip()
    if syntax is CallSyntax.LLAMA3_JSON:
        tagged = stripped.startswith(PYTHON_TAG)
        candidate = stripped.removeprefix(PYTHON_TAG).strip()
        fields: tuple[str, ...] = ("parameters", "arguments")
    else:
        fenced = FENCE.match(stripped)
        tagged = False
        candidate = fenced.group(1).strip() if fenced else stripped
        fields = ("arguments",)
    if tagged or _keys_say_call(candidate, fields):
        return Reply(content="", calls=tuple(read_json_calls(candidate, fields)))
    return Reply(content=stripped, calls=())


def parse_reply(
    text: str,
    syntax: CallSyntax | None = None,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> Reply:
    """The content and tool calls in `text`, in the order the model wrote them.

    `schemas` maps a tool's name to its JSON-schema `parameters`, which type the
    values of the xml and gemma4 syntaxes (see `call_syntaxes`)."""
    if syntax is None:
        syntax = CallSyntax.TAGGED_JSON if OPEN in text else CallSyntax.BARE_JSON
    if syntax in WHOLE_REPLY:
        return _whole_reply(text, syntax)
    if syntax is CallSyntax.XML:
        read = read_xml_reply(text, schemas)
        return Reply(content=read.content.strip(), calls=read.calls)
    return _cut_spans(text, syntax, schemas)
