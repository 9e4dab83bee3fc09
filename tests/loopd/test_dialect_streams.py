"""For each family's real template, a reply streamed in any pieces gives what the whole
reply gives: the same reasoning, content and calls (core.model.reasoning, then
core.model.reply_stream, as the turn loop chains them).

The replies are built as the family's model writes them: its reasoning block where its
template has markers (opened by the prompt where the template opens it), content, and
the call exactly as its template renders a structured call
(tests/loopd/test_template_prompts.py takes it from the template's own rendering).
"""

from __future__ import annotations

import itertools
import json
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.template_families import CALL, FAMILIES, assistant_text, prompt_for

from boxmaker.core.model.reasoning import ReasoningMarkers, ReasoningStream, split_reasoning
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.model.template_prompt import TemplatePrompt
from boxmaker.core.model.tool_calls import WHOLE_REPLY, ToolCall, parse_reply
from boxmaker.loopd.tools import SCHEMAS

WRITERS = [f for f in FAMILIES if f[2] is not None]
plain = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="<>[]{}|`\\\x1f"), max_size=30
)


@cache
def family(name: str, close: str) -> tuple[TemplatePrompt, str]:
    prompt = prompt_for(name)
    return prompt, assistant_text(prompt, close)[0]


def pieces(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@pytest.mark.parametrize(("name", "close", "syntax", "exact"), WRITERS, ids=[f[0] for f in WRITERS])
@settings(max_examples=40, deadline=None)
@given(thought=plain, said=plain, cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_gives_the_same_reasoning_content_and_calls(
    name: str, close: str, syntax: object, exact: bool, thought: str, said: str, cuts: list[int]
) -> None:
    prompt, written = family(name, close)
    facts = prompt.facts
    assert facts.syntax is not None
    if facts.syntax in WHOLE_REPLY:  # the call is the whole answer, or it is no call
        said = ""
    call = written.split(facts.reasoning[1])[-1].strip() if facts.reasoning else written.strip()
    markers = ReasoningMarkers(*facts.reasoning) if facts.reasoning else None
    reply = f"{said.strip()} {call}" if said.strip() else call
    if markers is not None:
        opening = "" if facts.opens_reasoning else markers.open
        reply = f"{opening}{thought}{markers.close}\n\n{reply}"
    openers = tuple(o for o in ("<tool_call>", "<|tool_call>", "[TOOL_CALLS]") if o in call)

    thinking = ReasoningStream(markers, opened=facts.opens_reasoning, openers=openers)
    answer = ReplyStream(facts.syntax)
    reasoning, content = [], []
    for piece in pieces(reply, cuts):
        r, a = thinking.feed(piece)
        reasoning.append(r)
        content.append(answer.feed(a) if a else "")
    r, a = thinking.finish()
    reasoning.append(r)
    content.append((answer.feed(a) if a else "") + answer.finish())

    whole = split_reasoning(reply, markers, opened=facts.opens_reasoning, openers=openers)
    read = parse_reply(whole.answer, facts.syntax, SCHEMAS)
    assert "".join(reasoning) == whole.reasoning
    assert "".join(content) == read.content
    if markers is not None:
        assert whole.reasoning == thought
    assert read.content == said.strip()
    (found,) = read.calls
    assert isinstance(found, ToolCall)
    assert (found.name, json.loads(found.arguments)) == (CALL["name"], CALL["arguments"])
