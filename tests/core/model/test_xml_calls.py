"""Where each value, call and wrapper of the xml syntax ends (`core.model.xml_calls`), rule by rule;
and the property that a call the real Qwen3.5 template renders, whatever its values
hold, reads back as that very call, whole and streamed in pieces; where another call
renders the very same text (a value holding `</parameter>` then the head of one of
the tool's parameters), as one call of that tool, or a problem.

Also the whole-reply rule of `tool_calls` for Llama 3's and bare JSON: a call only
when the top-level keys say so.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from boxmaker.core.model import xml_calls
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.model.template_sandbox import ChatTemplate
from boxmaker.core.model.tool_calls import BadToolCall, CallSyntax, Reply, ToolCall, parse_reply
from boxmaker.loopd.tools import SCHEMAS, TOOL_SCHEMAS

S = CallSyntax
QWEN35 = Path(__file__).parents[2] / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"
CLOSERS = ("</parameter>", "</function>", "</tool_call>", "<parameter=x>", "<tool_call>")


def call(function: str, /, **values: str) -> str:
    """A call as Qwen3.5's template writes it."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in values.items())
    return f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>"


def read(text: str) -> Reply:
    return parse_reply(text, S.XML, SCHEMAS)


def only_call(text: str) -> tuple[str, dict[str, Any]]:
    reply = read(text)
    assert len(reply.calls) == 1, reply
    (got,) = reply.calls
    assert isinstance(got, ToolCall), got
    return got.name, json.loads(got.arguments)


def problem(text: str) -> str:
    (got,) = read(text).calls
    assert isinstance(got, BadToolCall), got
    return got.problem


# --- rule 1: where a call opens -----------------------------------------------------------


def test_rule_1_a_bare_call_that_starts_a_line_is_a_call() -> None:
    bare = "<function=clock>\n</function>"
    assert read(f"  {bare}").calls == (ToolCall("clock", "{}"),)
    assert read(f"{call('clock')}{bare}").calls == (ToolCall("clock", "{}"),) * 2
    assert read(f"Checking.\n\t{bare}") == Reply("Checking.", (ToolCall("clock", "{}"),))
    assert read(f"{bare}\n</tool_call>") == Reply("", (ToolCall("clock", "{}"),))


def test_rule_1_a_bare_call_that_does_not_read_is_text() -> None:
    text = "Here is how:\n<function=clock> is what you write first."
    assert read(text) == Reply(content=text, calls=())


def test_rule_1_a_bare_call_inside_an_answer_is_text() -> None:
    text = "To ask the time, write <function=clock>\n</function> on a line."
    assert read(text) == Reply(content=text, calls=())


# --- rule 2: the inside of a call ---------------------------------------------------------


def test_rule_2_json_in_the_wrapper_ends_where_its_json_ends() -> None:
    text = '<tool_call>\n{"name": "write_file", "arguments": {"path": "/a", "content": "</tool_call>"}}\n</tool_call>'
    assert only_call(text) == ("write_file", {"path": "/a", "content": "</tool_call>"})


def test_rule_2_text_after_the_function_is_a_problem() -> None:
    assert "unexpected text `more" in problem(
        "<tool_call>\n<function=clock>\n</function>\nmore\n</tool_call>"
    )


# --- rule 3: where a value ends -----------------------------------------------------------


@pytest.mark.parametrize("closer", CLOSERS)
def test_rule_3_a_value_ends_only_before_a_sibling_or_the_functions_end(closer: str) -> None:
    content = f"<a>\n{closer}\n</a>"
    text = call("write_file", path="/w/a.xml", content=content)
    assert only_call(text) == ("write_file", {"path": "/w/a.xml", "content": content})


@pytest.mark.parametrize("closer", CLOSERS)
def test_rule_3_an_object_value_ends_where_its_json_ends(closer: str) -> None:
    arguments = {"path": "/w/a", "content": f"x{closer}\n</parameter>\n</function>\ny"}
    text = call("call_tool", name="write_file", arguments=json.dumps(arguments))
    assert only_call(text) == ("call_tool", {"name": "write_file", "arguments": arguments})


def test_rule_3_a_sibling_must_be_a_parameter_of_the_tool() -> None:
    content = "a\n</parameter>\n<parameter=mode>\nb"  # write_file has no `mode`
    text = call("write_file", path="/w/a", content=content)
    assert only_call(text) == ("write_file", {"path": "/w/a", "content": content})


# --- rule 4: one reading ------------------------------------------------------------------


def test_rule_4_closers_still_to_come_make_the_earlier_end_no_reading() -> None:
    content = "before\n</parameter>\n</function>\n</tool_call>"
    text = call("write_file", path="/w/a", content=content)
    assert only_call(text) == ("write_file", {"path": "/w/a", "content": content})


