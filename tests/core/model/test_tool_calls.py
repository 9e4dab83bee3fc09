"""Reading tool calls in every native syntax, and reading back what real chat templates render.

The tables give, per syntax, what a reply reads as: its calls in order and the
content around them, each way a call can be wrong (a `BadToolCall`, never an
exception and never dropped), and how a schema types the values of the syntaxes
that write them as text. The template tests render a call with the templates in
tests/fixtures/chat_templates (jinja2, as Hugging Face's `apply_chat_template`
does) and read the text the call adds back with that template's syntax.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2.sandbox import ImmutableSandboxedEnvironment

from boxmaker.core.model.tool_calls import (
    CLOSE,
    CLOSERS,
    OPEN,
    WHOLE_REPLY,
    BadToolCall,
    CallSyntax,
    Reply,
    ToolCall,
    call_openers,
    parse_reply,
)

S = CallSyntax
DS_CALLS, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001
DS_CALL, DS_CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"  # noqa: RUF001
DS_SEP = "<｜tool▁sep｜>"  # noqa: RUF001
Q = '<|"|>'  # Gemma 4's string quote

SCHEMAS: dict[str, dict[str, Any]] = {
    "call_tool": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
        "required": ["name", "arguments"],
    },
    "typed": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "items": {"type": "array"},
            "options": {"type": "object"},
        },
    },
}


def call(name: str, arguments: str = "{}") -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


CLOCK = call("clock")
READ = call("read_file", '{"path":"/a"}')


def xml(function: str, /, **parameters: str) -> str:
    inner = "".join(
        f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items()
    )
    return f"<tool_call>\n<function={function}>\n{inner}</function>\n</tool_call>"


def ds(name: str, arguments: str) -> str:
    return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{arguments}\n```{DS_CALL_END}"


def case(syntax: CallSyntax | None, text: str, content: str, *calls: ToolCall, id: str) -> Any:
    return pytest.param(syntax, text, Reply(content=content, calls=calls), id=id)


TAG = '<tool_call>\n{"name": "clock", "arguments": {}}\n</tool_call>'
TAG_READ = '<tool_call>{"name": "read_file", "arguments": {"path": "/a"}}</tool_call>'
DS_CLOCK, DS_READ = ds("clock", "{}"), ds("read_file", '{"path": "/a"}')
DS_DUPLICATE = ds("a", '{"k": 1, "k": 2}')
GEMMA_CLOCK = "<|tool_call>call:clock{}<tool_call|>"
GEMMA_READ = f"<|tool_call>call:read_file{{path:{Q}/a{Q}}}<tool_call|>"


@pytest.mark.parametrize(
    ("syntax", "text", "expected"),
    [
        # tagged_json, and the default that reads it when a <tool_call> is there
        case(S.TAGGED_JSON, TAG, "", CLOCK, id="tagged-one"),
        case(S.TAGGED_JSON, TAG + "\n" + TAG_READ, "", CLOCK, READ, id="tagged-several-in-order"),
        case(S.TAGGED_JSON, f"Let me look.\n{TAG}\nDone.", "Let me look.\n\nDone.", CLOCK, id="tagged-content"),
        case(S.TAGGED_JSON, '{"name": "clock", "arguments": {}}', '{"name": "clock", "arguments": {}}', id="tagged-is-not-bare"),
        case(None, f"Hi {TAG} and {TAG_READ}", "Hi  and", CLOCK, READ, id="default-tagged"),
        case(None, '{"name": "clock", "arguments": {}}', "", CLOCK, id="default-bare"),
        # xml
        case(S.XML, xml("clock"), "", CLOCK, id="xml-one-no-parameters"),
        case(S.XML, xml("read_file", path="/a") + "\n" + xml("clock"), "", READ, CLOCK, id="xml-several-in-order"),
        case(S.XML, f"I will read it.\n\n{xml('read_file', path='/a')}", "I will read it.", READ, id="xml-content-before"),
        case(S.XML, f"a {xml('clock')} b {xml('clock')} c", "a  b  c", CLOCK, CLOCK, id="xml-content-between"),
        case(S.XML, xml("w", text="line 1\nline 2\n"), "", call("w", '{"text":"line 1\\nline 2\\n"}'), id="xml-value-spans-lines"),
        case(S.XML, xml("w", text="\nx\n"), "", call("w", '{"text":"\\nx\\n"}'), id="xml-one-newline-each-side-only"),
        case(S.XML, "<tool_call><function=w><parameter=a>v</parameter></function></tool_call>", "", call("w", '{"a":"v"}'), id="xml-on-one-line"),
        case(S.XML, f"<tool_call>\n{json.dumps({'name': 'clock', 'arguments': {}})}\n</tool_call>", "", CLOCK, id="xml-json-in-the-tags"),
        # llama3_json
        case(S.LLAMA3_JSON, '{"name": "clock", "parameters": {}}', "", CLOCK, id="llama-one"),
        case(S.LLAMA3_JSON, '<|python_tag|>{"name": "clock", "parameters": {}}', "", CLOCK, id="llama-python-tag"),
        case(S.LLAMA3_JSON, '{"name": "read_file", "arguments": {"path": "/a"}}', "", READ, id="llama-arguments"),
        case(S.LLAMA3_JSON, '{"name": "clock", "parameters": {}}; {"name": "read_file", "parameters": {"path": "/a"}}', "", CLOCK, READ, id="llama-several-semicolons"),
        case(S.LLAMA3_JSON, '{"name": "clock", "parameters": {}}\n{"name": "read_file", "parameters": {"path": "/a"}}', "", CLOCK, READ, id="llama-several-lines"),
        case(S.LLAMA3_JSON, ' The time is {"name": "x"} ', 'The time is {"name": "x"}', id="llama-text-is-content"),
        case(S.LLAMA3_JSON, "{ braces } here", "{ braces } here", id="llama-braces-without-name"),
        # mistral
        case(S.MISTRAL, '[TOOL_CALLS][{"name": "clock", "arguments": {}}]', "", CLOCK, id="mistral-list-one"),
        case(S.MISTRAL, '[TOOL_CALLS][{"name": "clock", "arguments": {}, "id": "abc123XYZ"}, {"name": "read_file", "arguments": {"path": "/a"}}]', "", CLOCK, READ, id="mistral-list-several-with-ids"),
        case(S.MISTRAL, 'Checking.\n[TOOL_CALLS] [{"name": "clock", "arguments": {}}]\n', "Checking.", CLOCK, id="mistral-content-before"),
        case(S.MISTRAL, '[TOOL_CALLS]clock[ARGS]{}', "", CLOCK, id="mistral-small-one"),
        case(S.MISTRAL, '[TOOL_CALLS]clock[ARGS]{}[TOOL_CALLS]read_file[ARGS]{"path": "/a"}', "", CLOCK, READ, id="mistral-small-several"),
        case(S.MISTRAL, '[TOOL_CALLS]read_file[CALL_ID]a1b2c3d4e[ARGS]{"path": "/a"}', "", READ, id="mistral-small-call-id"),
        case(S.MISTRAL, "No tools [TOOL_ needed", "No tools [TOOL_ needed", id="mistral-no-call"),
        # deepseek_r1
        case(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CLOCK}{DS_CALLS_END}", "", CLOCK, id="deepseek-one"),
        case(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CLOCK}\n{DS_READ}{DS_CALLS_END}", "", CLOCK, READ, id="deepseek-several-in-order"),
        case(S.DEEPSEEK_R1, f"Reading.\n{DS_CALLS}{DS_CLOCK}{DS_CALLS_END}\nok", "Reading.\n\nok", CLOCK, id="deepseek-content-around"),
        case(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CALL}function{DS_SEP}clock\n{{}}{DS_CALL_END}{DS_CALLS_END}", "", CLOCK, id="deepseek-no-fence"),
        case(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CLOCK}", "", CLOCK, id="deepseek-block-end-missing"),
        # gemma4
        case(S.GEMMA4, GEMMA_CLOCK, "", CLOCK, id="gemma-one-no-arguments"),
        case(S.GEMMA4, GEMMA_READ + GEMMA_CLOCK, "", READ, CLOCK, id="gemma-several-in-order"),
        case(S.GEMMA4, f"Sure.\n{GEMMA_READ}\nThen done.", "Sure.\n\nThen done.", READ, id="gemma-content-around"),
        case(S.GEMMA4, f"<|tool_call>call:w{{a:{Q}x, {{y}}: z{Q},b:[1,2.5,true,null,{Q}s{Q}],c:{{d:false,{Q}e f{Q}:{{}}}}}}<tool_call|>", "", call("w", '{"a":"x, {y}: z","b":[1,2.5,true,null,"s"],"c":{"d":false,"e f":{}}}'), id="gemma-values"),
        case(S.GEMMA4, f"<|tool_call>call:w{{t:{Q}line 1\nline 2{Q}}}<tool_call|>", "", call("w", '{"t":"line 1\\nline 2"}'), id="gemma-value-spans-lines"),
        case(S.GEMMA4, "<|tool_call>call:w{ a : word , b : -3 }<tool_call|>", "", call("w", '{"a":"word","b":-3}'), id="gemma-bare-words-and-spaces"),
        # bare_json
        case(S.BARE_JSON, '{"name": "clock", "arguments": {}}', "", CLOCK, id="bare-one"),
        case(S.BARE_JSON, '```json\n{"name": "clock", "arguments": {}}\n```', "", CLOCK, id="bare-fenced"),
        case(S.BARE_JSON, '{"name": "clock", "arguments": {}}\n{"name": "read_file", "arguments": {"path": "/a"}}', "", CLOCK, READ, id="bare-several"),
        case(S.BARE_JSON, "It is noon.", "It is noon.", id="bare-plain-text"),
        case(S.BARE_JSON, f"{TAG}", TAG, id="bare-tags-are-content"),
    ],
)  # fmt: skip
def test_a_reply_reads_as(syntax: CallSyntax | None, text: str, expected: Reply) -> None:
    assert parse_reply(text, syntax) == expected


def bad(syntax: CallSyntax, text: str, problem: str, *, id: str) -> Any:
    return pytest.param(syntax, text, problem, id=id)


@pytest.mark.parametrize(
    ("syntax", "text", "problem"),
    [
        bad(S.TAGGED_JSON, '<tool_call>{"name": "clock", "arguments": {}, "x": 1}</tool_call>', "unknown field `x` in the tool call, expected `name`, `arguments`", id="tagged-unknown-field"),
        bad(S.TAGGED_JSON, '<tool_call>{"name": "a", "name": "b"}</tool_call>', "duplicate field `name`", id="tagged-duplicate"),
        bad(S.TAGGED_JSON, '<tool_call>{"arguments": {}}</tool_call>', "needs `name`", id="tagged-no-name"),
        bad(S.TAGGED_JSON, '<tool_call>{"name": "a", "arguments": [1]}</tool_call>', "`arguments` must be a JSON object", id="tagged-arguments-not-object"),
        bad(S.TAGGED_JSON, "<tool_call>{not json</tool_call>", "not valid JSON", id="tagged-not-json"),
        bad(S.TAGGED_JSON, '<tool_call>{"name": "clo', "not valid JSON", id="tagged-unclosed-reads-what-was-written"),
        bad(S.XML, "<tool_call>\n<parameter=a>\nv\n</parameter>\n</tool_call>", "needs <function=NAME>", id="xml-no-function"),
        bad(S.XML, "<tool_call>\n<function=>\n</function>\n</tool_call>", "needs a name", id="xml-no-name"),
        bad(S.XML, "<tool_call>\n<function=a>\n<parameter=k>\nv\n", "not closed with </tool_call>", id="xml-unclosed-call"),
        bad(S.XML, "<tool_call>\n<function=a>\n<parameter=k>\nv\n</tool_call>", "</function>", id="xml-unclosed-function"),
        bad(S.XML, "<tool_call>\n<function=a>\n<parameter=k>\nv\n</function>\n</tool_call>", "parameter `k` is not closed", id="xml-unclosed-parameter"),
        bad(S.XML, xml("a", k="1").replace("</parameter>\n", "</parameter>\n<parameter=k>\n2\n"), "duplicate parameter `k`", id="xml-duplicate-parameter"),
        bad(S.XML, "<tool_call>\n<function=a>\nhello\n</function>\n</tool_call>", "unexpected text `hello", id="xml-text-out-of-place"),
        bad(S.XML, "<tool_call>\n<function=a>\n</function>\nmore\n</tool_call>", "unexpected text `more", id="xml-text-after-function"),
        bad(S.XML, '<tool_call>\n{"name": "a", "arguments": 3}\n</tool_call>', "`arguments` must be a JSON object", id="xml-bad-json-in-tags"),
        bad(S.LLAMA3_JSON, '{"name": "a", "parameters": {}, "x": 1}', "unknown field `x` in the tool call, expected `name`, `parameters`, `arguments`", id="llama-unknown-field"),
        bad(S.LLAMA3_JSON, '{"name": "a", "parameters": {"k": 1, "k": 2}}', "duplicate field `k`", id="llama-duplicate"),
        bad(S.LLAMA3_JSON, '{"name": 3, "parameters": {}}', "needs `name`, a string", id="llama-name-not-text"),
        bad(S.LLAMA3_JSON, '{"name": "", "parameters": {}}', "needs `name`", id="llama-empty-name"),
        bad(S.LLAMA3_JSON, '{"name": "a", "parameters": "x"}', "`parameters` text is not valid JSON", id="llama-parameters-not-object"),
        bad(S.LLAMA3_JSON, '{"name": "a", "parameters": {}, "arguments": {}}', "both `parameters` and `arguments`", id="llama-both-fields"),
        bad(S.LLAMA3_JSON, "<|python_tag|>brave_search.call(query='x')", "not valid JSON", id="llama-python-tag-not-json"),
        bad(S.LLAMA3_JSON, '<|python_tag|>{"name": "a", "parameters": {', "not closed", id="llama-unclosed"),
        bad(S.LLAMA3_JSON, "<|python_tag|>", "empty", id="llama-python-tag-alone"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": {}, "x": 1}]', "unknown field `x`", id="mistral-unknown-field"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"name": "a", "name": "b"}]', "duplicate field `name`", id="mistral-duplicate"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"arguments": {}}]', "needs `name`", id="mistral-no-name"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": [1]}]', "must be a JSON object", id="mistral-arguments-not-object"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": {}', "not closed", id="mistral-unclosed-list"),
        bad(S.MISTRAL, "[TOOL_CALLS]", "empty", id="mistral-empty"),
        bad(S.MISTRAL, "[TOOL_CALLS][]", "list after [TOOL_CALLS] is empty", id="mistral-empty-list"),
        bad(S.MISTRAL, '[TOOL_CALLS][{"name": "a", "arguments": {}}] and more', "unexpected text `and more`", id="mistral-text-after"),
        bad(S.MISTRAL, "[TOOL_CALLS]clock {}", "needs `NAME[ARGS]{...}`", id="mistral-small-no-args-marker"),
        bad(S.MISTRAL, "[TOOL_CALLS][ARGS]{}", "needs `name`", id="mistral-small-no-name"),
        bad(S.MISTRAL, "[TOOL_CALLS]a[ARGS]{\"k\": 1", "not closed", id="mistral-small-unclosed"),
        bad(S.MISTRAL, "[TOOL_CALLS]a[ARGS][1]", "must be a JSON object", id="mistral-small-arguments-not-object"),
        bad(S.DEEPSEEK_R1, DS_CALLS, "not closed", id="deepseek-unclosed-block"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CALL}function{DS_SEP}a\n{{}}", "not closed with", id="deepseek-unclosed-call"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CALLS_END}", "no tool call", id="deepseek-empty-block"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CALL}code{DS_SEP}a\n{{}}{DS_CALL_END}{DS_CALLS_END}", "unknown tool call type `code`", id="deepseek-not-a-function"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_CALL}function a {{}}{DS_CALL_END}{DS_CALLS_END}", "needs `function", id="deepseek-no-separator"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{ds('', '{}')}{DS_CALLS_END}", "needs `name`", id="deepseek-no-name"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{ds('a', '{oops}')}{DS_CALLS_END}", "not valid JSON", id="deepseek-not-json"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{ds('a', '[1]')}{DS_CALLS_END}", "must be a JSON object", id="deepseek-arguments-not-object"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{DS_DUPLICATE}{DS_CALLS_END}", "duplicate field `k`", id="deepseek-duplicate"),
        bad(S.DEEPSEEK_R1, f"{DS_CALLS}{ds('a', '{}')} so {DS_CALLS_END}", "unexpected text `so", id="deepseek-text-in-block"),
        bad(S.GEMMA4, "<|tool_call>call:a{k:1}", "not closed with <tool_call|>", id="gemma-unclosed-call"),
        bad(S.GEMMA4, "<|tool_call>a{k:1}<tool_call|>", "must start with `call:NAME{`", id="gemma-no-call-prefix"),
        bad(S.GEMMA4, "<|tool_call>call:{k:1}<tool_call|>", "needs a name", id="gemma-no-name"),
        bad(S.GEMMA4, "<|tool_call>call:a[1]<tool_call|>", "must be an object", id="gemma-arguments-not-object"),
        bad(S.GEMMA4, "<|tool_call>call:a{k:1,k:2}<tool_call|>", "duplicate field `k`", id="gemma-duplicate"),
        bad(S.GEMMA4, f"<|tool_call>call:a{{k:{Q}open}}<tool_call|>", "not closed", id="gemma-unclosed-text"),
        bad(S.GEMMA4, "<|tool_call>call:a{k:[1,2}<tool_call|>", "not closed", id="gemma-unclosed-list"),
        bad(S.GEMMA4, "<|tool_call>call:a{k:{j:1}<tool_call|>", "not closed", id="gemma-unclosed-object"),
        bad(S.GEMMA4, "<|tool_call>call:a{k:}<tool_call|>", "not `{name:value,...}`", id="gemma-missing-value"),
        bad(S.GEMMA4, "<|tool_call>call:a{k}<tool_call|>", "not `{name:value,...}`", id="gemma-missing-colon"),
        bad(S.GEMMA4, "<|tool_call>call:a{} and more<tool_call|>", "text after its arguments", id="gemma-text-after"),
        bad(S.BARE_JSON, '{"name": "a", "arguments": {}, "x": 1}', "unknown field `x`", id="bare-unknown-field"),
        bad(S.BARE_JSON, '{"name": "a", "name": "b", "arguments": {}}', "duplicate field `name`", id="bare-duplicate"),
        bad(S.BARE_JSON, '{"name": "a", "arguments": 3}', "must be a JSON object", id="bare-arguments-not-object"),
        bad(S.BARE_JSON, '{"name": "a", "arguments": {}', "not closed", id="bare-unclosed"),
    ],
)  # fmt: skip
def test_a_call_that_cannot_be_read_is_a_bad_call(
    syntax: CallSyntax, text: str, problem: str
) -> None:
    reply = parse_reply(text, syntax, SCHEMAS)
    (only,) = [c for c in reply.calls if isinstance(c, BadToolCall)]
    assert problem in only.problem
    assert "\n" not in only.problem


def test_a_bad_call_keeps_its_place_among_good_ones() -> None:
    text = f"{TAG}\n<tool_call>{{oops}}</tool_call>\n{TAG_READ}"
    clock, broken, read = parse_reply(text, S.TAGGED_JSON).calls
    assert (clock, read) == (CLOCK, READ)
    assert isinstance(broken, BadToolCall)


@pytest.mark.parametrize(
    ("parameter", "value", "expected"),
    [
        pytest.param("options", '{"path": "/x", "n": [1]}', {"path": "/x", "n": [1]}, id="object"),
        pytest.param("items", '[1, "two"]', [1, "two"], id="array"),
        pytest.param("count", "3", 3, id="integer"),
        pytest.param("count", " -12 ", -12, id="integer-with-spaces"),
        pytest.param("ratio", "2.5", 2.5, id="number"),
        pytest.param("ratio", "2", 2, id="number-integral"),
        pytest.param("flag", "true", True, id="boolean"),
        pytest.param("flag", "False", False, id="boolean-capitalised"),
        pytest.param("text", "3", "3", id="string-stays-text"),
        pytest.param("text", '{"a": 1}', '{"a": 1}', id="string-json-stays-text"),
        pytest.param("unknown", "3", "3", id="unknown-property-is-text"),
    ],
)
def test_xml_values_are_typed_by_the_schema(parameter: str, value: str, expected: Any) -> None:
    (read,) = parse_reply(xml("typed", **{parameter: value}), S.XML, SCHEMAS).calls
    assert read == call("typed", json.dumps({parameter: expected}, separators=(",", ":")))


def test_xml_without_schemas_keeps_text() -> None:
    (read,) = parse_reply(xml("typed", count="3"), S.XML).calls
    assert read == call("typed", '{"count":"3"}')


def test_xml_call_tool_arguments_are_an_object() -> None:
    text = xml("call_tool", name="read_file", arguments='{"path": "/x"}')
    (read,) = parse_reply(text, S.XML, SCHEMAS).calls
    assert read == call("call_tool", '{"name":"read_file","arguments":{"path":"/x"}}')


@pytest.mark.parametrize(
    ("parameter", "value", "problem"),
    [
        pytest.param(
            "options", '{"path": ', "parameter `options` must be a JSON object", id="bad-object"
        ),
        pytest.param(
            "options", "[1]", "parameter `options` must be a JSON object", id="array-for-object"
        ),
        pytest.param(
            "items", "{}", "parameter `items` must be a JSON array", id="object-for-array"
        ),
        pytest.param(
            "count", "three", "parameter `count` must be an integer", id="word-for-integer"
        ),
        pytest.param(
            "count", "2.5", "parameter `count` must be an integer", id="fraction-for-integer"
        ),
        pytest.param(
            "count", "true", "parameter `count` must be an integer", id="boolean-for-integer"
        ),
        pytest.param("ratio", '"2"', "parameter `ratio` must be a number", id="quoted-number"),
        pytest.param("flag", "yes", "parameter `flag` must be a boolean", id="yes-for-boolean"),
        pytest.param(
            "options", '{"a": 1, "a": 2}', "duplicate field `a`", id="duplicate-in-object"
        ),
    ],
)
def test_an_xml_value_of_the_wrong_type_is_a_bad_call(
    parameter: str, value: str, problem: str
) -> None:
    (read,) = parse_reply(xml("typed", **{parameter: value}), S.XML, SCHEMAS).calls
    assert isinstance(read, BadToolCall)
    assert problem in read.problem


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        pytest.param("text:42", {"text": "42"}, id="bare-number-for-string-is-text"),
        pytest.param("text:true", {"text": "true"}, id="bare-boolean-for-string-is-text"),
        pytest.param(f"count:{Q}7{Q}", {"count": 7}, id="quoted-integer"),
        pytest.param(f'options:{Q}{{"a": 1}}{Q}', {"options": {"a": 1}}, id="object-as-text"),
        pytest.param("options:{a:1}", {"options": {"a": 1}}, id="object"),
        pytest.param("flag:false,ratio:0.5", {"flag": False, "ratio": 0.5}, id="bare-literals"),
        pytest.param("other:12", {"other": 12}, id="unknown-property-keeps-its-form"),
    ],
)
def test_gemma_values_are_typed_where_needed(arguments: str, expected: dict[str, Any]) -> None:
    text = f"<|tool_call>call:typed{{{arguments}}}<tool_call|>"
    (read,) = parse_reply(text, S.GEMMA4, SCHEMAS).calls
    assert read == call("typed", json.dumps(expected, separators=(",", ":")))


def test_a_gemma_value_of_the_wrong_type_is_a_bad_call() -> None:
    text = "<|tool_call>call:typed{count:many}<tool_call|>"
    (read,) = parse_reply(text, S.GEMMA4, SCHEMAS).calls
    assert isinstance(read, BadToolCall)
    assert read.problem.startswith("the tool call's parameter `count` must be an integer")


def test_arguments_are_compact_json_keeping_non_ascii() -> None:
    (read,) = parse_reply('<tool_call>{"name": "w", "arguments": {"t": "é 日"}}</tool_call>').calls
    assert read == call("w", '{"t":"é 日"}')


def test_the_openers_table() -> None:
    for syntax in CallSyntax:
        openers = call_openers(syntax)
        assert openers
        if syntax not in WHOLE_REPLY:
            assert all(opener in CLOSERS for opener in openers), syntax
    assert call_openers(S.TAGGED_JSON) == (OPEN,)
    assert CLOSERS[OPEN] == CLOSE
    assert call_openers(None) == (OPEN, "{", "```")


# --- garbage ------------------------------------------------------------------------------

MARKERS = [
    OPEN, CLOSE, "<function=a>", "</function>", "<parameter=k>", "</parameter>",
    "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", DS_CALLS, DS_CALLS_END,
    DS_CALL, DS_CALL_END, DS_SEP, "function", "<|tool_call>", "<tool_call|>", "call:a", Q,
    "{", "}", "[", "]", ":", ",", ";", '"name"', '"arguments"', '"parameters"', '"a"', "1",
    "true", "```json", "```", "\n", " ", "x", "é",
]  # fmt: skip
garbage = st.lists(st.one_of(st.sampled_from(MARKERS), st.text(max_size=3)), max_size=16).map(
    "".join
)


@settings(max_examples=300, deadline=None)
@given(garbage, st.sampled_from([None, *CallSyntax]))
def test_garbage_reads_as_content_and_calls_never_an_exception(
    text: str, syntax: CallSyntax | None
) -> None:
    reply = parse_reply(text, syntax, SCHEMAS)
    assert reply.content == reply.content.strip()
    for read in reply.calls:
        if isinstance(read, ToolCall):
            assert read.name
            assert isinstance(json.loads(read.arguments), dict)
        else:
            assert read.problem
            assert "\n" not in read.problem


# --- real chat templates ------------------------------------------------------------------

TEMPLATES = Path(__file__).parents[2] / "fixtures" / "chat_templates"
ARGUMENTS = {"name": "read_file", "arguments": {"path": "/home/o/a.md"}}
EOS = "</s>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "call_tool",
            "description": "Call one of the tools by name.",
            "parameters": {
                **SCHEMAS["call_tool"],
                "properties": {
                    "name": {"type": "string", "description": "The tool's name."},
                    "arguments": {"type": "object", "description": "Its arguments."},
                },
            },
        },
    }
]


@dataclass(frozen=True)
class Template:
    file: str
    syntax: CallSyntax
    ends: tuple[str, ...]  # what ends the model's turn: generation stops there
    arguments: str  # what the template needs the call's arguments as: "mapping" or "text"
    text_reads_back: bool | None  # arguments as JSON text: read back? None: refused


TEMPLATE_FINDINGS = [
    Template("Qwen3.5-4B.jinja", S.XML, ("<|im_end|>",), "mapping", None),
    Template("Qwen3-Coder.jinja", S.XML, ("<|im_end|>",), "mapping", None),
    Template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", S.TAGGED_JSON, ("<|im_end|>",), "mapping", True),
    Template("Qwen-Qwen3-0.6B.jinja", S.TAGGED_JSON, ("<|im_end|>",), "mapping", True),
    Template("meta-llama-Llama-3.1-8B-Instruct.jinja", S.LLAMA3_JSON, ("<|eot_id|>", "<|eom_id|>"), "mapping", True),
    Template("mistralai-Mistral-Nemo-Instruct-2407.jinja", S.MISTRAL, (EOS,), "mapping", True),
    Template("Mistral-Small-3.2-24B-Instruct-2506.jinja", S.MISTRAL, (EOS,), "mapping", True),
    Template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", S.DEEPSEEK_R1, ("<｜end▁of▁sentence｜>",), "mapping", True),  # noqa: RUF001
    Template("google-gemma-4-31B-it.jinja", S.GEMMA4, ("<turn|>", "<|tool_response>"), "mapping", False),
]  # fmt: skip


def raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def tojson(
    value: Any,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
    )


def environment() -> ImmutableSandboxedEnvironment:
    """jinja2 set up as Hugging Face's `apply_chat_template` sets it up."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime(2026, 1, 2).strftime(fmt)
    return env


