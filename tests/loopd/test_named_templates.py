"""A model file's named chat templates: loopd renders `tool_use` where the file has it.

Tiny GGUFs
(`support.tiny_gguf`, Qwen2's vocabulary, whose ChatML markers are the
ones Hermes writes) written as convert_hf_to_gguf.py writes a Hermes 2 Pro or
Hermes 3 file: the real default template (tests/fixtures/chat_templates/
NousResearch-Hermes-3-Llama-3.1-8B-default.jinja) under `tokenizer.chat_template`
and the real tool-use one (NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja)
under `tokenizer.chat_template.tool_use`, loaded by the pinned llama-cpp-python
through loopd's own production path (`load_model`, `choose_dialect`, `TurnLoop`):
the prompt is the tool-use template's, its tools block and its `<tool_response>`
results; a file with no named template keeps its default. Last, a hostile template
named `tool_use` is refused exactly as the same template is as a file's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli_w
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import VocabularyField, read_vocabulary, write_tiny_model

from boxmaker.core.errors import StartupError
from boxmaker.core.model.chat_format import Role, Segment, Text, Tokens, Turn
from boxmaker.core.model.named_templates import ChosenTemplate
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.dialects import choose_dialect
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import LlamaModel
from boxmaker.loopd.model_check import VocabularyModel
from boxmaker.loopd.session_log import SessionLogs
from boxmaker.loopd.startup import load_model
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home
from boxmaker.testing.recording_model import RecordingModel

require_llama_cpp("the named template tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
HERMES_DEFAULT = (TEMPLATES / "NousResearch-Hermes-3-Llama-3.1-8B-default.jinja").read_text()
HERMES_TOOL_USE = (TEMPLATES / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").read_text()
TOOLS_PROMPT = "You are a function calling AI model."  # the tool-use template's tools block
LIMITS = TurnLimits(max_tool_calls=0, max_tokens=8, reply_tokens=8, reasoning_tokens=4)
DEFAULT_KEY = "tokenizer.chat_template"
TOOL_USE_KEY = "tokenizer.chat_template.tool_use"


# ---- tiny GGUFs, through loopd's own path ------------------------------------------


@pytest.fixture(scope="module")
def qwen2() -> list[VocabularyField]:
    return read_vocabulary(fetch_vocabularies() / "ggml-vocab-qwen2.gguf")


@dataclass(frozen=True)
class Loaded:
    config: LoopdConfig
    model: LlamaModel


def load(path: Path, directory: Path) -> Loaded:
    settings = {
        "paths": {"home": str(make_home(directory))},
        "model": {"path": str(path), "threads": 1, "seed": 1},
    }
    toml = directory / "loopd.toml"
    toml.write_text(tomli_w.dumps(settings), encoding="utf-8")
    config = load_config(toml, {})
    return Loaded(config, load_model(config))


@pytest.fixture(scope="module")
def hermes(qwen2: list[VocabularyField], tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    where = tmp_path_factory.mktemp("hermes")
    path = write_tiny_model(
        where / "hermes.gguf",
        arch="qwen3",
        vocabulary=qwen2,
        chat_template=HERMES_DEFAULT,
        named_templates={"tool_use": HERMES_TOOL_USE},
    )
    return load(path, where)


@pytest.fixture(scope="module")
def default_only(qwen2: list[VocabularyField], tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    where = tmp_path_factory.mktemp("default-only")
    path = write_tiny_model(
        where / "default.gguf", arch="qwen3", vocabulary=qwen2, chat_template=HERMES_DEFAULT
    )
    return load(path, where)


def text_of(model: LlamaModel, segments: list[Segment]) -> tuple[str, str]:
    """The whole prompt's text, and its scaffolding alone (what is tokenized as markers)."""
    whole, scaffolding = [], []
    for segment in segments:
        if isinstance(segment, Tokens):
            whole.append(model.detokenize(segment.ids))
        elif isinstance(segment, Text):
            whole.append(segment.text)
            if segment.special:
                scaffolding.append(segment.text)
    return "".join(whole), "".join(scaffolding)


CALLED = Turn(Role.MODEL, '<tool_call>\n{"name": "clock", "arguments": {}}\n</tool_call>')
CONVERSATION = [Turn(Role.USER, "What time is it?"), CALLED, Turn(Role.TOOL, "12:00", name="clock")]


def test_the_file_holds_both_templates_and_loopd_reads_tool_use(hermes: Loaded) -> None:
    model = hermes.model
    assert model.template_choice == ChosenTemplate(
        "tool_use", TOOL_USE_KEY, HERMES_TOOL_USE, ("default",)
    )
    assert model.chat_template == HERMES_TOOL_USE
    metadata = model._llm.metadata  # as llama.cpp read the file
    assert metadata[DEFAULT_KEY] == HERMES_DEFAULT
    assert metadata[TOOL_USE_KEY] == HERMES_TOOL_USE


