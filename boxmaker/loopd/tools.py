"""The tools the model sees, and the texts loopd gives it for what brokerd decided.

No I/O. The model is offered three core tools, always: `clock`, `find_tool` and
`call_tool`. `find_tool` finds the tools brokerd decides on (the rows of the tool
table, `core.grants.tools`: the sandbox tools, and the memory tools brokerd hands to
memoryd), with their argument schemas; `call_tool` asks brokerd to run one. A
denial comes back to the model as an ordinary tool result in plain words (class
public, trusted; the deny-reason table's `model_text`), so the model can explain
it and the turn goes on.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.tools import TOOLS
from boxmaker.core.model.tool_calls import CallSyntax, SyntaxRow, row_of

CORE_TOOLS = ("clock", "find_tool", "call_tool")

# The three core tools as a template's `tools` (the OpenAI function form every
# chat template that writes a tools block reads); their `parameters` also type
# the values of a call written in the XML syntax
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "clock",
            "description": "Tell the current time (UTC).",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "find_tool",
            "description": "List the tools call_tool can run, with their arguments.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "words to look for"}},
                "required": [],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "call_tool",
            "description": "Run one of the tools find_tool lists. The owner's grants decide:"
            " the call may be denied, or wait for the owner's approval.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the tool's name"},
                    "arguments": {"type": "object", "description": "the tool's arguments"},
                },
                "required": ["name", "arguments"],
            },
        },
    },
]
_CORE_PARAMETERS: dict[str, dict[str, Any]] = {
    t["function"]["name"]: t["function"]["parameters"] for t in TOOL_SCHEMAS
}


class _CallSchemas(Mapping[str, dict[str, Any]]):
    """The JSON-schema `parameters` of every tool the model may call by name, which read
    its calls (the values of an xml call are typed and told apart by them): the core
    three, and the tool table's rows (`core.grants.tools`), read each time, which a model may
    call directly."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name in _CORE_PARAMETERS:
            return _CORE_PARAMETERS[name]
        row = TOOLS[name]
        return {
            "type": "object",
            "properties": {f.name: {"type": f.check.json_type} for f in row.fields},
            "required": [f.name for f in row.fields if f.required],
        }

    def __iter__(self) -> Iterator[str]:
        yield from _CORE_PARAMETERS
        yield from (name for name in TOOLS if name not in _CORE_PARAMETERS)

    def __len__(self) -> int:
        return sum(1 for _ in self)


SCHEMAS: Mapping[str, dict[str, Any]] = _CallSchemas()


class _BrokerTools(Mapping[str, dict[str, Any]]):
    """The tools brokerd decides on, as `find_tool` shows them, read from the tool table
    (`core.grants.tools`) each time: a name's description, its arguments' descriptions, and
    which of them are required."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        row = TOOLS[name]
        return {
            "description": row.description,
            "arguments": {f.name: f.description for f in row.fields},
            "required": [f.name for f in row.fields if f.required],
        }

    def __iter__(self) -> Iterator[str]:
        return iter(TOOLS)

    def __len__(self) -> int:
        return len(TOOLS)


BROKER_TOOLS: Mapping[str, dict[str, Any]] = _BrokerTools()


def denial_text(reason: DenyReason, detail: str | None) -> str:
    """What the model reads for a denial (the reason's `model_text`); invalid_arguments
    carries the parser's detail."""
    text = reason.model_text
    if reason is DenyReason.INVALID_ARGUMENTS and detail:
        return f"{text[:-1]}: {detail}"
    return text


def find_tools(query: str) -> str:
    """The broker tools matching `query` (all of them for an empty one), as JSON text."""
    words = query.lower().split()
    found = [
        {"name": name, **spec}
        for name, spec in BROKER_TOOLS.items()
        if not words or any(w in name or w in spec["description"].lower() for w in words)
    ]
    if not found:
        found = [{"name": name, **spec} for name, spec in BROKER_TOOLS.items()]
    return orjson.dumps(found).decode()


def system_prompt(syntax: CallSyntax | SyntaxRow, prompt_teaches_syntax: bool = False) -> str:
    """How the model is told to use its tools: the call syntax of its own dialect (its
    row's teaching example), and only that one, unless its prompt (the template's tools
    block) already teaches it."""
    how = "" if prompt_teaches_syntax else f"To call a tool, {row_of(syntax).taught}\n"
    return (
        "You are a helpful assistant working for your owner on their own machine.\n"
        "You have three tools. clock (no arguments) tells the current time. "
        'find_tool {"query": "..."} lists the tools you can call and their arguments. '
        'call_tool {"name": "...", "arguments": {...}} runs one of them.\n'
        "Every call_tool is decided by your owner's grants: it may be denied, or wait for "
        "the owner's approval. When a call is denied, tell the owner why in plain words.\n"
        + how
        + "When you do not need a tool, just answer."
    )
