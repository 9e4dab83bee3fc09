"""The tools loopd offers the model are exactly the ones brokerd decides on."""

from __future__ import annotations

import json

from boxmaker.core.args import ToolName
from boxmaker.loopd.tools import BROKER_TOOLS, find_tools


def test_the_offered_tools_are_the_decided_tools() -> None:
    assert set(BROKER_TOOLS) == {tool.value for tool in ToolName}
    for spec in BROKER_TOOLS.values():
        assert set(spec["required"]) <= set(spec["arguments"])


def test_find_tool_finds_the_memory_tools_by_a_word() -> None:
    found = [tool["name"] for tool in json.loads(find_tools("remembered"))]
    assert sorted(found) == ["memory_consolidate", "memory_recall", "memory_replace"]
