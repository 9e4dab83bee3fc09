"""Reading one tool call's text, in each native syntax, into a call. Pure; no I/O.

`tool_calls.parse_reply` cuts a reply into its content and its call texts; this
module reads those texts. Whatever is wrong with one becomes a `BadToolCall`
whose one-line problem the model reads as the call's result, so it can try
again: nothing is dropped and nothing raises. The rules, by syntax:

1. **JSON objects** (tagged_json, llama3_json, bare_json, mistral's list): an
   object with `name`, a non-empty string, and its arguments in `arguments`
   (llama3_json: `parameters` or `arguments`, not both), an object or the JSON
   text of one; a missing arguments field is `{}`. Mistral's objects may also
   carry an `id`. Any other field, a repeated key in any object, or text that
   is not JSON is a problem.
2. **Sequences** (llama3_json, bare_json): one or more objects, separated by
   whitespace or `;`, each read by rule 1, in order.
3. **XML** (xml): read from the whole reply by `core.model.xml_calls`, whose rules
   say where a value, a call and its wrapper end when a value holds their markers.
4. **Typing by schema** (xml values, `typed_value`; gemma4's top-level values written as text or
   as a bare word): where the tool's schema gives the property the type object,
   array, integer, number or boolean, the text is read as JSON of that type (`3`,
   `true`); text that is not one is a problem naming the parameter and the type.
   A string property keeps the text as written (gemma4: `n:42` is "42"); a tool
   or property the schemas do not know keeps the value as written. A union (a
   list of types, or `anyOf` / `oneOf`) reads `null` as null where it allows
   it, then the text as the first of its other types it is, strings last; a
   union with no string type refuses text that is none of them.
5. **DeepSeek R1** (deepseek_r1): in the block, any number of
   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>N` + newline + the arguments
   object (in a ```json fence or not) + `<｜tool▁call▁end｜>`, with only
   whitespace between them. A block left open still gives the calls closed in it.
6. **Gemma 4** (gemma4): `call:N{k:v,...}` where a string is wrapped in `<|"|>`,
   numbers, booleans and null are bare, lists are `[...]` and objects `{...}`
   with bare or `<|"|>`-wrapped keys. Any other bare word (which cannot hold
   `{}[],:`) is kept as text.
7. **Mistral** (mistral), after `[TOOL_CALLS]`: a JSON list of rule-1 objects
   (or one object), or `N[ARGS]{...}` (`N[CALL_ID]id[ARGS]{...}` as Mistral
   Small 3.2's template renders its history), repeated after further
   `[TOOL_CALLS]`; anything after the last is a problem. The id a call was
   written with (an object's `id`, or after `[CALL_ID]`) is the call's `id`, as
   written (`core.model.call_ids` decides whether it is kept).
8. **Not closed.** JSON that ends inside a string or a bracket, and a call whose
   syntax has a closer that never came, is a problem saying it was not closed
   (tagged_json alone reads an open call as written, as it always has).
"""  # noqa: RUF002 (DeepSeek's markers are full-width)

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from boxmaker.core.errors import ArgsError

Schemas = Mapping[str, Mapping[str, Any]]  # tool name -> its JSON-schema `parameters`

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
DS_CALL_BEGIN, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"  # noqa: RUF001
DS_SEP = "<｜tool▁sep｜>"  # noqa: RUF001
GEMMA_QUOTE = '<|"|>'
FENCE = re.compile(r"\A```(?:json)?\s*\n(.*?)\n?```\Z", re.DOTALL)
_GEMMA_NAME = re.compile(r"call:([\w.\-]*)")
_GEMMA_QUOTE = re.escape(GEMMA_QUOTE)
_GEMMA_TOKEN = re.compile(  # a text, a mark, a quote left open, or a bare word
    rf"{_GEMMA_QUOTE}(.*?){_GEMMA_QUOTE}|([{{}}\[\],:])|({_GEMMA_QUOTE})"
    rf"|((?:(?!{_GEMMA_QUOTE})[^{{}}\[\],:])+)",
    re.DOTALL,
)
_EXPECTED = {
    "object": "a JSON object",
    "array": "a JSON array",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # the arguments object as compact JSON text
    # the id the model wrote for the call (mistral, rule 7), as written; not part of
    # what the call is, so calls compare without it
    id: str | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class BadToolCall:
    problem: str  # one line, for the model


Call = ToolCall | BadToolCall


class _CallError(ArgsError):
    """What is wrong with a call, raised inside a reader and returned as a BadToolCall."""


def _shown(text: str) -> str:
    """`text` as a problem may quote it: on one line, and short."""
    return " ".join(text[:40].split())


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _CallError(f"the tool call has a duplicate field `{_shown(key)}`")
        seen[key] = value
    return seen


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _unclosed(text: str) -> bool:
    """Whether JSON `text` ends inside a string or an open bracket."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return in_string or depth > 0


def _skip(text: str, at: int, also: str = "") -> int:
    """The first place from `at` in `text` that is not whitespace nor one of `also`."""
    while at < len(text) and (text[at].isspace() or text[at] in also):
        at += 1
    return at


def _loads(text: str, problem: str) -> Any:
    """`text` as JSON; a `_CallError` of `problem` and why if it is not."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, _CallError):
            raise
        raise _CallError(f"{problem}: {exc}") from exc


def _decode(text: str, at: int = 0) -> tuple[Any, int]:
    """The JSON value at `at` in `text` and where it ends; a `_CallError` if there is none."""
    try:
        return _DECODER.raw_decode(text, at)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, _CallError):
            raise
        if _unclosed(text[at:]):
            raise _CallError(f"the tool call was not closed: {exc}") from exc
        raise _CallError(f"the tool call is not valid JSON: {exc}") from exc


