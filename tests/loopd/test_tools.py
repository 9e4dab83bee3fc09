"""The tools loopd offers the model are exactly the ones brokerd decides on."""

from __future__ import annotations

import json
from pathlib import Path

from boxmaker.core.grants.tools import TOOLS
from boxmaker.loopd.tools import BROKER_TOOLS, find_tools

# find_tool's whole answer (every tool, its words, its arguments), written by
# loopd/tools.py as it was before the tool table (commit 23ec3ac, issue 29)
FIND_TOOL = Path(__file__).parents[1] / "fixtures" / "tools" / "find_tool.json"


def test_the_model_s_tool_list_is_byte_for_byte_the_fixture() -> None:
    assert find_tools("") + "\n" == FIND_TOOL.read_text()


def test_the_offered_tools_are_the_decided_tools() -> None:
    assert list(BROKER_TOOLS) == list(TOOLS)
    for name, spec in BROKER_TOOLS.items():
        assert set(spec["required"]) <= set(spec["arguments"])
        assert list(spec["arguments"]) == [f.name for f in TOOLS[name].fields]


def test_the_model_is_shown_the_table_s_words() -> None:
    shell = BROKER_TOOLS["shell"]
    assert shell == {
        "description": "Run a shell command in a sandbox with no network.",
        "arguments": {"command": "the command", "cwd": "optional absolute working directory"},
        "required": ["command"],
    }
    assert json.loads(find_tools("fetch")) == [
        {
            "name": "http_fetch",
            "description": "Fetch an https:// URL from a host the owner allows.",
            "arguments": {"url": "an https:// URL"},
            "required": ["url"],
        }
    ]


def test_find_tool_finds_the_memory_tools_by_a_word() -> None:
    found = [tool["name"] for tool in json.loads(find_tools("remembered"))]
    assert sorted(found) == ["memory_consolidate", "memory_recall", "memory_replace"]