def test_rule_4_two_calls_are_read_as_two_calls() -> None:
    text = f"{call('read_file', path='/w/a')}\n{call('read_file', path='/w/b')}"
    assert [json.loads(c.arguments) for c in read(text).calls if isinstance(c, ToolCall)] == [
        {"path": "/w/a"},
        {"path": "/w/b"},
    ]


def test_rule_4_a_closer_after_the_call_is_a_value_still_to_come() -> None:
    text = call("write_file", path="/w/a", content="x") + "\nand then </parameter>"
    assert "cannot be told" in problem(text)


# --- rule 5: unclosed is a problem, never a merge ----------------------------------------


def test_rule_5_an_unclosed_parameter_before_a_sibling_is_a_problem() -> None:
    text = (
        "<tool_call>\n<function=write_file>\n<parameter=content>\nhello\n"
        "<parameter=path>\n/w/a\n</parameter>\n</function>\n</tool_call>"
    )
    assert "parameter `content` is not closed" in problem(text)


def test_rule_5_a_value_may_quote_a_whole_call_of_the_same_tool() -> None:
    content = 'doc = """\n' + call("write_file", path="/w/b", content="hello") + '\n"""'
    text = call("write_file", path="/w/a", content=content)
    assert only_call(text) == ("write_file", {"path": "/w/a", "content": content})


def test_rule_5_a_parameter_written_twice_reads_as_one_value_holding_the_second() -> None:
    """The same text as a value that quotes `</parameter>` and the parameter's head."""
    text = call("write_file", path="/w/a", content="x").replace(
        "</parameter>\n</function>",
        "</parameter>\n<parameter=content>\ny\n</parameter>\n</function>",
    )
    content = "x\n</parameter>\n<parameter=content>\ny"
    assert only_call(text) == ("write_file", {"path": "/w/a", "content": content})


def test_rule_5_a_parameter_written_twice_and_left_open_is_a_problem() -> None:
    text = call("write_file", path="/w/a", content="x").replace(
        "</parameter>\n</function>", "</parameter>\n<parameter=content>\ny\n</function>"
    )
    assert "duplicate parameter `content`" in problem(text)


def test_rule_5_a_call_never_closed_is_a_problem() -> None:
    assert "not closed with </tool_call>" in problem(call("clock").removesuffix("</tool_call>"))


# --- rule 6: never run truncated ----------------------------------------------------------


def test_rule_6_a_call_that_cannot_be_read_ends_where_the_rest_reads() -> None:
    bad = "<tool_call>\n<function=write_file>\n<parameter=path>\n/w/a\n</tool_call>"
    reply = read(f"Saving.\n{bad} then\n{call('clock')}")
    assert reply.content == "Saving.\n then"
    assert isinstance(reply.calls[0], BadToolCall)
    assert reply.calls[1:] == (ToolCall("clock", "{}"),)


def test_rule_6_a_call_that_cannot_be_read_takes_the_rest_when_no_end_reads() -> None:
    bad = "<tool_call>\n<function=write_file>\n<parameter=path>\n/w/a\n</tool_call>"
    reply = read(f"Saving.\n{bad} and </parameter> {call('clock')}")
    assert reply.content == "Saving."
    assert len(reply.calls) == 1
    assert isinstance(reply.calls[0], BadToolCall)


def test_rule_6_a_tangle_past_the_step_budget_is_a_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xml_calls, "MAX_STEPS", 50)
    tangle = "x\n</parameter>\n</function>\n</tool_call>\n" * 40
    assert "too tangled" in problem(call("write_file", path="/w/a", content=tangle))


# --- the property: the real template's rendering reads back --------------------------------

_TEMPLATE = ChatTemplate(QWEN35.read_text(), clock=time.monotonic)
_PIECES = st.sampled_from(
    [
        *CLOSERS,
        "<parameter=path>",
        "<parameter=content>",
        "<function=write_file>",
        "\n",
        " ",
        "x",
        "<",
        ">",
        "/",
        "=",
    ]
)
VALUES = st.one_of(st.text(max_size=40), st.lists(_PIECES, max_size=12).map("".join))
# where two calls of the tool render the same text (rules 4 and 5), one of them is read
_SAME_TEXT = re.compile(
    r"</parameter>\s*<parameter=(path|content|name|arguments)>|</tool_call>\s*(<tool_call>|<function=)"
)


