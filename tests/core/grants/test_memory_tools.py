"""The five memory tools in the pure core: their arguments, their grant files, their decisions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import canonical_arguments, parse_arguments
from boxmaker.core.grants.decisions import DenyReason
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import GrantSet
from boxmaker.core.grants.tools import (
    MAX_RECALL,
    MemoryAddArgs,
    MemoryConsolidateArgs,
    MemoryNoteArgs,
    MemoryRecallArgs,
    MemoryReplaceArgs,
    RunsIn,
    ToolArgs,
    ToolName,
    tool_names,
)
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Ask, Decision, Denial, SessionState, decide
from boxmaker.core.wire.broker import ToolRequest
from boxmaker.core.wire.memory import MemoryCall

NOW = "2026-11-30T12:00:00.000Z"
ADD, REPLACE, CONSOLIDATE, NOTE, RECALL = (
    ToolName.MEMORY_ADD,
    ToolName.MEMORY_REPLACE,
    ToolName.MEMORY_CONSOLIDATE,
    ToolName.MEMORY_NOTE,
    ToolName.MEMORY_RECALL,
)


MEMORY_TOOLS = tool_names(RunsIn.MEMORYD)


def test_the_memory_tools_are_the_five_that_run_in_memoryd() -> None:
    assert MEMORY_TOOLS == (ADD, REPLACE, CONSOLIDATE, NOTE, RECALL)
    assert all(t.is_memory for t in MEMORY_TOOLS)
    assert not any(t.is_memory for t in tool_names() if t not in MEMORY_TOOLS)


@pytest.mark.parametrize("tool", [*tool_names(), "clock", "memory_forget"], ids=str)
def test_a_memory_call_names_only_a_tool_that_runs_in_memoryd(tool: str) -> None:
    def call() -> MemoryCall:
        return MemoryCall(
            session="s",
            call="c",
            tool=tool,
            arguments="{}",
            taint=DataClass.PRIVATE,
            untrusted=False,
        )

    if tool in MEMORY_TOOLS:
        assert call().tool == tool
    else:
        with pytest.raises(ValidationError, match="tool must be one of memory_add, "):
            call()


# --- arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "raw", "expected", "canonical"),
    [
        pytest.param(
            ADD,
            '{"kind":"memory","text":"likes tabs"}',
            MemoryAddArgs(kind="memory", text="likes tabs"),
            '{"kind":"memory","text":"likes tabs"}',
            id="add",
        ),
        pytest.param(
            ADD,
            '{"text":"is Kyle","kind":"user"}',
            MemoryAddArgs(kind="user", text="is Kyle"),
            '{"kind":"user","text":"is Kyle"}',
            id="add-user-reordered",
        ),
        pytest.param(
            REPLACE,
            '{"kind":"memory","entry":"m-0123456789ab","text":"t"}',
            MemoryReplaceArgs(kind="memory", entry="m-0123456789ab", text="t"),
            '{"kind":"memory","entry":"m-0123456789ab","text":"t"}',
            id="replace",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":["m-1","m-2"],"text":"t"}',
            MemoryConsolidateArgs(kind="memory", entries=("m-1", "m-2"), text="t"),
            '{"kind":"memory","entries":["m-1","m-2"],"text":"t"}',
            id="consolidate",
        ),
        pytest.param(
            NOTE,
            '{"text":"n"}',
            MemoryNoteArgs(text="n", untrusted=False),
            '{"text":"n","untrusted":false}',
            id="note-default-trusted",
        ),
        pytest.param(
            NOTE,
            '{"text":"n","untrusted":true}',
            MemoryNoteArgs(text="n", untrusted=True),
            '{"text":"n","untrusted":true}',
            id="note-untrusted",
        ),
        pytest.param(
            RECALL,
            '{"query":"tabs"}',
            MemoryRecallArgs(query="tabs", limit=5),
            '{"query":"tabs","limit":5}',
            id="recall-default-limit",
        ),
        pytest.param(
            RECALL,
            '{"query":"tabs","limit":50}',
            MemoryRecallArgs(query="tabs", limit=50),
            '{"query":"tabs","limit":50}',
            id="recall-max-limit",
        ),
    ],
)
def test_memory_arguments_parse_and_round_trip(
    tool: ToolName, raw: str, expected: ToolArgs, canonical: str
) -> None:
    parsed = parse_arguments(tool, raw)
    assert parsed == expected
    assert canonical_arguments(parsed) == canonical
    assert parse_arguments(tool, canonical) == parsed


@pytest.mark.parametrize(
    ("tool", "raw", "message"),
    [
        pytest.param(ADD, '{"kind":"soul","text":"x"}', "`kind` must be", id="kind-soul"),
        pytest.param(ADD, '{"kind":"note","text":"x"}', "`kind` must be", id="kind-note"),
        pytest.param(ADD, '{"kind":"memory","text":""}', "`text` is empty", id="empty-text"),
        pytest.param(ADD, '{"kind":"memory"}', "missing field `text`", id="missing-text"),
        pytest.param(
            ADD, '{"kind":"memory","text":"x","file":"y"}', "unknown field `file`", id="unknown"
        ),
        pytest.param(
            ADD, '{"kind":"memory","text":"x","text":"y"}', "duplicate field", id="duplicate"
        ),
        pytest.param(ADD, '{"kind":"memory","text":5}', "expected a string", id="text-number"),
        pytest.param(
            ADD, '{"kind":"memory","text":"\\ud800"}', "lone surrogate", id="lone-surrogate"
        ),
        pytest.param(
            REPLACE, '{"kind":"memory","entry":"","text":"x"}', "`entry` is empty", id="no-entry"
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":[],"text":"x"}',
            "`entries` must name 1 to 50",
            id="entries-empty",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":"m-1","text":"x"}',
            "expected a list",
            id="entries-string",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":["m-1",""],"text":"x"}',
            "expected a list of non-empty strings",
            id="entries-empty-id",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":["m-1","m-1"],"text":"x"}',
            "names an entry twice",
            id="entries-twice",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":["\\udfff"],"text":"x"}',
            "lone surrogate",
            id="entries-lone-surrogate",
        ),
        pytest.param(
            CONSOLIDATE,
            '{"kind":"memory","entries":'
            + str([f"m-{i}" for i in range(51)]).replace("'", '"')
            + ',"text":"x"}',
            "`entries` must name 1 to 50",
            id="entries-51",
        ),
        pytest.param(NOTE, '{"text":"n","untrusted":1}', "expected true or false", id="flag-int"),
        pytest.param(NOTE, '{"text":"n","untrusted":"yes"}', "true or false", id="flag-str"),
        pytest.param(RECALL, '{"query":"q","limit":0}', "from 1 to 50", id="limit-0"),
        pytest.param(RECALL, '{"query":"q","limit":51}', "from 1 to 50", id="limit-51"),
        pytest.param(RECALL, '{"query":"q","limit":true}', "an integer", id="limit-bool"),
        pytest.param(RECALL, '{"query":"q","limit":5.0}', "an integer", id="limit-float"),
        pytest.param(RECALL, '{"query":""}', "`query` is empty", id="empty-query"),
        pytest.param(RECALL, "[]", "must be a JSON object", id="not-an-object"),
    ],
)
def test_bad_memory_arguments_are_refused(tool: ToolName, raw: str, message: str) -> None:
    with pytest.raises(ArgsError) as caught:
        parse_arguments(tool, raw)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_recall_bound_is_fifty() -> None:
    assert MAX_RECALL == 50


# --- grant files --------------------------------------------------------------------


def grant_text(tool: str, mode: str = "auto", constraints: str = "") -> bytes:
    head = f'tool = "{tool}"\nmode = "{mode}"\nmax_taint = "secret"\nresult_class = "private"\n'
    return (head + constraints).encode()


@pytest.mark.parametrize("tool", [t.value for t in MEMORY_TOOLS])
def test_a_memory_grant_takes_no_constraints(tool: str) -> None:
    grant, problems = parse_grant_file("memory.toml", grant_text(tool))
    assert problems == []
    assert grant is not None
    assert grant.tool.is_memory


@pytest.mark.parametrize(
    ("constraints", "field"),
    [
        pytest.param('[constraints]\npaths = ["/home/kyle"]\n', "paths", id="paths"),
        pytest.param('[constraints]\nhosts = ["example.com"]\n', "hosts", id="hosts"),
    ],
)
def test_a_memory_grant_with_a_constraint_is_invalid(constraints: str, field: str) -> None:
    grant, problems = parse_grant_file("memory.toml", grant_text("memory_add", "auto", constraints))
    assert grant is None
    assert [p.problem for p in problems] == [f"a memory_add grant takes no constraints.{field}"]


# --- decisions ----------------------------------------------------------------------


def grants(*files: tuple[str, bytes]) -> GrantSet:
    loaded = []
    for name, content in files:
        grant, problems = parse_grant_file(name, content)
        assert grant is not None, problems
        loaded.append(grant)
    return GrantSet(grants=tuple(loaded))


def call(tool: str, arguments: str) -> ToolRequest:
    return ToolRequest(session="chat-1", call="c1", tool=tool, arguments=arguments)


ADD_CALL = call("memory_add", '{"kind":"memory","text":"likes tabs"}')


def test_a_memory_call_is_allowed_only_by_its_own_tool_s_grant() -> None:
    only_notes = grants(("notes.toml", grant_text("memory_note")))
    outcome = decide(ADD_CALL, only_notes, SessionState(), NOW)
    assert isinstance(outcome, Denial)
    assert outcome.reason is DenyReason.NO_GRANT
    with_add = grants(
        ("notes.toml", grant_text("memory_note")), ("add.toml", grant_text("memory_add"))
    )
    allowed = decide(ADD_CALL, with_add, SessionState(), NOW)
    assert isinstance(allowed, Decision)
    assert allowed.grant.id == "add"
    assert allowed.args == MemoryAddArgs(kind="memory", text="likes tabs")


@pytest.mark.parametrize(
    ("modes", "want"),
    [
        pytest.param(("auto",), Decision, id="auto"),
        pytest.param(("ask",), Ask, id="ask"),
        pytest.param(("auto", "ask"), Ask, id="ask-beats-auto"),
        pytest.param(("ask", "deny"), Denial, id="deny-beats-ask"),
    ],
)
def test_memory_grant_modes(modes: tuple[str, ...], want: type) -> None:
    files = [(f"g{i}.toml", grant_text("memory_add", mode)) for i, mode in enumerate(modes)]
    outcome = decide(ADD_CALL, grants(*files), SessionState(), NOW)
    assert isinstance(outcome, want)


def test_a_memory_grant_below_the_session_s_taint_does_not_apply() -> None:
    low = b'tool = "memory_recall"\nmode = "auto"\nmax_taint = "public"\nresult_class = "private"\n'
    recall = call("memory_recall", '{"query":"tabs"}')
    outcome = decide(recall, grants(("r.toml", low)), SessionState(taint=DataClass.PRIVATE), NOW)
    assert isinstance(outcome, Denial)
    assert outcome.reason is DenyReason.TAINT_TOO_HIGH


def test_bad_memory_arguments_are_denied_with_the_parser_s_detail() -> None:
    bad = call("memory_add", '{"kind":"soul","text":"x"}')
    outcome = decide(bad, grants(("add.toml", grant_text("memory_add"))), SessionState(), NOW)
    assert isinstance(outcome, Denial)
    assert outcome.reason is DenyReason.INVALID_ARGUMENTS
    assert outcome.detail is not None
    assert "`kind` must be" in outcome.detail
