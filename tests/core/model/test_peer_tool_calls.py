"""Peers' own parser tests, read by loopd's own steps: where loopd agrees, and why not.

tests/fixtures/peer_tool_calls/ holds model replies taken from the tool-call and
reasoning parser tests of vLLM, sglang and llama.cpp (SOURCES.md there names each
repository, path and commit), each with what that peer expects. A case goes through
what the turn loop does with a reply: `split_reasoning` with the dialect's markers
and call openers, then `parse_reply` with the case's tool schemas; and, in pieces,
`ReasoningStream` then `ReplyStream`. The rules:

1. **An unmarked case agrees with the peer**: the content (edges stripped), the
   reasoning or the answer where the peer splits them, and each call's name and
   arguments object (a `BadToolCall` where the peer expects `{"bad": true}`).
2. **A `choice` differs on purpose.** Its one line says why; its `loopd` says what
   loopd gives instead, and the case must give exactly that. A choice that agrees
   with the peer again is stale, and fails.
3. **A `bug` is a known wrong reading**, of one of issue 37's classes. It must still
   differ from the peer, and from its `loopd` where it has one (what the mended reader
   should give, when that is not the peer's answer). The day it stops differing the
   case fails, saying to drop the mark.
4. **No truncated value reaches brokerd**, whatever the mark: no call loopd would run
   has a text argument that is a strict start of the peer's value for it.
5. **Streamed is as read**, for every case and every split (each character, fixed
   sizes, the peer's own pieces, any split hypothesis draws): what is released joins
   to exactly the final content and the reasoning, and is at each step a start of
   them, so no part of a call is ever shown.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.model.chat_format import Segment, Turn
from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.reasoning import (
    ReasoningMarkers,
    ReasoningStream,
    Split,
    split_reasoning,
)
from boxmaker.core.model.reply_stream import ReplyStream
from boxmaker.core.model.template_prompt import Stretches
from boxmaker.core.model.tool_calls import BadToolCall, CallSyntax, ToolCall, parse_reply

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "peer_tool_calls"
PEERS = ("vllm-project/vllm", "sgl-project/sglang", "ggml-org/llama.cpp")
BUG_CLASSES = ("closer-in-value", "unclosed-then-sibling", "llama-nested-name", "bare-function")
Case = Mapping[str, Any]


def load() -> list[Case]:
    cases: list[Case] = []
    for path in sorted(FIXTURES.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        cases += [{**case, "fixture": path.stem} for case in document["cases"]]
    return cases


CASES = load()
IDS = [f"{c['fixture']}/{Path(c['path']).name}::{c['test']}" for c in CASES]


@dataclass(frozen=True, slots=True)
class Outcome:
    content: str  # the reply's content, edges stripped
    reasoning: str  # its reasoning, edges stripped
    answer: str  # what is left after the reasoning, edges stripped (where calls are read)
    calls: tuple[ToolCall | BadToolCall, ...]


def _no_prompt(system: str, turns: Sequence[Turn], cache: Stretches | None) -> list[Segment]:
    raise AssertionError("a peer case never renders a prompt")


def dialect_of(case: Case) -> Dialect:
    """The dialect a model of the case's family gets: its call syntax, and its reasoning
    markers with whether the prompt opened a block."""
    markers = case["reasoning"]
    syntax = CallSyntax(case["syntax"])
    return Dialect(
        name=case["fixture"],
        render=_no_prompt,
        stop=(),
        markers=(),
        syntax=syntax,
        teach=syntax,
        prompt_teaches_syntax=True,
        reasoning=ReasoningMarkers(markers["open"], markers["close"]) if markers else None,
        opens_reasoning=bool(case.get("opened", False)),
    )


def split(case: Case) -> Split:
    dialect = dialect_of(case)
    return split_reasoning(
        case["text"],
        dialect.reasoning,
        opened=dialect.opens_reasoning,
        openers=dialect.marked_openers,
    )


def read(case: Case) -> Outcome:
    """The whole reply, read as the turn loop reads it."""
    parts = split(case)
    reply = parse_reply(parts.answer, CallSyntax(case["syntax"]), case["tools"])
    return Outcome(
        reply.content.strip(), parts.reasoning.strip(), parts.answer.strip(), reply.calls
    )


def canonical(value: Any) -> str:
    """JSON text that tells `1` from `1.0` and `true` (Python's == does not)."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def shown(call: ToolCall | BadToolCall) -> str:
    if isinstance(call, BadToolCall):
        return f"unreadable ({call.problem})"
    return f"{call.name} {call.arguments}"


def call_difference(wanted: Mapping[str, Any], call: ToolCall | BadToolCall) -> str | None:
    if wanted.get("bad"):
        return None if isinstance(call, BadToolCall) else f"{shown(call)}, expected unreadable"
    expected = f"{wanted['name']} {canonical(wanted.get('arguments', '...'))}"
    if isinstance(call, BadToolCall) or call.name != wanted["name"]:
        return f"{shown(call)}, expected {expected}"
    if "arguments" in wanted and canonical(json.loads(call.arguments)) != canonical(
        wanted["arguments"]
    ):
        return f"{shown(call)}, expected {expected}"
    if "arguments_text" in wanted and call.arguments != wanted["arguments_text"]:
        return f"{shown(call)}, expected {wanted['name']} {wanted['arguments_text']}"
    return None


def differences(expected: Mapping[str, Any], got: Outcome) -> list[str]:
    """How `got` differs from `expected` (rule 1); nothing when they agree."""
    found: list[str] = []
    if "content" in expected and expected["content"].strip() != got.content:
        found.append(f"content {got.content!r}, expected {expected['content'].strip()!r}")
    found += [
        f"content {got.content!r} lacks {part!r}"
        for part in expected.get("content_contains", ())
        if part not in got.content
    ]
    found += [
        f"content {got.content!r} holds {part!r}"
        for part in expected.get("content_lacks", ())
        if part in got.content
    ]
    for key in ("reasoning", "answer"):
        if key in expected and expected[key].strip() != getattr(got, key):
            found.append(f"{key} {getattr(got, key)!r}, expected {expected[key].strip()!r}")
    if "calls" not in expected:
        return found
    wanted = expected["calls"]
    if len(wanted) != len(got.calls):
        calls = "; ".join(map(shown, got.calls)) or "none"
        return [*found, f"{len(got.calls)} calls ({calls}), expected {len(wanted)}"]
    for index, (want, call) in enumerate(zip(wanted, got.calls, strict=True)):
        problem = call_difference(want, call)
        if problem:
            found.append(f"call {index}: {problem}")
    return found


def loopd_reading(case: Case) -> dict[str, Any]:
    """What a marked case says loopd gives: the peer's expectation with `loopd`'s fields
    in place of its own (a `loopd` content replaces the peer's content checks)."""
    instead = case["loopd"]
    kept = {
        key: value
        for key, value in case["expect"].items()
        if not ("content" in instead and key.startswith("content_"))
    }
    return {**kept, **instead}


# --- the fixtures ---------------------------------------------------------------------------


def listed_sources() -> set[tuple[str, str, str]]:
    """The (repository, path, commit) rows of SOURCES.md's table."""
    rows = set()
    for line in (FIXTURES / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4:
            rows.add((cells[0], cells[1], cells[2]))
    return rows


def test_every_case_names_its_source_and_its_mark() -> None:
    sources = listed_sources()
    assert len(CASES) >= 250
    assert len(set(IDS)) == len(IDS)
    for case, name in zip(CASES, IDS, strict=True):
        assert case["repository"] in PEERS, name
        assert re.fullmatch(r"[0-9a-f]{40}", case["commit"]), name
        assert (case["repository"], case["path"], case["commit"]) in sources, name
        CallSyntax(case["syntax"])
        assert "".join(case.get("pieces", [case["text"]])) == case["text"], name
        assert not ("choice" in case and "bug" in case), name
        if "choice" in case:
            assert "loopd" in case, f"{name}: a choice says what loopd gives instead"
            assert case["choice"], name
            assert "\n" not in case["choice"], name
        if "bug" in case:
            bug = case["bug"]
            assert bug in BUG_CLASSES or bug.startswith("other: "), f"{name}: class {bug!r}"
        if "loopd" in case:
            assert "choice" in case or "bug" in case, f"{name}: `loopd` without a mark"


# --- rules 1 to 3: read whole -----------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_peer_reply_reads_as_the_peer_expects_or_as_marked(case: Case) -> None:
    got = read(case)
    against_peer = differences(case["expect"], got)
    peer = case["repository"]
    if "choice" in case:
        assert against_peer, f"loopd now agrees with {peer}: remove the choice mark"
        against_choice = differences(loopd_reading(case), got)
        assert not against_choice, f"not what the choice says ({case['choice']}): " + "; ".join(
            against_choice
        )
    elif "bug" in case:
        assert against_peer, (
            f"the {case['bug']} bug no longer shows: loopd agrees with {peer}; remove the bug mark"
        )
        if "loopd" in case:
            assert differences(loopd_reading(case), got), (
                f"the {case['bug']} bug no longer shows: loopd gives what the mended reader "
                "should; replace the bug mark by a choice saying why it differs from the peer"
            )
    else:
        assert not against_peer, "; ".join(against_peer)


# --- rule 4: nothing truncated runs ---------------------------------------------------------


def truncated(case: Case, got: Outcome) -> list[str]:
    """Every text argument of a call loopd would run that is a strict start of the peer's
    value for that call and parameter."""
    found: list[str] = []
    for wanted in case["expect"].get("calls", ()):
        values = wanted.get("arguments")
        if not isinstance(values, dict):
            continue
        for call in got.calls:
            if not isinstance(call, ToolCall) or call.name != wanted["name"]:
                continue
            arguments = json.loads(call.arguments)
            for key, value in values.items():
                ran = arguments.get(key)
                cut = isinstance(value, str) and isinstance(ran, str) and ran != value
                if cut and value.startswith(ran):
                    found.append(f"{call.name}.{key} = {ran!r}, cut from {value!r}")
    return found


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_no_truncated_value_reaches_brokerd(case: Case) -> None:
    cut = truncated(case, read(case))
    assert not cut, "a call would run with a truncated value: " + "; ".join(cut)


# --- rule 5: streamed -------------------------------------------------------------------------


def released(case: Case, pieces: Sequence[str]) -> tuple[list[str], list[str]]:
    """What the turn loop's streams release for each piece and at the end, as
    (reasoning, content)."""
    dialect = dialect_of(case)
    thinking = ReasoningStream(
        dialect.reasoning, opened=dialect.opens_reasoning, openers=dialect.marked_openers
    )
    answer = ReplyStream(dialect.syntax)
    reasoning: list[str] = []
    content: list[str] = []
    for piece in pieces:
        thought, said = thinking.feed(piece)
        reasoning.append(thought)
        content.append(answer.feed(said) if said else "")
    thought, said = thinking.finish()
    reasoning.append(thought)
    content.append((answer.feed(said) if said else "") + answer.finish())
    return reasoning, content


def check_stream(case: Case, pieces: Sequence[str], how: str) -> None:
    parts = split(case)
    final = parse_reply(parts.answer, CallSyntax(case["syntax"]), case["tools"]).content
    reasoning, content = released(case, pieces)
    for steps, whole, what in (
        (content, final, "content"),
        (reasoning, parts.reasoning, "reasoning"),
    ):
        so_far = ""
        for step, piece in enumerate(steps):
            so_far += piece
            assert whole.startswith(so_far), (
                f"split {how}, after piece {step}: the {what} released so far {so_far!r} "
                f"is not a start of the final {what} {whole!r}"
            )
        assert so_far == whole, f"split {how}: the {what} released is {so_far!r}, not {whole!r}"


def splits(case: Case) -> dict[str, list[str]]:
    text = case["text"]
    ways = {"whole": [text], "characters": list(text)}
    for size in (2, 3, 5, 8, 13):
        ways[f"every {size}"] = [text[at : at + size] for at in range(0, len(text), size)]
    if "pieces" in case:
        ways["as the peer's test"] = list(case["pieces"])
    return ways


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_peer_reply_streams_as_it_reads(case: Case) -> None:
    for how, pieces in splits(case).items():
        check_stream(case, pieces, how)


@settings(max_examples=400, deadline=None)
@given(
    case=st.sampled_from(CASES),
    cuts=st.lists(st.integers(min_value=0, max_value=100_000), max_size=16),
)
def test_any_split_of_a_peer_reply_streams_as_it_reads(case: Case, cuts: list[int]) -> None:
    text = case["text"]
    points = sorted({cut % (len(text) + 1) for cut in cuts} | {0, len(text)})
    pieces = [text[start:end] for start, end in itertools.pairwise(points)]
    check_stream(case, pieces, f"at {points}")
