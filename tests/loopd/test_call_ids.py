"""A reply's call ids (core.model.call_ids): the model's own where it wrote one of the form a
template is handed, else a new one; and a Mistral model that writes none gets one its
template accepts, carried by the result that answers the call, through the turn loop."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.template_families import EOS, prompt_for

from boxmaker.core.model.call_ids import call_ids, has_form, written_ids
from boxmaker.core.model.dialect import from_template
from boxmaker.core.model.tool_calls import CallSyntax, parse_reply
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, ToolEntry
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home
from boxmaker.testing.scripted_model import ScriptedModel

NEMO = '[TOOL_CALLS][{"name": "clock", "arguments": {}, "id": "a1B2c3D4e"}, {"name": "clock", "arguments": {}}]'
SMALL = "[TOOL_CALLS]clock[CALL_ID]a1B2c3D4e[ARGS]{}[TOOL_CALLS]clock[ARGS]{}"


@pytest.mark.parametrize(
    ("answer", "count", "ids"),
    [
        pytest.param(NEMO, 2, ("a1B2c3D4e", None), id="nemo-list"),
        pytest.param(SMALL, 2, ("a1B2c3D4e", None), id="small-call-id"),
        pytest.param(
            '[TOOL_CALLS]{"name": "clock", "arguments": {}, "id": "x"}',
            1,
            (None,),
            id="not-the-form",
        ),
        pytest.param(
            '[TOOL_CALLS]{"name": "clock", "arguments": {}, "id": "<s>[INST]x"}',
            1,
            (None,),
            id="markers",
        ),
        pytest.param("[TOOL_CALLS][{broken", 1, (None,), id="unreadable"),
    ],
)
def test_the_ids_the_model_wrote_are_read_in_order(
    answer: str, count: int, ids: tuple[str | None, ...]
) -> None:
    calls = parse_reply(answer, CallSyntax.MISTRAL).calls
    assert len(calls) == count
    assert written_ids(calls) == ids


def test_a_syntax_with_no_ids_gives_none() -> None:
    calls = parse_reply('<tool_call>{"name": "clock"}</tool_call>', CallSyntax.TAGGED_JSON).calls
    assert written_ids(calls) == (None,)


def test_an_id_is_the_models_own_else_a_new_one_never_twice_in_a_reply() -> None:
    made = itertools.chain(["a1B2c3D4e", "zzzzzzzzz"], itertools.repeat("yyyyyyyyy"))
    ids = call_ids(["a1B2c3D4e", None, "a1B2c3D4e"], lambda: next(made))
    assert ids == ("a1B2c3D4e", "zzzzzzzzz", "yyyyyyyyy")
    assert all(has_form(i) for i in ids)
    with pytest.raises(ValueError, match="call id"):
        call_ids([None], lambda: "000000001x")


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    made = make_home(tmp_path)
    yield made
    if made.parent != tmp_path:
        shutil.rmtree(made.parent)


@pytest.mark.parametrize(
    ("name", "call", "result"),
    [
        pytest.param(
            "mistralai-Mistral-Nemo-Instruct-2407",
            '[TOOL_CALLS][{"name": "clock", "arguments": {}}]',
            '[TOOL_RESULTS]{"content": The time',
            id="nemo",
        ),
        pytest.param(
            "Mistral-Small-3.2-24B-Instruct-2506",
            "[TOOL_CALLS]clock[ARGS]{}",
            "[TOOL_RESULTS]",
            id="small-3.2",
        ),
    ],
)
def test_a_mistral_call_written_with_no_id_gets_one_its_template_accepts(
    name: str, call: str, result: str, home: Path
) -> None:
    """Call, result, answer, owner, a second call: one session, no refusal."""
    prompt = prompt_for(name)
    model = ScriptedModel([call, "It is noon.", call, "Still noon."])
    logs = SessionLogs(home)
    loop = TurnLoop(
        model,
        from_template(prompt, EOS, lambda t: False, ()),
        logs,
        None,
        TurnLimits(stream_interval_s=0),
    )
    assert loop.run("m", "What time is it?", False, lambda e: None).content == "It is noon."
    assert loop.run("m", "And now?", True, lambda e: None).content == "Still noon."
    entries = logs.open("m").entries
    made = [e.calls[0].id for e in entries if isinstance(e, ModelEntry) and e.calls]
    answered = [e.answers for e in entries if isinstance(e, ToolEntry)]
    assert made == answered
    assert all(has_form(i) for i in made)
    assert made[0] != made[1]
    last = model.prompt_text()
    for call_id in made:  # written once each, by the result that answers its call
        assert last.count(call_id) == 1
        assert result in last
    assert "000000001" not in last
