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
   opener (`call_openers`) and runs to the first closer after it (its row's),
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
from collections.abc import Callable, Mapping
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
    "SYNTAXES",
    "WHOLE_REPLY",
    "BadToolCall",
    "CallSyntax",
    "Reply",
    "SyntaxRow",
    "ToolCall",
    "call_openers",
    "parse_reply",
    "row_of",
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


@dataclass(frozen=True, slots=True)
class Reply:
    content: str  # what the model said outside its tool calls
    calls: tuple[ToolCall | BadToolCall, ...]


_PATH = "/home/owner/notes/todo.md"  # the path of every row's teaching example
_INNER_CALL = {"name": "read_file", "arguments": {"path": _PATH}}
_JSON_CALL = json.dumps({"name": "call_tool", "arguments": _INNER_CALL})

SpanReader = Callable[[str, bool, Schemas | None], list[Call]]


@dataclass(frozen=True, slots=True)
class SyntaxRow:
    """Everything about one call syntax, stated once: reading (`parse_reply`), holding
    calls back while the reply streams (`core.model.reply_stream`), the markers the
    model's text must show (`syntax_markers`) and teaching it (`loopd.tools`) all read
    the row. `SYNTAXES` has one per `CallSyntax`; a row made elsewhere (a test's) works
    wherever a `CallSyntax` is taken.

    A span syntax has one opener and its closer (None: the call runs to the end of the
    reply) and reads each span's body (`read_span`, told whether the span was closed;
    unless `reads_unclosed`, an unclosed span is a BadToolCall saying so). A syntax that
    finds its own calls in the whole reply has `read_reply` (xml: a value may hold the
    closer). A whole-reply syntax has the argument `fields` its calls may have, and may
    allow a `prefix` marker before the call or a ```json fence around it."""

    name: str
    openers: tuple[str, ...]
    example: str  # call_tool reading a file, written as a model of this syntax writes it
    closer: str | None = None
    inner: tuple[str, ...] = ()  # every other marker its calls are written with
    read_span: SpanReader | None = None
    reads_unclosed: bool = False
    read_reply: Callable[[str, Schemas | None], Reply] | None = None
    fields: tuple[str, ...] = ()
    prefix: str | None = None
    fenced: bool = False

    @property
    def whole_reply(self) -> bool:
        return bool(self.fields)

    @property
    def taught(self) -> str:
        """How a system prompt shows it, after "To call a tool, "."""
        if self.whole_reply:
            return f"reply with only a JSON object, for example: {self.example}"
        return f"write {self.example}"


def _json_span(body: str, closed: bool, schemas: Schemas | None) -> list[Call]:
    return [read_json_call(body.strip())]


def _read_xml(text: str, schemas: Schemas | None) -> Reply:
    read = read_xml_reply(text, schemas)
    return Reply(content=read.content.strip(), calls=read.calls)


_DS_CALL = f"{DS_CALL_BEGIN}function{DS_SEP}call_tool\n```json\n{json.dumps(_INNER_CALL)}\n```"
_GEMMA_CALL = (
    f"call:call_tool{{name:{GEMMA_QUOTE}read_file{GEMMA_QUOTE},"
    f"arguments:{{path:{GEMMA_QUOTE}{_PATH}{GEMMA_QUOTE}}}}}"
)

SYNTAXES: Mapping[CallSyntax, SyntaxRow] = {
    CallSyntax.TAGGED_JSON: SyntaxRow(
        "tagged_json",
        (OPEN,),
        f"{OPEN}{_JSON_CALL}{CLOSE}",
        closer=CLOSE,
        read_span=_json_span,
        reads_unclosed=True,  # what was written is read, as it always has been
    ),
    CallSyntax.XML: SyntaxRow(
        "xml",
        (OPEN,),
        f"{OPEN}\n<function=call_tool>\n<parameter=name>\nread_file\n</parameter>\n"
        f"<parameter=arguments>\n{json.dumps(_INNER_CALL['arguments'])}\n</parameter>\n"
        f"</function>\n{CLOSE}",
        closer=CLOSE,
        read_reply=_read_xml,
    ),
    CallSyntax.LLAMA3_JSON: SyntaxRow(
        "llama3_json",
        (PYTHON_TAG, "{"),
        json.dumps({"name": "call_tool", "parameters": _INNER_CALL}),
        fields=("parameters", "arguments"),
        prefix=PYTHON_TAG,
    ),
    CallSyntax.MISTRAL: SyntaxRow(
        "mistral",
        (TOOL_CALLS,),
        f"{TOOL_CALLS}[{_JSON_CALL}]",
        inner=(ARGS, CALL_ID),
        read_span=lambda body, closed, schemas: read_mistral_calls(body),
        reads_unclosed=True,  # it runs to the end of the reply
    ),
    CallSyntax.DEEPSEEK_R1: SyntaxRow(
        "deepseek_r1",
        (DS_OPEN,),
        f"{DS_OPEN}{_DS_CALL}{DS_CALL_END}{DS_CLOSE}",
        closer=DS_CLOSE,
        inner=(DS_CALL_BEGIN, DS_CALL_END, DS_SEP),
        read_span=lambda body, closed, schemas: read_deepseek_calls(body, closed),
        reads_unclosed=True,  # it says which part was left open
    ),
    CallSyntax.GEMMA4: SyntaxRow(
        "gemma4",
        (GEMMA_OPEN,),
        f"{GEMMA_OPEN}{_GEMMA_CALL}{GEMMA_CLOSE}",
        closer=GEMMA_CLOSE,
        inner=(GEMMA_QUOTE,),
        read_span=lambda body, closed, schemas: [read_gemma_call(body, schemas)],
    ),
    CallSyntax.PHI4: SyntaxRow(
        "phi4",
        (PHI_OPEN,),
        f"{PHI_OPEN}{_JSON_CALL}{PHI_CLOSE}",
        closer=PHI_CLOSE,
        read_span=_json_span,
    ),
    CallSyntax.BARE_JSON: SyntaxRow(
        "bare_json", ("{", "```"), _JSON_CALL, fields=("arguments",), fenced=True
    ),
}
CLOSERS: Mapping[str, str | None] = {
    row.openers[0]: row.closer for row in SYNTAXES.values() if not row.whole_reply
}
WHOLE_REPLY = frozenset(syntax for syntax, row in SYNTAXES.items() if row.whole_reply)


def row_of(syntax: CallSyntax | SyntaxRow) -> SyntaxRow:
    """`syntax`'s row: the row itself, or the table's."""
    return syntax if isinstance(syntax, SyntaxRow) else SYNTAXES[syntax]


def syntax_markers(syntax: CallSyntax | SyntaxRow | None) -> tuple[str, ...]:
    """Every marker-like text a call in `syntax` is written with (openers, closers and
    inner marks; never a bare `{` or fence): what the model's text must show, where
    the vocabulary has them as special tokens that would otherwise render as nothing."""
    marks = [o for o in call_openers(syntax) if o[:1] in "<["]
    if syntax is not None:
        row = row_of(syntax)
        marks += [row.closer] if row.closer else []
        marks += [*row.inner, *([row.prefix] if row.prefix else [])]
    else:
        marks += [CLOSE]
    return tuple(dict.fromkeys(marks))


def call_openers(syntax: CallSyntax | SyntaxRow | None) -> tuple[str, ...]:
    """The texts that open a call in `syntax` (for a whole-reply syntax: at the reply's
    start, after whitespace); `None` is tagged_json's and bare_json's together."""
    if syntax is None:
        return SYNTAXES[CallSyntax.TAGGED_JSON].openers + SYNTAXES[CallSyntax.BARE_JSON].openers
    return row_of(syntax).openers


def _read_span(row: SyntaxRow, body: str, closed: bool, schemas: Schemas | None) -> list[Call]:
    """The calls in one span's `body` (what lies between its opener and closer)."""
    if not closed and not row.reads_unclosed:
        return [BadToolCall(f"the tool call was not closed with {row.closer}")]
    assert row.read_span is not None
    return row.read_span(body, closed, schemas)


def _cut_spans(text: str, row: SyntaxRow, schemas: Schemas | None) -> Reply:
    """Rule 1: every call from its opener to its closer (or the end) is cut out."""
    (opener,) = row.openers
    closer = row.closer
    parts: list[str] = []
    calls: list[Call] = []
    at = 0
    while (start := text.find(opener, at)) >= 0:
        parts.append(text[at:start])
        body_at = start + len(opener)
        if closer is None or (end := text.find(closer, body_at)) < 0:
            calls.extend(_read_span(row, text[body_at:], False, schemas))
            at = len(text)
            break
        calls.extend(_read_span(row, text[body_at:end], True, schemas))
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


def _whole_reply(text: str, row: SyntaxRow) -> Reply:
    """Rule 2: the reply is calls, or it is all content."""
    stripped = text.strip()
    candidate, tagged = stripped, False
    if row.prefix is not None:
        tagged = stripped.startswith(row.prefix)
        candidate = stripped.removeprefix(row.prefix).strip()
    if row.fenced and (fenced := FENCE.match(candidate)):
        candidate = fenced.group(1).strip()
    if tagged or _keys_say_call(candidate, row.fields):
        return Reply(content="", calls=tuple(read_json_calls(candidate, row.fields)))
    return Reply(content=stripped, calls=())


def parse_reply(
    text: str,
    syntax: CallSyntax | SyntaxRow | None = None,
    schemas: Mapping[str, Mapping[str, Any]] | None = None,
) -> Reply:
    """The content and tool calls in `text`, in the order the model wrote them.

    `schemas` maps a tool's name to its JSON-schema `parameters`, which type the
    values of the xml and gemma4 syntaxes (see `call_syntaxes`)."""
    if syntax is None:
        syntax = CallSyntax.TAGGED_JSON if OPEN in text else CallSyntax.BARE_JSON
    row = row_of(syntax)
    if row.whole_reply:
        return _whole_reply(text, row)
    if row.read_reply is not None:
        return row.read_reply(text, schemas)
    return _cut_spans(text, row, schemas)
