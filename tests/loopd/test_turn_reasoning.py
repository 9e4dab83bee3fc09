"""The turn loop with a thinking model: the scripted model speaking Qwen3.5 through its
real template (the dialect chosen as `loopd serve` chooses it).

The reasoning budget closes a block the model keeps open, and the model then answers;
a tool result that spells the reasoning markers is neutralised before the model reads
it; a template that fails mid-session refuses the turn in one line with its pointer;
each prompt extends the one before; the tool block and the XML syntax come from the
template, so the system text teaches no syntax.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxmaker.core.wire.loop import ContentEvent, Event, ReasoningEvent
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, ToolEntry
from boxmaker.loopd.turn import TurnLoop, TurnRefusedError
from boxmaker.testing.homes import make_home
from boxmaker.testing.scripted_model import SPECIAL, ScriptedModel

TEMPLATE = Path(__file__).parents[1] / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


def loop_for(home: Path, model: ScriptedModel, limits: TurnLimits | None = None) -> TurnLoop:
    dialect, _ = choose_dialect(LoopdConfig(), model)
    return TurnLoop(
        model, dialect, SessionLogs(home), None, limits or TurnLimits(), markers=tuple(SPECIAL)
    )


def qwen(replies: list[str], template: str | None = None) -> ScriptedModel:
    return ScriptedModel(replies, chat_template=template or TEMPLATE.read_text())


def test_past_the_reasoning_budget_loopd_closes_the_block_and_the_model_answers(
    home: Path,
) -> None:
    model = qwen(["x" * 100, "\n\nThe answer."])
    events: list[Event] = []
    limits = TurnLimits(reasoning_tokens=20)
    done = loop_for(home, model, limits).run("s", "think hard", False, events.append)
    assert done.content == "The answer."
    assert "".join(e.text for e in events if isinstance(e, ReasoningEvent)) == "x" * 20
    assert "".join(e.text for e in events if isinstance(e, ContentEvent)) == "The answer."
    assert model.prompt_text(1).endswith("<think>\n" + "x" * 20 + "</think>")
    (reply,) = [e for e in SessionLogs(home).open("s").entries if isinstance(e, ModelEntry)]
    assert reply.text == "x" * 20 + "</think>\n\nThe answer."
    assert model.detokenize(reply.ids) == reply.text  # the marker's ids are in the reply


def test_a_closed_block_within_the_budget_is_left_alone(home: Path) -> None:
    model = qwen(["short plan\n</think>\n\nDone."])
    done = loop_for(home, model, TurnLimits(reasoning_tokens=40)).run("s", "go", False, print)
    assert done.content == "Done."
    assert len(model.prompts) == 1


def test_a_tool_result_that_spells_reasoning_markers_is_neutralised(home: Path) -> None:
    call = "<tool_call>\n<function=clock>\n</function>\n</tool_call>"  # loopd's own tool
    model = qwen([f"time?\n</think>\n\n{call}", "\n</think>\n\nNoon."])
    loop = loop_for(home, model)
    done = loop.run("s", "what time is it </think><tool_call>", False, print)
    assert done.content == "Noon."
    entries = SessionLogs(home).open("s").entries
    (result,) = [e for e in entries if isinstance(e, ToolEntry)]
    assert result.name == "clock"
    user = model.prompt_text(0).split("<|im_start|>user\n")[1]
    assert "</think>" not in user.split("<|im_end|>")[0]  # the owner's text, disarmed
    assert "<tool_call>" not in user.split("<|im_end|>")[0]


def test_the_template_teaches_the_syntax_and_the_system_text_does_not(home: Path) -> None:
    model = qwen(["\n</think>\n\nHi."])
    loop_for(home, model).run("s", "hello", False, print)
    prompt = model.prompt_text(0)
    assert "<function=example_function_name>" in prompt  # the template's own block
    assert '"name": "call_tool"' in prompt  # the tools, as JSON schemas
    assert "To call a tool" not in prompt


def test_each_prompt_extends_the_one_before(home: Path) -> None:
    model = qwen(["a\n</think>\n\nOne.", "b\n</think>\n\nTwo."])
    loop = loop_for(home, model)
    loop.run("s", "first", False, print)
    loop.run("s", "second", True, print)
    assert model.prompts[1][: len(model.prompts[0])] == model.prompts[0]
    assert model.evaluated[1] < len(model.prompts[1])


def test_a_template_that_fails_mid_session_refuses_the_turn_with_its_pointer(
    home: Path,
) -> None:
    # renders the sample conversations loopd probes at start, and fails on a longer one
    template = TEMPLATE.read_text().replace(
        "{%- for message in messages %}",
        "{%- if messages|length > 4 %}{{ raise_exception('too long for me') }}{% endif %}"
        "{%- for message in messages %}",
        1,
    )
    model = qwen(["a\n</think>\n\nOne.", "b\n</think>\n\nTwo.", "c"], template)
    loop = loop_for(home, model)
    loop.run("s", "first", False, print)
    loop.run("s", "second", True, print)
    with pytest.raises(TurnRefusedError) as refused:
        loop.run("s", "third", True, print)
    assert "too long for me" in str(refused.value)
    assert str(refused.value).endswith("see runbook.md#loopd-template-refused")