def _compact(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _reading(read: Callable[[], tuple[str, dict[str, Any]]]) -> Call:
    """The call `read()` gives, or the problem it raises."""
    try:
        name, arguments = read()
    except _CallError as exc:
        return BadToolCall(str(exc))
    return ToolCall(name=name, arguments=_compact(arguments))


def _arguments_object(value: Any, field: str) -> dict[str, Any]:
    if isinstance(value, str):  # some models send the arguments as JSON text
        value = _loads(value, f"the tool call's `{field}` text is not valid JSON")
    if not isinstance(value, dict):
        raise _CallError(f"the tool call's `{field}` must be a JSON object")
    return value


# --- rules 1 and 2: JSON objects, and sequences of them ----------------------------------


def _object_call(
    obj: Any, fields: tuple[str, ...], extra: tuple[str, ...] = ()
) -> tuple[str, dict[str, Any]]:
    expected = ", ".join(f"`{field}`" for field in ("name", *fields))
    if not isinstance(obj, dict):
        raise _CallError(f"a tool call must be a JSON object with {expected}")
    unknown = sorted(set(obj) - {"name", *fields, *extra})
    if unknown:
        raise _CallError(
            f"unknown field `{_shown(unknown[0])}` in the tool call, expected {expected}"
        )
    given = [field for field in fields if field in obj]
    if len(given) > 1:
        raise _CallError(f"the tool call has both `{given[0]}` and `{given[1]}`")
    field, name = (given or fields)[0], obj.get("name")
    if not isinstance(name, str) or not name:
        raise _CallError("the tool call needs `name`, a string")
    return name, _arguments_object(obj.get(field, {}), field)


def read_json_call(text: str) -> Call:
    """One tagged call: `text` is a single JSON object (rule 1)."""

    def read() -> tuple[str, dict[str, Any]]:
        obj = _loads(text, "the tool call is not valid JSON")
        return _object_call(obj, ("arguments",))

    return _reading(read)


def read_json_calls(text: str, fields: tuple[str, ...]) -> list[Call]:
    """Objects separated by whitespace or `;` (rule 2); a problem ends the reading."""
    calls: list[Call] = []
    at = 0
    while True:
        at = _skip(text, at, ";")
        if at == len(text):
            return calls or [BadToolCall("the tool call is empty")]
        try:
            obj, at = _decode(text, at)
        except _CallError as exc:
            return [*calls, BadToolCall(str(exc))]
        calls.append(_reading(partial(_object_call, obj, fields)))


# --- rule 4: typing by schema ---------------------------------------------


def _types(prop: Any) -> list[str]:
    """The JSON types a property's schema allows: its `type` (a name or a list of them),
    or those of its `anyOf` / `oneOf` alternatives."""
    if not isinstance(prop, Mapping):
        return []
    kind = prop.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [k for k in kind if isinstance(k, str)]
    alternatives = prop.get("anyOf", prop.get("oneOf"))
    if isinstance(alternatives, list):
        return [k for alternative in alternatives for k in _types(alternative)]
    return []


def property_kind(properties: Mapping[str, Any] | None, key: str) -> str | None:
    """The type of parameter `key` (rule 4): one JSON type name, several joined by `|`
    (a union, `null` among them where it is allowed), or None where the schema gives
    none."""
    prop = properties.get(key) if isinstance(properties, Mapping) else None
    kinds = list(dict.fromkeys(_types(prop)))
    return "|".join(kinds) if kinds else None


def _schema_type(schemas: Schemas | None, tool: str, key: str) -> str | None:
    schema = (schemas or {}).get(tool)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return property_kind(properties, key)


def _typed_union(text: str, kinds: list[str], key: str) -> Any:
    """`text` as the first of a union's types it is (strings last, `null` as JSON's)."""
    if "null" in kinds and text.strip() == "null":
        return None
    for kind in kinds:
        if kind in _EXPECTED:
            try:
                return _typed(text, kind, key)
            except _CallError:
                continue
    if "string" in kinds:
        return text
    wanted = " or ".join(_EXPECTED[k] for k in kinds if k in _EXPECTED)
    if not wanted:
        return text
    raise _CallError(f"the tool call's parameter `{_shown(key)}` must be {wanted}")


def _typed(text: str, kind: str | None, key: str) -> Any:
    """`text`, the value of parameter `key`, as the schema's type `kind` (rule 4)."""
    if kind is not None and "|" in kind:
        return _typed_union(text, kind.split("|"), key)
    if kind not in _EXPECTED:
        return text
    problem = f"the tool call's parameter `{_shown(key)}` must be {_EXPECTED[kind]}"
    plain = text.strip()
    if kind == "boolean" and plain.lower() in ("true", "false"):
        return plain.lower() == "true"
    value = _loads(plain, problem)
    fits = {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }
    if not fits[kind]:
        raise _CallError(f"{problem}, not `{_shown(plain)}`")
    return value


def typed_value(text: str, kind: str | None, key: str) -> Any:
    """`text`, the value of parameter `key`, as the schema's type `kind` (rule 4); an
    `ArgsError` (a ValueError) naming the parameter and the type when it is not one."""
    return _typed(text, kind, key)


# --- rule 5: DeepSeek R1 ------------------------------------------------------------------


def _deepseek_call(text: str) -> tuple[str, dict[str, Any]]:
    kind, sep, rest = text.partition(DS_SEP)
    if not sep:
        raise _CallError(f"the tool call needs `function{DS_SEP}NAME`")
    if kind.strip() != "function":
        raise _CallError(f"unknown tool call type `{_shown(kind)}`, expected `function`")
    name, _, arguments = rest.partition("\n")
    if not name.strip():
        raise _CallError("the tool call needs `name`, a string")
    arguments = arguments.strip()
    fenced = FENCE.match(arguments)
    if fenced:
        arguments = fenced.group(1).strip()
    value, end = _decode(arguments)
    if arguments[end:].strip():
        raise _CallError("the tool call has text after its arguments")
    return name.strip(), _arguments_object(value, "arguments")


def read_deepseek_calls(body: str, closed: bool) -> list[Call]:
    """The calls in one tool-calls block, `closed` or running to the reply's end (rule 5)."""
    calls: list[Call] = []
    at = 0
    while (at := _skip(body, at)) < len(body):
        if not body.startswith(DS_CALL_BEGIN, at):
            problem = f"unexpected text `{_shown(body[at:])}` in the tool calls"
            return [*calls, BadToolCall(f"{problem}, expected {DS_CALL_BEGIN}")]
        start = at + len(DS_CALL_BEGIN)
        end = body.find(DS_CALL_END, start)
        if end < 0:
            return [*calls, BadToolCall(f"the tool call was not closed with {DS_CALL_END}")]
        calls.append(_reading(partial(_deepseek_call, body[start:end])))
        at = end + len(DS_CALL_END)
    if calls:
        return calls
    return [BadToolCall("the tool calls were not closed" if not closed else "no tool call")]


# --- rule 6: Gemma 4 ----------------------------------------------------------------------


def _gemma_word(word: str) -> str:
    """A bare word as JSON: a number, boolean or null as it is, anything else as text."""
    try:
        literal = json.loads(word)
    except ValueError:
        return json.dumps(word, ensure_ascii=False)
    return word if not isinstance(literal, str) else json.dumps(word, ensure_ascii=False)


def _gemma_json(text: str) -> tuple[str, dict[str, str]]:
    """Gemma 4's `{k:v,...}` as JSON text, and the text each top-level value was written
    as, where it was text or a bare word."""
    out: list[str] = []
    written: dict[str, str] = {}
    open_brackets: list[str] = []
    expect_key, key = False, ""
    for match in _GEMMA_TOKEN.finditer(text):
        quoted, mark, left_open, bare = match.groups()
        if left_open:
            raise _CallError(f"a {GEMMA_QUOTE} text in the tool call is not closed")
        if mark:
            if mark in "{[":
                open_brackets.append(mark)
            elif mark in "}]" and open_brackets:
                open_brackets.pop()
            expect_key = open_brackets[-1:] == ["{"] and mark in "{,"
            out.append(mark)
            continue
        word = quoted if quoted is not None else bare.strip()
        if quoted is None and not word:
            continue
        if expect_key:
            key = word if len(open_brackets) == 1 else key
            expect_key = False
            out.append(json.dumps(word, ensure_ascii=False))
            continue
        if len(open_brackets) == 1:
            written[key] = word
        out.append(_gemma_word(word) if quoted is None else json.dumps(word, ensure_ascii=False))
    return "".join(out), written


def read_gemma_call(body: str, schemas: Schemas | None) -> Call:
    """The inside of a closed `<|tool_call>` (rules 4 and 6)."""

    def read() -> tuple[str, dict[str, Any]]:
        text = body.strip()
        match = _GEMMA_NAME.match(text)
        if match is None:
            raise _CallError("the tool call must start with `call:NAME{`")
        name = match.group(1)
        if not name:
            raise _CallError("the tool call needs a name after `call:`")
        if not text.startswith("{", match.end()):
            raise _CallError("the tool call's arguments must be an object `{...}` after its name")
        translated, written = _gemma_json(text[match.end() :])
        try:
            arguments, end = _DECODER.raw_decode(translated)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, _CallError):
                raise
            if _unclosed(translated):
                raise _CallError("the tool call's arguments are not closed") from exc
            raise _CallError("the tool call's arguments are not `{name:value,...}`") from exc
        if translated[end:].strip():
            raise _CallError("the tool call has text after its arguments")
        for key, word in written.items():
            kind = _schema_type(schemas, name, key)
            if kind is not None and (kind == "string" or kind in _EXPECTED or "|" in kind):
                # else it keeps the form it was written in
                arguments[key] = _typed(word, kind, key)
        return name, arguments

    return _reading(read)


