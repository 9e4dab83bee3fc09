"""The rules of `boxmaker.core.model.named_templates`, as a table: which of a model file's
chat templates loopd renders (tests/loopd/test_named_templates.py shows them on real
GGUF files)."""

from __future__ import annotations

import pytest

from boxmaker.core.model.named_templates import ChosenTemplate, choose_template, named_templates

DEFAULT_KEY = "tokenizer.chat_template"
TOOL_USE_KEY = "tokenizer.chat_template.tool_use"


@pytest.mark.parametrize(
    ("metadata", "tools", "expected"),
    [
        pytest.param(
            {DEFAULT_KEY: "D", TOOL_USE_KEY: "T"},
            True,
            ChosenTemplate("tool_use", TOOL_USE_KEY, "T", ("default",)),
            id="rule2-tools-given-tool_use",
        ),
        pytest.param(
            {DEFAULT_KEY: "D", TOOL_USE_KEY: "T"},
            False,
            ChosenTemplate("default", DEFAULT_KEY, "D", ("tool_use",)),
            id="rule3-no-tools-the-default",
        ),
        pytest.param(
            {DEFAULT_KEY: "D", "tokenizer.chat_template.rag": "R"},
            True,
            ChosenTemplate("default", DEFAULT_KEY, "D", ("rag",)),
            id="rule3-other-names-the-default",
        ),
        pytest.param(
            {TOOL_USE_KEY: "T"},
            True,
            ChosenTemplate("tool_use", TOOL_USE_KEY, "T", ()),
            id="rule2-tool_use-without-a-default",
        ),
        pytest.param({TOOL_USE_KEY: "T"}, False, None, id="rule3-no-default-none"),
        pytest.param({DEFAULT_KEY: "D"}, True, ChosenTemplate("default", DEFAULT_KEY, "D", ())),
        pytest.param({"general.name": "x"}, True, None, id="no-template"),
        pytest.param(
            {DEFAULT_KEY: "D", "tokenizer.chat_templates": '["tool_use"]'},
            True,
            ChosenTemplate("default", DEFAULT_KEY, "D", ()),
            id="rule1-the-names-list-is-no-template",
        ),
        pytest.param(
            {DEFAULT_KEY: "D", "tokenizer.chat_template.": "E"},
            True,
            ChosenTemplate("default", DEFAULT_KEY, "D", ()),
            id="rule1-an-empty-name-is-no-template",
        ),
    ],
)
def test_which_template(
    metadata: dict[str, object], tools: bool, expected: ChosenTemplate | None
) -> None:
    assert choose_template(metadata, tools=tools) == expected


def test_named_templates_leave_out_the_default_and_non_strings() -> None:
    metadata: dict[str, object] = {
        DEFAULT_KEY: "D",
        TOOL_USE_KEY: "T",
        "tokenizer.chat_template.rag": "R",
        "tokenizer.chat_template.odd": 3,
    }
    assert named_templates(metadata) == {"tool_use": "T", "rag": "R"}


def test_the_choice_names_itself_and_why() -> None:
    chosen = choose_template({DEFAULT_KEY: "D", TOOL_USE_KEY: "T"}, tools=True)
    assert chosen is not None
    assert chosen.describe() == "tool_use (tokenizer.chat_template.tool_use)"
    assert chosen.explain() == (
        "tool_use (tokenizer.chat_template.tool_use), the one Hugging Face renders when "
        "tools are given; the file also holds default"
    )
    default = choose_template({DEFAULT_KEY: "D"}, tools=True)
    assert default is not None
    assert default.explain() == "default (tokenizer.chat_template)"
