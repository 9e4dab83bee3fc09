"""Reading tool calls out of what the model wrote. Pure; no I/O.

Two forms are understood:

    tagged   <tool_call>{"name": "...", "arguments": {...}}</tool_call>, any number,
             as Qwen- and Hermes-style templates ask for;
    bare     the whole reply is one JSON object {"name": ..., "arguments": {...}}
             (optionally in a ```json fence), for templates with no tool tags,
             such as Gemma's.

Anything else is plain content. A tool call that cannot be read is not dropped:
it becomes an error the turn loop hands back to the model as a tool result, so
the model can see what was wrong and try again.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_TAGGED = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*?)\n?```\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # the arguments object as compact JSON text


@dataclass(frozen=True, slots=True)
class BadToolCall:
    problem: str  # one line, for the model


@dataclass(frozen=True, slots=True)
class Reply:
    content: str  # what the model said outside its tool calls
    calls: tuple[ToolCall | BadToolCall, ...]


class _DuplicateError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateError(f"duplicate field `{key}`")
        seen[key] = value
    return seen


def _read_call(text: str) -> ToolCall | BadToolCall:
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except _DuplicateError as exc:
        return BadToolCall(f"the tool call has a {exc}")
    except (ValueError, RecursionError) as exc:
        return BadToolCall(f"the tool call is not valid JSON: {exc}")
    if not isinstance(obj, dict):
        return BadToolCall("a tool call must be a JSON object with `name` and `arguments`")
    unknown = sorted(set(obj) - {"name", "arguments"})
    if unknown:
        return BadToolCall(
            f"unknown field `{unknown[0]}` in the tool call, expected `name`, `arguments`"
        )
    name, arguments = obj.get("name"), obj.get("arguments", {})
    if not isinstance(name, str) or not name:
        return BadToolCall("the tool call needs `name`, a string")
    if isinstance(arguments, str):  # some models send the arguments as JSON text
        try:
            arguments = json.loads(arguments, object_pairs_hook=_no_duplicates)
        except (ValueError, RecursionError) as exc:
            return BadToolCall(f"the tool call's `arguments` text is not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return BadToolCall("the tool call's `arguments` must be a JSON object")
    return ToolCall(
        name=name, arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    )


def parse_reply(text: str) -> Reply:
    """The content and tool calls in `text`, in the order the model wrote them."""
    if OPEN in text:
        calls = tuple(_read_call(m.group(1).strip()) for m in _TAGGED.finditer(text))
        return Reply(content=_TAGGED.sub("", text).strip(), calls=calls)
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    candidate = fenced.group(1).strip() if fenced else stripped
    if candidate.startswith("{") and candidate.endswith("}") and '"name"' in candidate:
        return Reply(content="", calls=(_read_call(candidate),))
    return Reply(content=stripped, calls=())