# --- rule 7: Mistral ----------------------------------------------------------------------


def _mistral_named(text: str, at: int) -> tuple[Call, int]:
    """`N[ARGS]{...}` (or `N[CALL_ID]id[ARGS]{...}`) at `at`, and where it ends."""
    args_at = text.find(ARGS, at)
    next_call = text.find(TOOL_CALLS, at)
    if args_at < 0 or 0 <= next_call < args_at:
        raise _CallError(
            f"the tool call needs `NAME{ARGS}{{...}}` or a JSON list after {TOOL_CALLS}"
        )
    name, marked, written_id = text[at:args_at].partition(CALL_ID)
    if not name.strip():
        raise _CallError("the tool call needs `name`, a string")
    value, end = _decode(text, _skip(text, args_at + len(ARGS)))
    arguments = _compact(_arguments_object(value, "arguments"))
    return ToolCall(name.strip(), arguments, written_id.strip() if marked else None), end


def read_mistral_calls(text: str) -> list[Call]:
    """Everything after the first `[TOOL_CALLS]` of a reply (rule 7)."""
    calls: list[Call] = []
    at = 0
    while True:
        at = _skip(text, at)
        try:
            if at == len(text):
                raise _CallError(f"the tool call after {TOOL_CALLS} is empty")
            if text[at] in "[{" and not text.startswith((ARGS, CALL_ID), at):
                value, at = _decode(text, at)
                items = value if isinstance(value, list) else [value]
                if not items:
                    raise _CallError(f"the tool call list after {TOOL_CALLS} is empty")
                for item in items:
                    call = _reading(partial(_object_call, item, ("arguments",), ("id",)))
                    written_id = item.get("id") if isinstance(item, dict) else None
                    if isinstance(call, ToolCall) and isinstance(written_id, str):
                        call = replace(call, id=written_id)
                    calls.append(call)
            else:
                call, at = _mistral_named(text, at)
                calls.append(call)
        except _CallError as exc:
            return [*calls, BadToolCall(str(exc))]
        rest = text[at:].lstrip()
        if not rest:
            return calls
        if not rest.startswith(TOOL_CALLS):
            return [*calls, BadToolCall(f"unexpected text `{_shown(rest)}` after the tool call")]
        at = len(text) - len(rest) + len(TOOL_CALLS)
