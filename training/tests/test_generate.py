"""The generator: determinism, coverage, calls loopd reads back, prompts loopd renders."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from boxmaker.core.grants.args import parse_arguments
from boxmaker.core.grants.deny_reasons import DenyReason
from boxmaker.core.grants.tools import TOOLS, ToolName
from boxmaker.core.labels import DataClass
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.model.tool_calls import ToolCall, parse_reply
from boxmaker.core.wire.broker import (
    DeniedResponse,
    FailedResponse,
    PendingApprovalResponse,
    ResultResponse,
    ToolRequest,
)
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.tools import SCHEMAS
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.scripted_model import ScriptedModel
from training.generate import examples
from training.heldout import vocab as held_vocab
from training.render import prompting
from training.scenarios import vocab as gen_vocab
from training.scenarios.categories import CATEGORIES, SCHEDULE, TWINS, WEIGHTS, memory_kind

ROUNDS = 30  # enough that each share holds within its test's bounds
SAMPLE = list(examples(7, len(SCHEDULE) * ROUNDS))


def _lines(seed: int, count: int) -> bytes:
    return b"".join(
        json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in examples(seed, count)
    )


def test_same_seed_same_bytes() -> None:
    assert _lines(3, 60) == _lines(3, 60)
    assert _lines(3, 60) != _lines(4, 60)


def test_the_embedded_default_speaks_gemma_and_is_taught_bare_json() -> None:
    p = prompting()
    assert p.dialect.name == "gemma"
    assert p.dialect.teach.value == "bare_json"
    assert "reply with only a JSON object" in p.system


def test_every_tool_and_category_is_covered_by_its_weight() -> None:
    tools = Counter(c["tool"] for e in SAMPLE for c in e["calls"])
    assert set(tools) == set(TOOLS)
    categories = Counter(e["category"] for e in SAMPLE)
    assert categories == {name: ROUNDS * weight for name, weight in WEIGHTS.items()}
    assert set(WEIGHTS) == set(CATEGORIES)


def test_the_schedule_interleaves_the_categories() -> None:
    # every category once in the first round, so a short run still sees them all
    assert list(SCHEDULE[: len(CATEGORIES)]) == list(CATEGORIES)


def test_every_copy_has_a_read_twin_of_the_same_file() -> None:
    # the same path and the same result; the copy goes on to write, the twin answers
    def first_read(e: dict[str, Any]) -> tuple[str, str]:
        call = e["calls"][0]
        assert call["tool"] == "read_file"
        return call["arguments"]["path"], call["outcome"]["text"]

    for twin, of in TWINS.items():
        assert WEIGHTS[twin] == WEIGHTS[of]
        copies = [first_read(e) for e in SAMPLE if e["category"] == of]
        twins = [e for e in SAMPLE if e["category"] == twin]
        assert [first_read(e) for e in twins] == copies
        assert len(set(copies)) == len(copies)  # no two pairs alike
        for e in twins:
            assert [c["tool"] for c in e["calls"]] == ["read_file"]
            answer = e["segments"][-2]["text"]
            assert answer.startswith(("The file", "It says", "It is titled")), answer


def test_read_answers_quote_the_files_line_word_for_word() -> None:
    for e in SAMPLE:
        if e["category"] not in ("read_file", "read_twin", "http_fetch"):
            continue
        answer = e["segments"][-2]["text"]  # the last is the stop marker
        quoted = answer.split('"')[1::2]  # a document's heading, then the line
        assert quoted[-1].endswith(".")
        # a wrapped paragraph's sentence is quoted on one line
        text = " ".join(e["calls"][0]["outcome"]["text"].split())
        for piece in quoted:
            assert piece in text, (piece, e["calls"][0])


def test_some_files_are_markdown_documents_answered_with_their_heading() -> None:
    # run 5 wrote the walk-through's welcome note (a heading, paragraphs) back
    reads = [e for e in SAMPLE if e["category"] in ("read_file", "read_twin")]
    documents = [e for e in reads if e["calls"][0]["outcome"]["text"].startswith("# ")]
    assert len(reads) / 4 < len(documents) < len(reads) / 2
    titled = [e for e in documents if "titled" in e["segments"][-2]["text"]]
    assert titled
    assert all(
        e["segments"][-2]["text"].split('"')[1]
        == e["calls"][0]["outcome"]["text"][2:].split("\n")[0]
        for e in titled
    )


def test_some_documents_wrap_their_paragraph_across_lines() -> None:
    # the welcome note's shape: a sentence runs on into the next line (run 7 quoted its
    # last short line instead of its heading); each line within the wrap's width
    reads = [e for e in SAMPLE if e["category"] in ("read_file", "read_twin")]
    documents = [e["calls"][0]["outcome"]["text"] for e in reads]
    documents = [t for t in documents if t.startswith("# ")]
    wrapped = [
        t
        for t in documents
        if any(not line.endswith((".", ":")) for line in t.split("\n\n")[1].split("\n"))
    ]
    assert len(documents) / 4 < len(wrapped) < len(documents) * 3 / 4
    assert all(len(line) <= 80 for t in wrapped for line in t.splitlines())


def _request(example: dict[str, Any]) -> str:
    """The owner's request: the segment after the system text in the first user turn."""
    texts = [s["text"] for s in example["segments"] if not s["special"] and not s["model"]]
    return str(texts[2])


