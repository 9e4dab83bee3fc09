"""Every template family holds a long session, through the real turn loop.

For each fixture of `template_families.FAMILIES`, a scripted model speaking that
family's language (its calls exactly as its template renders them, a reasoning
block where the template knows `<think>`) goes through three owner turns with the
real `TurnLoop`, the dialect made from the real template (`core.model.dialect`), a fake
brokerd on a real socket answering through the real `BrokerPort`:

    owner   Read my notes, please.
    model   [reasoning] a call (call_tool read_file)     -> brokerd: a result
    model   [reasoning] a second call (call_tool)        -> brokerd: denied, and the
                                                            model reads the denial
                                                            as loopd writes it
    model   [reasoning] an answer
    owner   What time is it?
    model   [reasoning] a call (clock)                   -> loopd's own result
    model   an answer
    owner   Thanks!
    model   [reasoning] an answer

Two things are checked. **The replay guarantee**: each prompt the model was given
is the one before, the reply it wrote after it, and more. **The template's own
rendering**: the prompt for the next reply, taken apart by its stretches, is the
template's own rendering (`template_families.own`) of the same conversation as
Hugging Face is handed it (a reply that made calls as `tool_calls` with their ids
and its reasoning as `reasoning_content`; a result with the id of the call it
answers), except for the differences docs/models.md writes down. Each such reason
is a named, narrow transformation below (`REASONS`), and a family lists the ones
it needs (`EXPECTED`): any other difference fails the test.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.template_families import (
    EOS,
    FAMILIES,
    RESULT,
    call_text,
    own,
    prompt_for,
    structured_calls,
    system_message,
)

from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.home import layout
from boxmaker.core.labels import DataClass
from boxmaker.core.model.call_ids import has_form
from boxmaker.core.model.dialect import Dialect, from_template
from boxmaker.core.model.template_prompt import TemplatePrompt
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.core.wire.broker import DeniedResponse, ResultResponse
from boxmaker.loopd.broker_port import BrokerPort
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, ToolEntry, UserEntry
from boxmaker.loopd.tools import denial_text, system_prompt
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home
from boxmaker.testing.peer_scripts import answer, sequence
from boxmaker.testing.scripted_model import ScriptedModel
from boxmaker.testing.sockets import ScriptedServer

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OWNER = ("Read my notes, please.", "What time is it?", "Thanks!")
READ_A = {"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "/n/a.md"}}}
READ_B = {"name": "call_tool", "arguments": {"name": "read_file", "arguments": {"path": "/n/b.md"}}}
CLOCK: dict[str, Any] = {"name": "clock", "arguments": {}}
DENIED = denial_text(DenyReason.NO_GRANT, None)
ANSWERS = ("Your notes say two things.", "It is noon.", "You are welcome.")


@dataclass(frozen=True)
class Step:
    """One reply of the session: the call it makes, or its answer (the model reasons
    first where its family does)."""

    call: dict[str, Any] | None = None
    answer: str = ""


# owner turn -> its replies
SESSION = (
    (Step(READ_A), Step(READ_B), Step(answer=ANSWERS[0])),
    (Step(CLOCK), Step(answer=ANSWERS[1])),
    (Step(answer=ANSWERS[2]),),
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


# -- the family's model ------------------------------------------------------------------


def reasons(prompt: TemplatePrompt) -> bool:
    """Whether the family's model writes a reasoning block: its template knows `<think>`."""
    return prompt.facts.reasoning == ("<think>", "</think>")


def thought(index: int) -> str:
    return f"I should do step {index}."


def reasoning_text(prompt: TemplatePrompt, index: int) -> str:
    """The reasoning block as the model writes it: opened by the prompt or by itself."""
    opened = "" if prompt.facts.opens_reasoning else "<think>\n"
    return f"{opened}{thought(index)}\n</think>\n\n"


def dialect_for(prompt: TemplatePrompt) -> Dialect:
    """The dialect loopd makes of the template (no marker is one token of the scripted
    model's vocabulary but its own, so none is neutralised)."""
    return from_template(prompt, EOS, lambda text: False, ())


