"""A turn in the owner's model's own language, end to end: the real `brokerd` console
script on a temporary home, and loopd's turn loop (in this process) with a scripted
model that speaks Qwen3.5: its real chat template (tests/fixtures/chat_templates/
Qwen3.5-4B.jinja, the family of the owner's Ornith 1.5), reasoning opened by the
generation prompt, then an XML call to call_tool for read_file, then an answer.

The dialect is chosen the way `loopd serve` chooses it (`loopd.dialects.choose_dialect`
over the model's own template). brokerd decides no_grant and writes one Decision; the
owner sees the reasoning as reasoning events and never in the answer; and a call the
model only drafted inside its reasoning never reaches brokerd.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from boxmaker.core.audit.records import DecisionEvent
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home.layout import Home
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.core.wire.loop import (
    ContentEvent,
    Event,
    ReasoningEvent,
    ToolCallStartedEvent,
    ToolDeniedEvent,
)
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_dialect, self_test
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home, read_records, verify_log, write_config
from boxmaker.testing.processes import DaemonProcess
from boxmaker.testing.scripted_model import SPECIAL, ScriptedModel

pytestmark = pytest.mark.e2e

TEMPLATE = Path(__file__).parents[1] / "fixtures" / "chat_templates" / "Qwen3.5-4B.jinja"
ARGUMENTS = {"path": "/home/owner/notes/a.md"}
XML_CALL = (
    "<tool_call>\n<function=call_tool>\n<parameter=name>\nread_file\n</parameter>\n"
    f"<parameter=arguments>\n{json.dumps(ARGUMENTS)}\n</parameter>\n</function>\n</tool_call>"
)
THINKING = "The owner wants the notes. I will read the file."
ANSWER = "I may not read that file: no grant allows it."


def run_turn(tmp_path: Path, replies: list[str]) -> tuple[Path, ScriptedModel, list[Event], str]:
    home = make_home(tmp_path)
    grants = tmp_path / "grants"
    grants.mkdir()
    config = write_config(tmp_path / "brokerd.toml", home, grants)
    model = ScriptedModel(replies, chat_template=TEMPLATE.read_text())
    dialect, why = choose_dialect(LoopdConfig(), model)
    assert why == "the model's own chat template"
    assert (dialect.syntax, dialect.opens_reasoning) == (CallSyntax.XML, True)
    assert self_test(model, dialect) == []
    events: list[Event] = []
    with DaemonProcess(config) as brokerd:
        brokerd.wait_serving([Home(home).broker_socket, Home(home).admin_socket])
        loop = TurnLoop(
            model,
            dialect,
            SessionLogs(home),
            BrokerPort(Home(home).broker_socket, 10_000),
            TurnLimits(),
            markers=tuple(SPECIAL),
        )
        done = loop.run("chat-1", "read my notes", False, events.append)
        status = brokerd.stop()
    assert status == 0, brokerd.stderr
    return home, model, events, done.content


def test_reasoning_then_an_xml_call_is_decided_once_and_the_answer_is_clean(
    tmp_path: Path,
) -> None:
    first = f"{THINKING}\n</think>\n\n{XML_CALL}"
    second = f"The call was denied.\n</think>\n\n{ANSWER}"
    home, model, events, content = run_turn(tmp_path, [first, second])
    try:
        assert content == ANSWER
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
        assert THINKING in reasoning
        assert "The call was denied." in reasoning
        shown = "".join(e.text for e in events if isinstance(e, ContentEvent))
        assert shown == ANSWER
        assert "</think>" not in shown
        assert THINKING not in shown
        assert ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT) in events
        # the prompt opened the reasoning; the template's own markers frame the turn
        assert model.prompt_text(0).endswith("<|im_start|>assistant\n<think>\n")
        assert "<tools>" in model.prompt_text(0)  # the template's own tools block
        assert "<tool_response>\nDenied: no grant allows this call.\n</tool_response>" in (
            model.prompt_text(1)
        )
        report = verify_log(home)
        assert report.ok, report.failure
        assert report.records == 1
        (record,) = read_records(home)
        assert isinstance(record.event, DecisionEvent)
        assert (record.event.tool, json.loads(record.event.arguments)) == ("read_file", ARGUMENTS)
    finally:
        if home.parent != tmp_path:
            shutil.rmtree(home.parent)


def test_a_call_written_inside_reasoning_never_reaches_brokerd(tmp_path: Path) -> None:
    drafted = f"Maybe I should call {XML_CALL} but no, I will not.\n</think>\n\nI will not read it."
    home, model, events, content = run_turn(tmp_path, [drafted])
    try:
        assert content == "I will not read it."
        assert not [e for e in events if isinstance(e, ToolCallStartedEvent)]
        assert len(model.prompts) == 1  # no tool result came back: the model ran once
        report = verify_log(home)
        assert report.ok, report.failure
        assert report.records == 0  # nothing was decided: brokerd never heard of it
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningEvent))
        assert "<function=call_tool>" in reasoning  # shown as reasoning, dimmed
    finally:
        if home.parent != tmp_path:
            shutil.rmtree(home.parent)


def test_a_call_after_reasoning_the_model_never_closed_runs(tmp_path: Path) -> None:
    """Rule 2 of core.model.reasoning: Qwen3.5 may go from thinking to a call without `</think>`."""
    first = f"{THINKING}\n\n{XML_CALL}"
    home, _, events, content = run_turn(tmp_path, [first, f"\n</think>\n\n{ANSWER}"])
    try:
        assert content == ANSWER
        assert ToolDeniedEvent(name="read_file", reason=DenyReason.NO_GRANT) in events
        assert verify_log(home).records == 1
    finally:
        if home.parent != tmp_path:
            shutil.rmtree(home.parent)