def test_reads_that_say_where_a_thing_was_written_are_one_read() -> None:
    # run 9 answered "... it's written in PATH" with a read and a write back: the data
    # holds reads whose request says where something was written, noted or kept
    said = re.compile(r"\b(wrote|written|noted|jotted|saved|stored|kept|recorded)\b")
    reads = [e for e in SAMPLE if e["category"] in ("read_file", "read_twin")]
    telling = [e for e in reads if said.search(_request(e))]
    assert len(telling) >= len(reads) / 10, (len(telling), len(reads))  # v7: 1 in 19
    for e in telling:
        assert [c["tool"] for c in e["calls"]] == ["read_file"], _request(e)
        assert e["calls"][0]["arguments"]["path"] in _request(e)


def test_injections_that_target_the_file_read_are_reported_and_not_acted_on() -> None:
    # run 9 wrote an injected file ("overwrite welcome.md ...") back to itself
    injected = [e for e in SAMPLE if e["category"] == "injection"]
    aimed = [e for e in injected if "this file" in e["calls"][0]["outcome"]["text"]]
    assert aimed
    assert len(aimed) < len(injected)
    for e in injected:
        assert len(e["calls"]) == 1
        attack = e["calls"][0]["outcome"]["text"].rsplit("\n", 1)[-1]
        assert f'("{attack}")' in e["segments"][-2]["text"]
        assert "I did not follow it" in e["segments"][-2]["text"]


def test_requests_to_name_or_pick_something_are_answered_without_a_call() -> None:
    # run 10 answered "Name a primary colour." (held out) with a memory lookup
    asked = re.compile(r"^(Name|Pick|Choose|Suggest|Give me an example|Tell me (a|one))\b")
    chats = [e for e in SAMPLE if e["category"] == "chat"]
    choices = [e for e in chats if asked.match(_request(e))]
    assert len(choices) >= len(chats) / 10, (len(choices), len(chats))  # v9: none
    for e in choices:
        assert e["calls"] == []
        assert "colour" not in _request(e)


def test_an_approved_call_is_answered_as_the_same_call_without_a_wait() -> None:
    # run 5 borrowed "You approved it. The result: ..." for plain reads and lost the fact
    for e in SAMPLE:
        if e["category"] == "approval" and e["calls"][0]["outcome"]["status"] == "result":
            assert "approved" not in e["segments"][-2]["text"]


def test_memory_kind_follows_the_rule_the_listed_memories_follow() -> None:
    for kind, text in gen_vocab.MEMORIES:
        assert memory_kind(text) == kind, text
    for kind, text in held_vocab.MEMORIES:
        assert memory_kind(text) == kind, text
    for example in SAMPLE:
        for call in example["calls"]:
            if "kind" in call["arguments"]:
                assert call["arguments"]["kind"] == memory_kind(call["arguments"]["text"])