@dataclass
class Session:
    prompt: TemplatePrompt
    model: ScriptedModel
    loop: TurnLoop
    logs: SessionLogs
    replies: list[str]
    answers: list[str]


def drive(name: str, home: Path) -> Session:
    """The session above, through the real turn loop, for family `name`."""
    prompt = prompt_for(name)
    close = next(f[1] for f in FAMILIES if f[0] == name)
    replies: list[str] = []
    index = 0
    for turn in SESSION:
        for step in turn:
            text = reasoning_text(prompt, index) if reasons(prompt) else ""
            if step.call is None:
                text += step.answer
            elif prompt.facts.syntax is None:  # the syntax loopd teaches instead
                text += f"<tool_call>\n{json.dumps(step.call)}\n</tool_call>"
            else:  # as the template writes it, with an id of the model's own
                made = structured_calls(prompt, [(step.call, f"c{index}b2c3D4e")])
                text += written_call(prompt, made, close)
            replies.append(text)
            index += 1
    model = ScriptedModel(list(replies))
    logs = SessionLogs(home)
    port = BrokerPort(layout.Home(home).broker_socket, 5_000)
    loop = TurnLoop(
        model, dialect_for(prompt), logs, port, TurnLimits(stream_interval_s=0), lambda: NOW
    )
    result = ResultResponse(
        content=RESULT, class_=DataClass.PUBLIC, untrusted=False, truncated=False
    )
    script = sequence(answer(result), answer(DeniedResponse(reason=DenyReason.NO_GRANT)))
    answers = []
    with ScriptedServer(layout.Home(home).broker_socket, script):
        for number, words in enumerate(OWNER):
            answers.append(loop.run("long", words, number > 0, lambda event: None).content)
    return Session(prompt, model, loop, logs, replies, answers)


def written_call(prompt: TemplatePrompt, message: dict[str, Any], close: str) -> str:
    """The call of `message` as the family's model writes it: as its template renders it."""
    history = [{"role": "user", "content": "u"}]
    return call_text(prompt, [*history, message], close)


# -- the same conversation, as Hugging Face is handed it --------------------------------


def conversation(session: Session) -> list[dict[str, Any]]:
    """The session's log as the messages Hugging Face's apply_chat_template is given."""
    prompt = session.prompt
    facts = prompt.facts
    dialect = dialect_for(prompt)
    system = system_prompt(dialect.teach, dialect.prompt_teaches_syntax)
    messages: list[dict[str, Any]] = [system_message(prompt, system)] if facts.system_role else []
    pending = "" if facts.system_role else system
    reply = 0
    for entry in session.logs.open("long").entries:
        if isinstance(entry, ModelEntry):
            text = entry.text
            if entry.calls and facts.structured:
                calls = [(json_call(c.name, c.arguments), c.id) for c in entry.calls]
                thinking = thought(reply) if reasons(prompt) and "</think>" in text else ""
                messages.append(structured_calls(prompt, calls, thinking))
            else:
                messages.append({"role": "assistant", "content": text})
            reply += 1
            continue
        if isinstance(entry, ToolEntry) and facts.tool_role:
            messages.append(
                {
                    "role": "tool",
                    "content": entry.content,
                    "name": entry.name,
                    "tool_call_id": entry.answers,
                }
            )
            continue
        if isinstance(entry, ToolEntry):
            text = f"[result of {entry.name}]\n{entry.content}"
        else:
            assert isinstance(entry, UserEntry)  # no memory, notice or compaction here
            text = entry.text
        if pending:
            text, pending = f"{pending}\n\n{text}", ""
        if messages and messages[-1]["role"] == "user" and not facts.tool_role:
            messages[-1]["content"] += f"\n\n{text}"
        else:
            messages.append({"role": "user", "content": text})
    return messages


def json_call(name: str, arguments: str) -> dict[str, Any]:
    return {"name": name, "arguments": json.loads(arguments)}


# -- the written reasons (docs/models.md), each a named, narrow transformation ------------