def render(file: str, reply: Mapping[str, Any]) -> str:
    messages = [
        {"role": "system", "content": "You are a careful assistant."},
        {"role": "user", "content": "Please read a.md"},
        reply,
    ]
    template = environment().from_string((TEMPLATES / file).read_text(encoding="utf-8"))
    return template.render(
        messages=messages, tools=TOOLS, bos_token="<s>", eos_token=EOS, add_generation_prompt=False
    )


def call_text(template: Template, arguments: Any) -> str:
    """What a call with `arguments` adds to the assistant turn, up to where the model stops."""
    tool_call = {"type": "function", "id": "call12345"}
    tool_call["function"] = {"name": "call_tool", "arguments": arguments}  # type: ignore[assignment]
    with_call = render(
        template.file, {"role": "assistant", "content": "", "tool_calls": [tool_call]}
    )
    without = render(template.file, {"role": "assistant", "content": ""})
    before = without[: max(without.rfind(end) for end in template.ends)]
    assert with_call.startswith(before)
    added = with_call[len(before) :]
    stops = [at for end in template.ends if (at := added.find(end)) >= 0]
    return added[: min(stops)] if stops else added


def rendered_call(template: Template) -> tuple[str, str]:
    """The call's text with the arguments as a mapping, or failing that as JSON text."""
    try:
        return call_text(template, ARGUMENTS), "mapping"
    except (jinja2.TemplateError, TypeError):
        return call_text(template, json.dumps(ARGUMENTS)), "text"


