"""A sandbox tool of the tool table that the toolkit has no code for: both runtimes refuse it.

The row is added for one test (`monkeypatch.setitem` on `core.grants.tools.TOOLS`) and
nothing else is edited; policy allows the call, the runner gives it no mount
and no network (`build_spec`: any other tool), and the toolkit inside the real
sandbox answers NO_SUCH_TOOL, which reaches brokerd's caller as its fixed
sentence. tests/core/grants/test_tool_table.py follows the same kind of row through
parsing, grants, policy and loopd's tool list.

I/O: the runtimes of the conformance suite (`sandbox` fixture).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from boxmaker.core.grants.model import Mode
from boxmaker.core.grants.tools import TOOLS, Check, RunsIn, Tool, ToolArgs, ToolField
from boxmaker.core.wire.broker import FailedResponse
from boxmaker.sandbox.runner import RunFailure
from boxmaker.testing.sandbox_tree import Sandbox, grant


@dataclass(frozen=True, slots=True)
class PingArgs(ToolArgs):
    text: str


PING = Tool(
    "ping",
    "Answer a text (a tool only tests have).",
    (ToolField("text", Check.TEXT, "the text"),),
    PingArgs,
    RunsIn.SANDBOX,
    when_untrusted=Mode.ASK,
)


def test_a_tool_the_toolkit_has_no_code_for_is_refused(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TOOLS, PING.name, PING)
    ping = grant(
        "ping.toml", 'tool = "ping"\nmode = "auto"\nmax_taint = "secret"\nresult_class = "public"\n'
    )
    answer = sandbox.with_grants(ping).call("ping", text="hi")
    assert answer == FailedResponse(message="the sandbox has no code for this tool")
    assert answer.message == RunFailure.NO_SUCH_TOOL.value
    sandbox.assert_nothing_left()