def rendered(name: str, arguments: dict[str, Any]) -> str:
    """The call as the real Qwen3.5 template writes it in the model's turn."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": name, "arguments": arguments}}
            ],
        },
    ]
    text = _TEMPLATE.render(
        messages,
        tools=TOOL_SCHEMAS,
        add_generation_prompt=False,
        bos_token="",
        eos_token="",
        now=datetime(2026, 12, 1, tzinfo=UTC),
        extra={"enable_thinking": True},
    )
    turn = text[text.rindex("<|im_start|>assistant\n") :]
    return turn[turn.index("<tool_call>") : turn.rindex("</tool_call>") + len("</tool_call>")]


def reads_back(text: str, name: str, arguments: dict[str, Any], values: list[str]) -> None:
    reply = read(text)
    if any(_SAME_TEXT.search(v) for v in values):
        # another call of the tool renders this very text: one of the two is read
        assert len(reply.calls) == 1, reply
        got = reply.calls[0]
        if isinstance(got, ToolCall):
            assert got.name == name
            assert set(json.loads(got.arguments)) <= set(arguments)
    else:
        assert len(reply.calls) == 1, reply
        assert isinstance(reply.calls[0], ToolCall), reply
        assert (reply.calls[0].name, json.loads(reply.calls[0].arguments)) == (name, arguments)
    assert reply.content == ""


def streams_nothing(text: str, cuts: list[int]) -> None:
    stream = ReplyStream(S.XML, SCHEMAS)
    released = []
    at = 0
    for cut in sorted({c % (len(text) + 1) for c in cuts}):
        released.append(stream.feed(text[at:cut]))
        at = cut
    released += [stream.feed(text[at:]), stream.finish()]
    assert "".join(released) == ""


@settings(max_examples=500)
@given(path=VALUES, content=VALUES, cuts=st.lists(st.integers(min_value=0), max_size=6))
@example(path="/w/a", content="".join(CLOSERS), cuts=[])
@example(path="/w/a", content="</parameter>", cuts=[1, 30, 60])
def test_a_direct_call_the_template_renders_reads_back_whole_and_streamed(
    path: str, content: str, cuts: list[int]
) -> None:
    text = rendered("write_file", {"path": path, "content": content})
    reads_back(text, "write_file", {"path": path, "content": content}, [path, content])
    streams_nothing(text, cuts)


@settings(max_examples=500)
@given(path=VALUES, content=VALUES, cuts=st.lists(st.integers(min_value=0), max_size=6))
@example(path="/w/a", content="".join(CLOSERS), cuts=[])
def test_a_call_tool_the_template_renders_reads_back_whole_and_streamed(
    path: str, content: str, cuts: list[int]
) -> None:
    arguments = {"name": "write_file", "arguments": {"path": path, "content": content}}
    text = rendered("call_tool", arguments)
    reads_back(text, "call_tool", arguments, [])  # the JSON value has one reading
    streams_nothing(text, cuts)


# --- Llama 3 and bare JSON: the top-level keys say so --------------------------------------


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        pytest.param(
            S.LLAMA3_JSON, '{"result": {"name": "Ada", "age": 36}}', id="llama-nested-name"
        ),
        pytest.param(
            S.LLAMA3_JSON, '{"name": "Ada", "age": 36}', id="llama-name-but-no-parameters"
        ),
        pytest.param(
            S.LLAMA3_JSON, '{"parameters": {}, "x": "name"}', id="llama-name-only-as-a-value"
        ),
        pytest.param(
            S.BARE_JSON, '{"user": {"name": "Ada"}, "arguments": []}', id="bare-nested-name"
        ),
        pytest.param(S.BARE_JSON, '{"tool": "a", "arguments": {}, "x": "name"}', id="bare-no-name"),
    ],
)
def test_a_json_answer_whose_top_level_keys_are_not_a_calls_is_content(
    syntax: CallSyntax, text: str
) -> None:
    assert parse_reply(text, syntax) == Reply(content=text, calls=())


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        pytest.param(S.LLAMA3_JSON, '{"name": "clock", "parameters": {}}', id="llama-parameters"),
        pytest.param(S.LLAMA3_JSON, '{"name": "clock", "arguments": {}}', id="llama-arguments"),
        pytest.param(S.BARE_JSON, '{"name": "clock", "arguments": {}}', id="bare-arguments"),
    ],
)
def test_top_level_name_and_arguments_are_a_call(syntax: CallSyntax, text: str) -> None:
    assert parse_reply(text, syntax) == Reply(content="", calls=(ToolCall("clock", "{}"),))


def test_json_that_is_not_json_but_opens_as_a_call_is_a_problem() -> None:
    (got,) = parse_reply('{"name": "clock", "parameters": {"a": }}', S.LLAMA3_JSON).calls
    assert isinstance(got, BadToolCall)