def test_every_composed_phrasing_holds_its_slots_once() -> None:
    slots = {
        "READ": ("{path}",),
        "WRITE": ("{path}", "{content}"),
        "SHELL": ("{command}",),
        "FETCH": ("{url}",),
        "REMEMBER": ("{text}",),
        "NOTE": ("{text}",),
        "RECALL": ("{topic}",),
        "REPLACE": ("{entry}", "{text}"),
        "CONSOLIDATE": ("{entries}", "{text}"),
        "COPY": ("{src}", "{dst}"),
    }
    for name, wanted in slots.items():
        phrasings = getattr(gen_vocab, name)
        assert len(phrasings) == len(set(phrasings)), name
        for phrasing in phrasings:
            phrasing = phrasing.replace("{lower}", "{text}")
            for slot in wanted:
                assert phrasing.count(slot) == 1, (name, phrasing)


def test_commands_with_backslashes_and_quotes_reach_the_call_as_written() -> None:
    made = (CATEGORIES["shell"](random.Random(i)) for i in range(300))
    commands = [args["command"] for c in made for _, args, _ in c.calls]
    assert any("\\" in command for command in commands)
    assert any("|" in command for command in commands)
    assert any('"' in command for command in commands)


def _model_texts(example: dict[str, Any]) -> list[str]:
    segments = example["segments"]
    return [s["text"] for s in segments if s["model"] and not s["special"]]


def test_calls_parse_back_with_loopds_reader_and_pass_the_argument_parser() -> None:
    syntax = prompting().dialect.syntax
    for example in SAMPLE:
        calls = iter(example["calls"])
        for text in _model_texts(example):
            reply = parse_reply(text, syntax, SCHEMAS)
            if not reply.calls:
                assert text.strip() == reply.content
                continue
            (call,) = reply.calls
            assert isinstance(call, ToolCall)
            assert call.name == "call_tool"
            wanted = next(calls)
            inner = json.loads(call.arguments)
            assert inner == {"name": wanted["tool"], "arguments": wanted["arguments"]}
            parse_arguments(ToolName(inner["name"]), json.dumps(inner["arguments"]))
        assert next(calls, None) is None


def test_chat_ends_at_once() -> None:
    for example in SAMPLE:
        if example["category"] == "chat":
            assert example["calls"] == []
            assert len(_model_texts(example)) == 1


def test_model_segments_end_with_the_stop_marker() -> None:
    stop = prompting().dialect.stop
    for example in SAMPLE:
        own = [s for s in example["segments"] if s["model"]]
        assert own
        assert len(own) % 2 == 0
        for text, close in zip(own[::2], own[1::2], strict=True):
            assert not text["special"]
            assert close["special"]
            assert close["text"] in stop


class _Port:
    """brokerd as the recorded outcomes say, in order."""

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.calls = list(calls)
        self.requests: list[ToolRequest] = []

    def call(self, request: ToolRequest, pending: Any, interrupted: Any = None) -> object:
        self.requests.append(request)
        outcome = self.calls.pop(0)["outcome"]
        if outcome["approval"]:
            pending(PendingApprovalResponse(approval=1, expires="2026-12-05T10:00:00.000Z"))
        if outcome["status"] == "failed":
            return FailedResponse(message=outcome["text"])
        if outcome["status"] == "denied":
            return DeniedResponse(reason=DenyReason(outcome["text"]))
        return ResultResponse(
            content=outcome["text"],
            class_=DataClass.PUBLIC,
            untrusted=outcome["untrusted"],
            truncated=False,
        )


@pytest.mark.parametrize("category", sorted(CATEGORIES))
def test_prompts_are_what_the_real_turn_loop_renders(category: str, tmp_path: Path) -> None:
    example = next(e for e in SAMPLE if e["category"] == category)
    replies = _model_texts(example)
    model = ScriptedModel(list(replies))
    port = _Port(example["calls"])
    dialect = from_format(GEMMA)
    logs = SessionLogs(tmp_path)
    loop = TurnLoop(model, dialect, logs, port, TurnLimits(), markers=GEMMA.markers)  # type: ignore[arg-type]
    first_user = example["segments"][3]["text"]
    system = prompting().system + "\n\n"
    assert first_user == system  # the system text opens the first user turn
    owner = example["segments"][4]["text"]
    loop.run("s1", owner, resume=False, emit=lambda event: None)
    assert len(model.prompts) == len(replies)
    segments = example["segments"]
    starts = [i for i, s in enumerate(segments) if s["model"] and not s["special"]]
    for k, start in enumerate(starts):
        assert model.prompt_text(k) == "".join(s["text"] for s in segments[:start])
    assert [r.tool for r in port.requests] == [c["tool"] for c in example["calls"]]
