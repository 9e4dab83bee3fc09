"""A call syntax is one row (`core.model.tool_calls.SyntaxRow`): reading, holding calls
back while a reply streams, the markers the text must show, and teaching all come from
it. A row made here, and every row of the table, is seen by each of them."""

from __future__ import annotations

import json

import pytest

from boxmaker.core.model.call_syntaxes import read_json_call
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.model.tool_calls import (
    SYNTAXES,
    CallSyntax,
    SyntaxRow,
    ToolCall,
    parse_reply,
    syntax_markers,
)
from boxmaker.loopd.tools import SCHEMAS, system_prompt

READ = json.dumps({"name": "read_file", "arguments": {"path": "/w/a.md"}}, separators=(",", ":"))
CALL = json.dumps({"name": "call_tool", "arguments": json.loads(READ)})

# a syntax no model writes: its own opener and closer around a JSON call
ANGLE = SyntaxRow(
    "angle_json",
    ("<<call>>",),
    f"<<call>>{CALL}<</call>>",
    closer="<</call>>",
    read_span=lambda body, closed, schemas: [read_json_call(body.strip())],
)


def test_a_new_row_is_read() -> None:
    reply = parse_reply(f"Reading it. {ANGLE.example} Then I answer.", ANGLE, SCHEMAS)
    assert reply.calls == (ToolCall("call_tool", READ),)
    assert reply.content == "Reading it.  Then I answer."


def test_a_new_rows_unclosed_call_is_a_problem_not_content() -> None:
    reply = parse_reply(f"Reading it. <<call>>{CALL}", ANGLE, SCHEMAS)
    assert reply.content == "Reading it."
    assert [type(c).__name__ for c in reply.calls] == ["BadToolCall"]
    assert "<</call>>" in str(reply.calls[0])


@pytest.mark.parametrize("size", [1, 2, 5])
def test_a_new_rows_calls_are_held_back_while_streaming(size: int) -> None:
    text = f"Reading it. {ANGLE.example} Then I answer."
    stream = ReplyStream(ANGLE, SCHEMAS)
    shown = ""
    for at in range(0, len(text), size):
        shown += stream.feed(text[at : at + size])
        assert "<" not in shown, shown  # not even the start of the opener
    shown += stream.finish()
    assert shown == parse_reply(text, ANGLE, SCHEMAS).content


def test_a_new_row_is_taught_and_its_markers_shown() -> None:
    assert f"To call a tool, write {ANGLE.example}\n" in system_prompt(ANGLE)
    assert syntax_markers(ANGLE) == ("<<call>>", "<</call>>")


@pytest.mark.parametrize("syntax", list(CallSyntax), ids=str)
def test_every_rows_teaching_reads_back_with_its_own_reader(syntax: CallSyntax) -> None:
    # a template with no tools block is taught its own syntax, never another's
    row = SYNTAXES[syntax]
    taught = system_prompt(syntax).split("To call a tool, ", 1)[1].split("\nWhen you", 1)[0]
    assert taught == row.taught
    assert row.example in taught
    reply = parse_reply(row.example, syntax, SCHEMAS)
    path = "/home/owner/notes/todo.md"
    read = {"name": "read_file", "arguments": {"path": path}}
    calls = [c for c in reply.calls if isinstance(c, ToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("call_tool", read)], reply
    assert len(calls) == len(reply.calls)
    assert reply.content == ""
