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
3. **XML** (xml): `<function=N>` then any number of `<parameter=K>V</parameter>`,
   then `</function>`, with only whitespace between them. One leading and one
   trailing newline of V are not part of it. A parameter that is not closed,
   repeats, or text out of place is a problem. A JSON object in the tags is read
   by rule 1, as models trained on both forms write it.
4. **Typing by schema** (xml values, gemma4 values written as text): where the
   tool's schema gives the property the type object, array, integer, number or
   boolean, the text is read as JSON of that type (`3`, `true`); text that is
   not one is a problem naming the parameter and the type. A string property,
   or a tool or property the schemas do not know, keeps the text. In gemma4 a
   bare number or boolean for a string property keeps its text.
5. **DeepSeek R1** (deepseek_r1): in the block, any number of
   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>N` + newline + the arguments
   object (in a ```json fence or not) + `<｜tool▁call▁end｜>`, with only
   whitespace between them.
6. **Gemma 4** (gemma4): `call:N{k:v,...}` where a string is wrapped in `<|"|>`,
   numbers, booleans and null are bare, lists are `[...]` and objects `{...}`
   with bare or `<|"|>`-wrapped keys. A bare word that is not a number, boolean
   or null is kept as text.
7. **Mistral** (mistral), after `[TOOL_CALLS]`: a JSON list of rule-1 objects
   (or one object), or `N[ARGS]{...}` (`N[CALL_ID]id[ARGS]{...}` as Mistral
   Small 3.2's template renders its history), repeated after further
   `[TOOL_CALLS]`; anything after the last is a problem.
8. **Not closed.** JSON that ends inside a string or a bracket, and a call whose
   syntax has a closer that never came, is a problem saying it was not closed.
"""  # noqa: RUF002 (DeepSeek's markers are full-width)

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

Schemas = Mapping[str, Mapping[str, Any]]  # tool name -> its JSON-schema `parameters`

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
DS_CALL_BEGIN, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"  # noqa: RUF001
DS_SEP = "<｜tool▁sep｜>"  # noqa: RUF001
GEMMA_QUOTE = '<|"|>'
FENCE = re.compile(r"\A```(?:json)?\s*\n(.*?)\n?```\Z", re.DOTALL)
_PARAMETER, _PARAMETER_END = "<parameter=", "</parameter>"
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*)</function>\Z", re.DOTALL)
_GEMMA_NAME = re.compile(r"call:([\w.\-]*)")
_GEMMA_STOPS = ",}]"
_GEMMA_MAX_DEPTH = 64
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


@dataclass(frozen=True, slots=True)
class BadToolCall:
    problem: str  # one line, for the model


Call = ToolCall | BadToolCall


class _CallError(ValueError):
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
        try:
            value = json.loads(value, object_pairs_hook=_no_duplicates)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, _CallError):
                raise
            raise _CallError(f"the tool call's `{field}` text is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _CallError(f"the tool call's `{field}` must be a JSON object")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _CallError("the tool call needs `name`, a string")
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
    field = given[0] if given else fields[0]
    return _name(obj.get("name")), _arguments_object(obj.get(field, {}), field)


def read_json_call(text: str) -> Call:
    """One tagged call: `text` is a single JSON object (rule 1)."""

    def read() -> tuple[str, dict[str, Any]]:
        try:
            obj = json.loads(text, object_pairs_hook=_no_duplicates)
        except _CallError:
            raise
        except (ValueError, RecursionError) as exc:
            raise _CallError(f"the tool call is not valid JSON: {exc}") from exc
        return _object_call(obj, ("arguments",))

    return _reading(read)


def read_json_calls(text: str, fields: tuple[str, ...]) -> list[Call]:
    """Objects separated by whitespace or `;` (rule 2); a problem ends the reading."""
    calls: list[Call] = []
    at = 0
    while True:
        while at < len(text) and (text[at].isspace() or text[at] == ";"):
            at += 1
        if at == len(text):
            return calls or [BadToolCall("the tool call is empty")]
        try:
            obj, at = _decode(text, at)
        except _CallError as exc:
            return [*calls, BadToolCall(str(exc))]
        calls.append(_reading(partial(_object_call, obj, fields)))


# --- rules 3 and 4: XML, and typing by schema ---------------------------------------------


def _schema_type(schemas: Schemas | None, tool: str, key: str) -> str | None:
    schema = (schemas or {}).get(tool)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    prop = properties.get(key) if isinstance(properties, Mapping) else None
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    return kind if isinstance(kind, str) else None


def _typed(text: str, kind: str | None, key: str) -> Any:
    """`text`, the value of parameter `key`, as the schema's type `kind` (rule 4)."""
    if kind not in _EXPECTED:
        return text
    problem = f"the tool call's parameter `{_shown(key)}` must be {_EXPECTED[kind]}"
    plain = text.strip()
    if kind == "boolean" and plain.lower() in ("true", "false"):
        return plain.lower() == "true"
    try:
        value = json.loads(plain, object_pairs_hook=_no_duplicates)
    except _CallError:
        raise
    except (ValueError, RecursionError) as exc:
        raise _CallError(f"{problem}: {exc}") from exc
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


def _xml_parameters(inner: str) -> Iterator[tuple[str, str]]:
    at = 0
    while True:
        while at < len(inner) and inner[at].isspace():
            at += 1
        if at == len(inner):
            return
        if not inner.startswith(_PARAMETER, at):
            raise _CallError(
                f"unexpected text `{_shown(inner[at:])}` in the tool call,"
                " expected <parameter=NAME>"
            )
        head_end = inner.find(">", at)
        if head_end < 0:
            raise _CallError("a <parameter=NAME> in the tool call is not closed with `>`")
        key = inner[at + len(_PARAMETER) : head_end].strip()
        end = inner.find(_PARAMETER_END, head_end)
        if end < 0:
            raise _CallError(
                f"the tool call's parameter `{_shown(key)}` is not closed with </parameter>"
            )
        value = inner[head_end + 1 : end]
        value = value.removeprefix("\n").removesuffix("\n")
        yield key, value
        at = end + len(_PARAMETER_END)


def read_xml_call(body: str, schemas: Schemas | None) -> Call:
    """The inside of a closed `<tool_call>` in the xml syntax (rules 3 and 4)."""
    body = body.strip()
    if body.startswith("{"):
        return read_json_call(body)

    def read() -> tuple[str, dict[str, Any]]:
        match = _FUNCTION.match(body)
        if match is None:
            if not body.startswith("<function="):
                raise _CallError("the tool call needs <function=NAME>")
            raise _CallError("the tool call's <function=...> is not closed with </function>")
        name = match.group(1).strip()
        if not name:
            raise _CallError("the tool call needs a name in <function=NAME>")
        arguments: dict[str, Any] = {}
        for key, text in _xml_parameters(match.group(2)):
            if not key:
                raise _CallError("the tool call needs a name in <parameter=NAME>")
            if key in arguments:
                raise _CallError(f"the tool call has a duplicate parameter `{_shown(key)}`")
            arguments[key] = _typed(text, _schema_type(schemas, name, key), key)
        return name, arguments

    return _reading(read)


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
    while True:
        while at < len(body) and body[at].isspace():
            at += 1
        if at == len(body):
            break
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


class _GemmaReader:
    """A cursor over Gemma 4's argument syntax."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def _skip(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def _quoted(self) -> str:
        start = self.at + len(GEMMA_QUOTE)
        end = self.text.find(GEMMA_QUOTE, start)
        if end < 0:
            raise _CallError(f"a {GEMMA_QUOTE} text in the tool call is not closed")
        self.at = end + len(GEMMA_QUOTE)
        return self.text[start:end]

    def _bare(self) -> str:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in _GEMMA_STOPS:
            self.at += 1
        word = self.text[start : self.at].strip()
        if not word:
            raise _CallError("the tool call is missing a value")
        return word

    def value(self, depth: int) -> tuple[Any, str | None]:
        """The next value, and its text where it was written as text or a bare word."""
        if depth > _GEMMA_MAX_DEPTH:
            raise _CallError("the tool call's arguments are nested too deeply")
        self._skip()
        if self.text.startswith(GEMMA_QUOTE, self.at):
            text = self._quoted()
            return text, text
        if self.text.startswith("{", self.at):
            return self.mapping(depth + 1), None
        if self.text.startswith("[", self.at):
            return self._items(depth + 1), None
        word = self._bare()
        try:
            literal = json.loads(word)
        except ValueError:
            return word, word
        return (literal, word) if not isinstance(literal, str | list | dict) else (word, word)

    def _items(self, depth: int) -> list[Any]:
        self.at += 1
        items: list[Any] = []
        self._skip()
        if self.text.startswith("]", self.at):
            self.at += 1
            return items
        while True:
            items.append(self.value(depth)[0])
            if self._close("]"):
                return items

    def _close(self, bracket: str) -> bool:
        """After an item: True at `bracket` (taken), False at `,` (taken)."""
        self._skip()
        if self.at >= len(self.text):
            raise _CallError("the tool call's arguments are not closed")
        char = self.text[self.at]
        self.at += 1
        if char == bracket:
            return True
        if char != ",":
            raise _CallError(f"unexpected `{char}` in the tool call's arguments")
        return False

    def entries(self, depth: int) -> Iterator[tuple[str, Any, str | None]]:
        """The key, value and value text of each entry of the object at the cursor."""
        self.at += 1
        self._skip()
        if self.text.startswith("}", self.at):
            self.at += 1
            return
        seen: set[str] = set()
        while True:
            self._skip()
            if self.text.startswith(GEMMA_QUOTE, self.at):
                key = self._quoted()
                self._skip()
                if not self.text.startswith(":", self.at):
                    raise _CallError(f"the tool call's field `{_shown(key)}` needs `:` and a value")
            else:
                colon = self.text.find(":", self.at)
                key = self.text[self.at : colon].strip() if colon >= 0 else ""
                if not key or any(char in key for char in "{}[],"):
                    raise _CallError("the tool call's arguments need `name:value` fields")
                self.at = colon
            self.at += 1
            if key in seen:
                raise _CallError(f"the tool call has a duplicate field `{_shown(key)}`")
            seen.add(key)
            value, text = self.value(depth)
            yield key, value, text
            if self._close("}"):
                return

    def mapping(self, depth: int) -> dict[str, Any]:
        return {key: value for key, value, _ in self.entries(depth)}


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
        reader = _GemmaReader(text)
        reader.at = match.end()
        if not text.startswith("{", reader.at):
            raise _CallError("the tool call's arguments must be an object `{...}` after its name")
        arguments: dict[str, Any] = {}
        for key, value, written in reader.entries(1):
            kind = _schema_type(schemas, name, key)
            if written is not None and kind == "string":
                arguments[key] = written
            elif written is not None and kind in _EXPECTED:
                arguments[key] = _typed(written, kind, key)
            else:
                arguments[key] = value
        if text[reader.at :].strip():
            raise _CallError("the tool call has text after its arguments")
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
    name = text[at:args_at].partition(CALL_ID)[0].strip()
    if not name:
        raise _CallError("the tool call needs `name`, a string")
    at = args_at + len(ARGS)
    while at < len(text) and text[at].isspace():
        at += 1
    value, end = _decode(text, at)
    return ToolCall(name=name, arguments=_compact(_arguments_object(value, "arguments"))), end


def read_mistral_calls(text: str) -> list[Call]:
    """Everything after the first `[TOOL_CALLS]` of a reply (rule 7)."""
    calls: list[Call] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        try:
            if at == len(text):
                raise _CallError(f"the tool call after {TOOL_CALLS} is empty")
            if text[at] in "[{" and not text.startswith((ARGS, CALL_ID), at):
                value, at = _decode(text, at)
                items = value if isinstance(value, list) else [value]
                if not items:
                    raise _CallError(f"the tool call list after {TOOL_CALLS} is empty")
                for item in items:
                    calls.append(_reading(partial(_object_call, item, ("arguments",), ("id",))))
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