def reads_back(reply: Reply) -> bool:
    """Whether `reply` is exactly the call rendered: no content, that name, those arguments."""
    match reply:
        case Reply(content="", calls=(ToolCall(name="call_tool", arguments=arguments),)):
            return bool(json.loads(arguments) == ARGUMENTS)
    return False


@pytest.mark.parametrize("template", TEMPLATE_FINDINGS, ids=lambda t: t.file.removesuffix(".jinja"))
def test_a_templates_call_reads_back_as_that_call(template: Template) -> None:
    text, needs = rendered_call(template)
    assert needs == template.arguments
    assert reads_back(parse_reply(text, template.syntax, SCHEMAS))


@pytest.mark.parametrize("template", TEMPLATE_FINDINGS, ids=lambda t: t.file.removesuffix(".jinja"))
def test_a_templates_call_with_arguments_as_text(template: Template) -> None:
    """Some templates take the arguments as JSON text too; most of those read back."""
    try:
        text = call_text(template, json.dumps(ARGUMENTS))
    except (jinja2.TemplateError, TypeError):
        assert template.text_reads_back is None
        return
    assert reads_back(parse_reply(text, template.syntax, SCHEMAS)) is template.text_reads_back


@pytest.mark.parametrize(
    ("text", "content", "names"),
    [
        pytest.param(
            '<|tool_call|>{"name": "clock", "arguments": {}}<|/tool_call|>', "", ["clock"], id="one"
        ),
        pytest.param(
            'Sure. <|tool_call|>{"name": "a", "arguments": {}}<|/tool_call|>'
            '<|tool_call|>{"name": "b", "arguments": {"x": 1}}<|/tool_call|> Done.',
            "Sure.  Done.",
            ["a", "b"],
            id="two-in-order-with-text",
        ),
        pytest.param(
            "<tool_call>{}</tool_call>", "<tool_call>{}</tool_call>", [], id="other-tags-are-text"
        ),
    ],
)
def test_phi4_calls(text: str, content: str, names: list[str]) -> None:
    reply = parse_reply(text, CallSyntax.PHI4)
    assert reply.content == content
    assert [c.name for c in reply.calls if isinstance(c, ToolCall)] == names


def test_an_unclosed_phi4_call_is_a_bad_call_the_model_reads() -> None:
    (bad,) = parse_reply('<|tool_call|>{"name": "a"', CallSyntax.PHI4).calls
    assert isinstance(bad, BadToolCall)
    assert "not closed" in bad.problem
