"""The tool table is the one place a tool is stated: a row added here is a tool everywhere.

A test-only row (`echo`, run in the sandbox; `memory_forget`, run in memoryd) is
added to `core.grants.tools.TOOLS` for one test with `monkeypatch.setitem`, and nothing
else is edited: argument parsing, the canonical form, grant loading, policy,
the tool list loopd shows the model and the wire's memory calls all see it, and
where it runs it is refused, since it has no code there. The production rows are
pinned as they were before the table (`core.grants.args._FIELDS`, `core.grants.
WHEN_UNTRUSTED`, `core.grants.loading._CONSTRAINTS`, issue 29).

I/O: the sandbox refusal runs /usr/bin/python3 on the toolkit, without a sandbox,
as tests/sandbox/test_toolkit_start.py does; memoryd's runs in a temporary directory.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from boxmaker.core.errors import ArgsError
from boxmaker.core.grants.args import canonical_arguments, parse_arguments
from boxmaker.core.grants.decisions import AskRecord, DenyReason
from boxmaker.core.grants.loading import parse_grant_file
from boxmaker.core.grants.model import Grant, GrantSet, Mode
from boxmaker.core.grants.tools import (
    TOOLS,
    Check,
    RunsIn,
    Tool,
    ToolArgs,
    ToolField,
    ToolName,
    tool_name,
    tool_names,
)
from boxmaker.core.labels import DataClass
from boxmaker.core.policy import Ask, Decision, Denial, SessionState, decide
from boxmaker.core.wire.broker import FailedResponse, ToolRequest
from boxmaker.core.wire.memory import MemoryCall
from boxmaker.loopd.tools import BROKER_TOOLS, find_tools
from boxmaker.memoryd.handlers import MemoryHandlers
from boxmaker.memoryd.recall import RecallIndex
from boxmaker.memoryd.store import MemoryStore
from boxmaker.sandbox import toolkit
from boxmaker.sandbox.calls import (
    SANDBOX_PYTHON,
    TOOLKIT_CODE,
    TOOLKIT_PROGRAM,
    Limits,
    parse_answer,
    toolkit_request,
)
from boxmaker.sandbox.held import HeldSpec
from boxmaker.sandbox.runner import RunError, RunFailure, build_spec

NOW = "2026-11-30T12:00:00.000Z"

# --- the production rows, as the lists the table replaced had them -------------------

#   tool: (runs in, when_untrusted, paths, hosts, required fields, optional fields)
BEFORE = {
    "read_file": ("sandbox", "auto", "required", "empty", ("path",), ()),
    "write_file": ("sandbox", "ask", "required", "empty", ("path", "content"), ()),
    "shell": ("sandbox", "ask", "optional", "empty", ("command",), ("cwd",)),
    "http_fetch": ("sandbox", "ask", "empty", "required", ("url",), ()),
    "memory_add": ("memoryd", "ask", "empty", "empty", ("kind", "text"), ()),
    "memory_replace": ("memoryd", "ask", "empty", "empty", ("kind", "entry", "text"), ()),
    "memory_consolidate": ("memoryd", "ask", "empty", "empty", ("kind", "entries", "text"), ()),
    "memory_note": ("memoryd", "auto", "empty", "empty", ("text",), ("untrusted",)),
    "memory_recall": ("memoryd", "auto", "empty", "empty", ("query",), ("limit", "page")),
}


@pytest.mark.parametrize("name", list(BEFORE))
def test_each_production_row_is_what_the_old_lists_said(name: str) -> None:
    row = TOOLS[name]
    required = tuple(f.name for f in row.fields if f.required)
    optional = tuple(f.name for f in row.fields if not f.required)
    facts = (row.runs_in, row.when_untrusted, row.paths, row.hosts, required, optional)
    assert facts == BEFORE[name]


def test_the_production_table_has_the_nine_tools_and_no_test_row() -> None:
    assert list(TOOLS) == list(BEFORE)
    assert tool_name("echo") is None
    assert tool_name("memory_forget") is None


def test_a_tool_name_is_one_of_the_table_s_names_and_one_object_a_name() -> None:
    assert ToolName("shell") is ToolName.SHELL is tool_name("shell")
    assert ToolName.SHELL == "shell"
    assert ToolName.SHELL.value == "shell"
    assert type(ToolName.SHELL.value) is str
    assert f"{ToolName.SHELL}" == "shell"
    assert ToolName.SHELL.row is TOOLS["shell"]
    with pytest.raises(ValueError, match="'exec' is not a tool"):
        ToolName("exec")
    declared = {n: getattr(ToolName, n) for n in vars(ToolName)["__annotations__"]}
    assert declared == {name.upper(): ToolName(name) for name in TOOLS}


def test_the_toolkit_has_code_for_each_sandbox_tool_and_no_other() -> None:
    assert set(toolkit.TOOLS) == set(tool_names(RunsIn.SANDBOX))


# --- a test-only row ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EchoArgs(ToolArgs):
    text: str
    times: int


@dataclass(frozen=True, slots=True)
class ForgetArgs(ToolArgs):
    entry: str


ECHO = Tool(
    "echo",
    "Say a text back (a tool only tests have).",
    (
        ToolField("text", Check.TEXT, "the text to say back"),
        ToolField(
            "times",
            Check.COUNT,
            "optional, how often (1)",
            required=False,
            default=1,
            default_left_out=True,
        ),
    ),
    EchoArgs,
    RunsIn.SANDBOX,
    when_untrusted=Mode.ASK,
)
FORGET = Tool(
    "memory_forget",
    "Forget one remembered entry (a tool only tests have).",
    (ToolField("entry", Check.TEXT, "the entry's id"),),
    ForgetArgs,
    RunsIn.MEMORYD,
    when_untrusted=Mode.DENY,
)

GRANT = b'tool = "echo"\nmode = "auto"\nmax_taint = "private"\nresult_class = "public"\n'


@pytest.fixture
def echo(monkeypatch: pytest.MonkeyPatch) -> ToolName:
    """The two test-only rows in the table for one test (monkeypatch takes them out)."""
    monkeypatch.setitem(TOOLS, ECHO.name, ECHO)
    monkeypatch.setitem(TOOLS, FORGET.name, FORGET)
    return ToolName("echo")


def _grant(name: str, text: bytes) -> Grant:
    grant, problems = parse_grant_file(name, text)
    assert problems == []
    assert grant is not None
    return grant


def _decide(
    tool: str, arguments: str, grants: tuple[Grant, ...], untrusted: bool = False
) -> Decision | Ask | Denial:
    request = ToolRequest(session="s", call="c1", tool=tool, arguments=arguments)
    return decide(request, GrantSet(grants=grants), SessionState(untrusted=untrusted), NOW)


def test_a_row_s_arguments_are_parsed_by_its_fields(echo: ToolName) -> None:
    assert tool_name("echo") is echo
    assert parse_arguments(echo, '{"text":"hi"}') == EchoArgs(text="hi", times=1)
    parsed = parse_arguments(echo, '{"times":3,"text":"hi"}')
    assert parsed == EchoArgs(text="hi", times=3)
    assert canonical_arguments(parsed) == '{"text":"hi","times":3}'
    assert canonical_arguments(EchoArgs(text="hi", times=1)) == '{"text":"hi"}'
    refusals = {
        '{"text":"hi","loud":true}': "unknown field `loud`, expected one of `text`, `times`",
        "{}": "missing field `text`",
        '{"text":""}': "`text` is empty",
        '{"text":"hi","times":0}': "`times` must be from 1 to 50",
    }
    for raw, message in refusals.items():
        with pytest.raises(ArgsError, match=message):
            parse_arguments(echo, raw)


def test_a_grant_for_the_row_loads_with_the_row_s_rules(echo: ToolName) -> None:
    grant = _grant("echo.toml", GRANT)
    assert grant.tool is echo
    assert grant.untrusted_mode is Mode.ASK  # the row's when_untrusted
    _, problems = parse_grant_file("echo.toml", GRANT + b'constraints.paths = ["/srv"]\n')
    assert [p.render() for p in problems] == [
        "echo.toml:5: a echo grant takes no constraints.paths"
    ]
    _, problems = parse_grant_file("x.toml", GRANT.replace(b'"echo"', b'"exec"'))
    assert [p.problem for p in problems] == [
        "`tool` must be one of " + ", ".join([*BEFORE, "echo", "memory_forget"])
    ]


def test_policy_decides_on_the_row(echo: ToolName) -> None:
    grant = _grant("echo.toml", GRANT)
    allowed = _decide("echo", '{"text":"hi"}', (grant,))
    assert isinstance(allowed, Decision)
    assert (allowed.tool, allowed.args) == (echo, EchoArgs(text="hi", times=1))
    assert allowed.result_class is DataClass.PUBLIC
    asked = _decide("echo", '{"text":"hi"}', (grant,), untrusted=True)
    assert isinstance(asked, Ask)
    assert asked.record() == AskRecord(why="untrusted")
    invalid = _decide("echo", '{"text":1}', (grant,))
    assert invalid == Denial(
        DenyReason.INVALID_ARGUMENTS, detail="invalid type for `text`: expected a string"
    )
    assert _decide("echo", '{"text":"hi"}', ()) == Denial(DenyReason.NO_GRANT)


def test_the_model_is_shown_the_row(echo: ToolName) -> None:
    shown = {
        "name": "echo",
        "description": "Say a text back (a tool only tests have).",
        "arguments": {"text": "the text to say back", "times": "optional, how often (1)"},
        "required": ["text"],
    }
    assert json.loads(find_tools("say")) == [shown]
    assert shown in json.loads(find_tools(""))
    assert "echo" in BROKER_TOOLS


def _run_toolkit(request: bytes) -> bytes:
    """The toolkit's answer, started as the runtimes start it but with no sandbox around
    it; its standard input held open as brokerd holds it (at its end, the toolkit exits)."""
    with subprocess.Popen(
        [SANDBOX_PYTHON, "-I", "-S", "-c", TOOLKIT_PROGRAM],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(TOOLKIT_CODE + request)
        proc.stdin.flush()
        answer = proc.stdout.read()
        assert proc.wait(timeout=30) == 0
        proc.stdin.close()
    return answer


def test_the_sandbox_refuses_the_row_it_has_no_code_for(echo: ToolName) -> None:
    decision = _decide("echo", '{"text":"hi","times":2}', (_grant("echo.toml", GRANT),))
    assert isinstance(decision, Decision)
    spec = build_spec(decision)
    assert (spec.tool, spec.mounts, spec.masks, spec.egress) == (echo, (), (), None)
    request = toolkit_request(spec, Limits(), HeldSpec())
    assert json.loads(request)["arguments"] == {"text": "hi", "times": 2}
    answer = parse_answer(_run_toolkit(request))
    assert answer == RunError(RunFailure.NO_SUCH_TOOL)
    assert answer.failure.value == "the sandbox has no code for this tool"


def test_memoryd_refuses_a_memory_row_it_has_no_code_for(echo: ToolName, tmp_path: Path) -> None:
    grant = _grant(
        "forget.toml",
        b'tool = "memory_forget"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "private"\n',
    )
    assert grant.untrusted_mode is Mode.DENY
    decision = _decide("memory_forget", '{"entry":"m1"}', (grant,))
    assert isinstance(decision, Decision)
    assert decision.tool.is_memory
    with pytest.raises(TypeError, match="memory_forget runs in memoryd"):
        build_spec(decision)
    call = MemoryCall(
        session="s",
        call="c1",
        tool=decision.tool.value,
        arguments=canonical_arguments(decision.args),
        taint=DataClass.PRIVATE,
        untrusted=False,
    )
    with pytest.raises(ValidationError, match="tool must be one of"):
        MemoryCall(**{**call.model_dump(), "tool": "echo"})
    directory = tmp_path / "memory"
    handlers = MemoryHandlers(
        MemoryStore(directory, lambda: datetime.now(UTC)), RecallIndex(directory)
    )
    answer = handlers.memory_call(call)
    assert answer == FailedResponse(message="memoryd has no code for memory_forget")