Transform = Callable[[str, str, "Session"], tuple[str, str]]
TOOLS_BLOCK = re.compile(r"\[AVAILABLE_TOOLS\].*?\[/AVAILABLE_TOOLS\]", re.DOTALL)
DS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>"
DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
DS_OUTPUTS_END = "<\uff5ctool\u2581outputs\u2581end\uff5c>"
DS_ASSISTANT = "<\uff5cAssistant\uff5c>"
DS_END = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def earlier_reasoning_dropped(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: the template drops an earlier reply's reasoning block; loopd replays the
    reply as written. Each block the template's rendering lacks goes from loopd's, with
    the opener the generation prompt wrote for it."""
    for index in range(len(session.replies)):
        if thought(index) not in theirs:
            block = re.compile(rf"(<think>\n)?{re.escape(thought(index))}\n</think>\n\n")
            mine = block.sub("", mine, count=1)
    return mine, theirs


def tools_block_kept(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: Mistral writes its tools block before the last user turn only; loopd's
    prompt keeps each where it first stood. All but loopd's last go."""
    blocks = list(TOOLS_BLOCK.finditer(mine))
    for block in reversed(blocks[:-1]):
        mine = mine[: block.start()] + mine[block.end() :]
    return mine, theirs


def system_text_kept(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: Mistral Nemo writes the system text only in a user turn that is the last
    message; loopd's prompt keeps it where it first stood. loopd's copies go but as many
    of the last as the template's rendering has."""
    dialect = dialect_for(session.prompt)
    text = system_prompt(dialect.teach, dialect.prompt_teaches_syntax) + "\n\n"
    keep = theirs.count(text)
    spots = [m.start() for m in re.finditer(re.escape(text), mine)]
    for at in reversed(spots[: len(spots) - keep]):
        mine = mine[:at] + mine[at + len(text) :]
    return mine, theirs


def result_closed_as_last(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: Hermes closes a result with `</tool_response>` when it is the last
    message and `</tool_response>\\n` once one follows; loopd keeps the first."""
    return mine, theirs.replace("</tool_response>\n<|im_end|>", "</tool_response><|im_end|>")


def later_call_continues_first_block(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: DeepSeek-R1's template never resets its first-call flag, so it writes
    every later call as a continuation of the session's first block (`\\n` and the call,
    no turn marker, no block opener, no end of the tool outputs before it; the Llama
    distill also closing the block after it) where the model, prompted after its turn
    marker or the end of the tool outputs, wrote a whole block. (The first block is the
    first after the first turn marker: the system text teaches the syntax with one.)"""
    first = mine.find(DS_BEGIN, mine.find(DS_ASSISTANT))
    head, tail = mine[: first + len(DS_BEGIN)], mine[first + len(DS_BEGIN) :]
    for before in (DS_OUTPUTS_END, DS_ASSISTANT):
        tail = tail.replace(before + DS_BEGIN, "\n" + DS_CALL_BEGIN)
    return head + tail, theirs


def later_call_closed_by_template(mine: str, theirs: str, session: Session) -> tuple[str, str]:
    """Reason 1: DeepSeek-R1-Distill-Llama's template closes the call block only after a
    later call (its calls-end marker); the model wrote each call as the template writes
    the first, unclosed. The closer goes from each later call of the template's."""
    first = theirs.find(DS_BEGIN, theirs.find(DS_ASSISTANT))
    head, tail = theirs[: first + len(DS_BEGIN)], theirs[first + len(DS_BEGIN) :]
    return mine, head + tail.replace(DS_CALL_END + DS_CALLS_END + DS_END, DS_CALL_END + DS_END)


REASONS: dict[str, Transform] = {
    "earlier_reasoning_dropped": earlier_reasoning_dropped,
    "tools_block_kept": tools_block_kept,
    "system_text_kept": system_text_kept,
    "result_closed_as_last": result_closed_as_last,
    "later_call_continues_first_block": later_call_continues_first_block,
    "later_call_closed_by_template": later_call_closed_by_template,
}


# the reasons each family's long session differs from its template's own rendering by
EXPECTED: dict[str, tuple[str, ...]] = {
    "Qwen-Qwen3-0.6B": ("earlier_reasoning_dropped",),
    "Qwen3-Coder": (),
    "Qwen3.5-4B": ("earlier_reasoning_dropped",),
    "Qwen-QwQ-32B": ("earlier_reasoning_dropped",),
    "Qwen-Qwen2.5-7B-Instruct": (),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        "earlier_reasoning_dropped",
        "later_call_continues_first_block",
    ),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (
        "earlier_reasoning_dropped",
        "later_call_continues_first_block",
        "later_call_closed_by_template",
    ),
    "meta-llama-Llama-3.1-8B-Instruct": (),
    "meta-llama-Llama-3.2-3B-Instruct": (),
    "meta-llama-Llama-3.3-70B-Instruct": (),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("result_closed_as_last",),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("result_closed_as_last",),
    "mistralai-Mistral-Nemo-Instruct-2407": ("tools_block_kept", "system_text_kept"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("tools_block_kept",),
    "microsoft-Phi-3.5-mini-instruct": (),
    "llama-cpp-microsoft-Phi-4-mini-instruct": (),
    "microsoft-Phi-4-mini-instruct": (),
    "google-gemma-2-2b-it": (),
    "google-gemma-3-it": (),
    "google-gemma-4-31B-it": (),
}
NAMES = [f[0] for f in FAMILIES]


def test_every_family_has_its_reasons_written_down() -> None:
    assert sorted(EXPECTED) == sorted(NAMES)
    assert {r for reasons in EXPECTED.values() for r in reasons} == set(REASONS)


@pytest.mark.parametrize("name", NAMES)
def test_a_long_session_goes_through_the_turn_loop(name: str, home: Path) -> None:
    """Every reply was read as written: the calls ran (the denial read as loopd writes
    it), each turn ended with its answer, and each prompt extends the one before."""
    session = drive(name, home)
    assert session.answers == list(ANSWERS)
    assert len(session.model.prompts) == len(session.replies)
    for k in range(1, len(session.replies)):
        before = session.model.prompt_text(k - 1) + session.replies[k - 1]
        assert session.model.prompt_text(k).startswith(before), f"prompt {k}"
    entries = session.logs.open("long").entries
    results = [e for e in entries if isinstance(e, ToolEntry)]
    assert [r.content for r in results][1] == DENIED
    assert [r.name for r in results] == ["call_tool", "call_tool", "clock"]


@pytest.mark.parametrize("name", NAMES)
def test_each_result_carries_the_id_of_the_call_it_answers(name: str, home: Path) -> None:
    session = drive(name, home)
    entries = session.logs.open("long").entries
    for at, entry in enumerate(entries):
        if isinstance(entry, ToolEntry):
            (call,) = next(e for e in entries[at::-1] if isinstance(e, ModelEntry)).calls
            assert entry.answers == call.id
            assert has_form(call.id)
    if session.prompt.facts.syntax is CallSyntax.MISTRAL:  # the model's own ids, kept
        made = [e.calls[0].id for e in entries if isinstance(e, ModelEntry) and e.calls]
        assert made == ["c0b2c3D4e", "c1b2c3D4e", "c3b2c3D4e"]
        for call_id in made:
            assert session.model.prompt_text().count(call_id) == 2  # the call, its result


@pytest.mark.parametrize("name", NAMES)
def test_a_long_session_is_the_templates_own_rendering_but_for_the_written_reasons(
    name: str, home: Path
) -> None:
    """Each prompt the model was given is the template's own rendering of the same
    conversation, once the family's written reasons are applied; each reason it names
    is needed by some prompt."""
    session = drive(name, home)
    messages = conversation(session)
    replies = [at for at, m in enumerate(messages) if m["role"] == "assistant"]
    assert len(replies) == len(session.replies)
    used: set[str] = set()
    for k, at in enumerate(replies):
        mine, theirs = session.model.prompt_text(k), own(session.prompt, messages[:at], True)
        for reason in EXPECTED[name]:
            changed = REASONS[reason](mine, theirs, session)
            used |= {reason} if changed != (mine, theirs) else set()
            mine, theirs = changed
        assert mine == theirs, f"prompt {k} differs otherwise than for {EXPECTED[name]}"
    assert used == set(EXPECTED[name])