def test_loopds_prompt_is_the_tool_use_templates(hermes: Loaded) -> None:
    dialect, why = choose_dialect(hermes.config, hermes.model)
    assert dialect.name == "template"
    assert why.startswith(
        "the model's own chat template: tool_use (tokenizer.chat_template.tool_use)"
    )
    assert dialect.syntax is CallSyntax.TAGGED_JSON
    assert dialect.prompt_teaches_syntax  # the template's own tools block teaches it
    whole, scaffolding = text_of(hermes.model, dialect.render("Be brief.", CONVERSATION, None))
    assert TOOLS_PROMPT in scaffolding
    assert '"name": "find_tool"' in whole  # loopd's tools, in the template's <tools> block
    # the result in the template's own wrapper, the wrapper scaffolding, the result text
    assert "<tool_response>\n" in scaffolding
    assert "<tool_response>\n12:00\n</tool_response>" in whole


def test_one_turn_prompts_the_model_with_the_tool_use_template(
    hermes: Loaded, tmp_path: Path
) -> None:
    dialect, _ = choose_dialect(hermes.config, hermes.model)
    model = RecordingModel(hermes.model)
    home = make_home(tmp_path)
    markers = tuple(m.text for m in hermes.model.markers)
    turns = TurnLoop(model, dialect, SessionLogs(home), None, LIMITS, markers=markers)
    turns.run("s1", "Hello", False, lambda event: None)
    prompt = model.calls[0].prompt
    text = hermes.model.detokenize(prompt)  # control tokens (<|im_start|>) show as nothing
    assert TOOLS_PROMPT in text
    assert "<tools>" in text
    # the template's own opening: its `bos_token`, then its tools block
    opening = hermes.model.tokenize(
        f"{hermes.model.bos_text}<|im_start|>system\nYou are a function calling", special=True
    )
    ending = hermes.model.tokenize("<|im_start|>assistant\n", special=True)
    assert prompt[: len(opening)] == opening
    assert prompt[-len(ending) :] == ending


def test_a_file_without_named_templates_keeps_its_default(default_only: Loaded) -> None:
    model = default_only.model
    assert model.template_choice == ChosenTemplate("default", DEFAULT_KEY, HERMES_DEFAULT, ())
    assert model.chat_template == HERMES_DEFAULT
    dialect, why = choose_dialect(default_only.config, model)
    assert why == "the model's own chat template: default (tokenizer.chat_template)"
    assert not dialect.prompt_teaches_syntax  # the default shows no call syntax
    whole, _ = text_of(model, dialect.render("Be brief.", CONVERSATION, None))
    assert TOOLS_PROMPT not in whole
    assert "<tool_response>" not in whole
    assert "<|im_start|>tool\n12:00<|im_end|>" in whole  # the default's plain tool turn


# ---- a hostile template under the name tool_use ------------------------------------

# Each breaks a bound of core.model.template_sandbox on any conversation
HOSTILE = {
    "huge-output": "{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}",
    "recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "endless-loop": "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}",
}
BOUNDS = {
    "huge-output": ("the template wrote more than 1048576 characters",),
    "recursion": ("the template recursed without end",),
    # the step bound or the clock's, whichever a loaded machine meets first
    "endless-loop": (
        "the template took more than 2000000 steps",
        "the template ran for more than 5 s",
    ),
}


def refusal(path: Path) -> str:
    with pytest.raises(StartupError) as raised:
        choose_dialect(LoopdConfig(), VocabularyModel(path))
    return str(raised.value)


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_tool_use_template_is_bounded_as_a_default_one(
    kind: str, qwen2: list[VocabularyField], tmp_path: Path
) -> None:
    hostile = HOSTILE[kind]
    named = write_tiny_model(
        tmp_path / "named.gguf",
        arch="qwen3",
        vocabulary=qwen2,
        chat_template=HERMES_DEFAULT,  # harmless: the hostile one is what loopd runs
        named_templates={"tool_use": hostile},
    )
    alone = write_tiny_model(
        tmp_path / "alone.gguf", arch="qwen3", vocabulary=qwen2, chat_template=hostile
    )
    as_named, as_default = refusal(named), refusal(alone)
    start = "the model's chat template {} cannot be used: "
    assert as_named.startswith(start.format("tool_use (tokenizer.chat_template.tool_use)"))
    assert as_default.startswith(start.format("default (tokenizer.chat_template)"))
    assert as_named.endswith("see runbook.md#loopd-template-refused")
    reasons = [
        text.split("cannot be used: ", 1)[1].split(";", 1)[0] for text in (as_named, as_default)
    ]
    assert all(reason in BOUNDS[kind] for reason in reasons), reasons
    if len(BOUNDS[kind]) == 1:  # deterministic: the very same refusal, but for the name
        assert reasons[0] == reasons[1]
