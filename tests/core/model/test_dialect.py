"""A dialect's facts derived from its syntax: which markers the model's text must show,
which openers end an unclosed reasoning block, and the hand-written formats' dialects."""

from __future__ import annotations

import pytest

from boxmaker.core.model.chat_format import CHATML, GEMMA, ChatFormat
from boxmaker.core.model.dialect import Dialect, from_format
from boxmaker.core.model.reasoning import ReasoningMarkers
from boxmaker.core.model.tool_calls import CallSyntax


def dialect(syntax: CallSyntax | None, reasoning: ReasoningMarkers | None = None) -> Dialect:
    return Dialect(
        name="t",
        render=lambda system, turns, cache: [],
        stop=(),
        markers=(),
        syntax=syntax,
        teach=CallSyntax.TAGGED_JSON,
        prompt_teaches_syntax=True,
        reasoning=reasoning,
    )


@pytest.mark.parametrize(
    ("syntax", "shown"),
    [
        pytest.param(CallSyntax.XML, ("<tool_call>", "</tool_call>"), id="xml"),
        pytest.param(
            CallSyntax.MISTRAL, ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"), id="mistral-inner-marks"
        ),
        pytest.param(CallSyntax.LLAMA3_JSON, ("<|python_tag|>",), id="llama3-no-brace"),
        pytest.param(CallSyntax.PHI4, ("<|tool_call|>", "<|/tool_call|>"), id="phi4"),
        pytest.param(CallSyntax.BARE_JSON, (), id="bare-has-no-marker"),
    ],
)
def test_the_markers_a_reply_must_show(syntax: CallSyntax, shown: tuple[str, ...]) -> None:
    assert dialect(syntax).shown == shown


def test_reasoning_markers_are_shown_first() -> None:
    think = ReasoningMarkers("<think>", "</think>")
    assert dialect(CallSyntax.XML, think).shown[:2] == ("<think>", "</think>")


def test_an_unclosed_block_ends_only_at_a_marked_opener() -> None:
    assert dialect(CallSyntax.LLAMA3_JSON).marked_openers == ("<|python_tag|>",)
    assert dialect(None).marked_openers == ("<tool_call>",)


@pytest.mark.parametrize(
    ("chat_format", "teach"),
    [(GEMMA, CallSyntax.BARE_JSON), (CHATML, CallSyntax.TAGGED_JSON)],
    ids=["gemma", "chatml"],
)
def test_a_hand_written_format_reads_both_json_forms_and_teaches_one(
    chat_format: ChatFormat, teach: CallSyntax
) -> None:
    made = from_format(chat_format)
    assert (made.syntax, made.teach, made.reasoning) == (None, teach, None)
    assert made.markers == chat_format.markers
