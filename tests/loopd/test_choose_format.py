"""`choose_format`: the chat format from `[model] template` or the model file's own
template, refused unless every marker is one token in the loaded vocabulary.

The fake model is the scripted one with a vocabulary of its own: the tags it is
given are single tokens with special parsing, everything else one token per
character. The templates are short excerpts in each family's style, written
here: enough of a template to carry its family's markers.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import tomli_w
from pydantic import ValidationError

from boxmaker.core.errors import ConfigError, StartupError
from boxmaker.core.model.chat_format import (
    CHATML,
    GEMMA,
    KNOWN_FORMATS,
    LLAMA3,
    MISTRAL,
    PHI3,
    ChatFormat,
)
from boxmaker.loopd.config import LoopdConfig, ModelSection, load_config
from boxmaker.loopd.dialects import SELFTEST_POINTER, choose_format, self_test
from boxmaker.testing.scripted_model import OFFSET, ScriptedModel

FIXTURES = Path(__file__).parents[1] / "fixtures" / "chat_templates"
TEMPLATES = {
    "gemma": (
        "{{ bos_token }}{% for message in messages %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
    ),
    "chatml": (
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama3": (
        "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + "
        "message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
        "'<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
    ),
    "phi3": (
        "{% for message in messages %}{% if message['role'] == 'system' %}"
        "{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
        "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + "
        "'<|end|>\\n' }}{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\\n' + "
        "message['content'] + '<|end|>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    ),
    "mistral": (
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ '[INST] ' + message['content'] + '[/INST]' }}"
        "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
        "{% endif %}{% endfor %}"
    ),
    # the families added with issue 25: their real templates, from the fixtures
    "deepseek_r1": FIXTURES.joinpath("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text(),
    "gemma4": FIXTURES.joinpath("google-gemma-4-31B-it.jinja").read_text(),
}
LLAMA2_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] <<SYS>>\\n' + message['content'] + ' [/INST]' }}{% endif %}{% endfor %}"
)


class VocabularyModel(ScriptedModel):
    """The scripted model with its own chat template and vocabulary: each of `tags`
    is one token with special parsing; any other text is one token a character."""

    def __init__(self, chat_template: str | None, tags: typing.Iterable[str]) -> None:
        super().__init__(chat_template=chat_template)
        self.tags = {tag: index for index, tag in enumerate(sorted(set(tags)))}

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        if special and text in self.tags:
            return [self.tags[text]]
        return [ord(c) + OFFSET for c in text]


def _config(tmp_path: Path, model: dict[str, str]) -> LoopdConfig:
    path = tmp_path / "loopd.toml"
    path.write_text(tomli_w.dumps({"model": model}), encoding="utf-8")
    return load_config(path, {"BOXMAKER_HOME": str(tmp_path / "home")})


def _own_model(tmp_path: Path, template: str = "auto") -> LoopdConfig:
    return _config(tmp_path, {"path": str(tmp_path / "own.gguf"), "template": template})


def _refusal(config: LoopdConfig, model: VocabularyModel) -> str:
    with pytest.raises(StartupError) as caught:
        choose_format(config, model)
    return str(caught.value)


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_auto_picks_each_family_from_its_template(tmp_path: Path, name: str) -> None:
    chat_format = KNOWN_FORMATS[name]
    model = VocabularyModel(TEMPLATES[name], chat_format.markers)
    assert choose_format(_own_model(tmp_path), model) is chat_format
    assert self_test(model, chat_format) == []


@pytest.mark.parametrize(
    "template",
    [None, "{{ messages | tojson }}", TEMPLATES["chatml"] + TEMPLATES["mistral"]],
    ids=["none", "unknown", "two-families"],
)
def test_auto_refuses_a_template_of_no_known_family_naming_the_key(
    tmp_path: Path, template: str | None
) -> None:
    every_marker = [m for f in KNOWN_FORMATS.values() for m in f.markers]
    refusal = _refusal(_own_model(tmp_path), VocabularyModel(template, every_marker))
    assert "set [model] template in loopd.toml" in refusal
    for name in KNOWN_FORMATS:
        assert f'"{name}"' in refusal
    assert refusal.endswith(SELFTEST_POINTER)
    assert SELFTEST_POINTER == "see runbook.md#loopd-selftest-failed"


@pytest.mark.parametrize(
    ("chat_format", "lacking"),
    [
        (GEMMA, "<eos>"),
        (CHATML, "<|im_end|>"),
        (LLAMA3, "<|end_header_id|>"),
        (PHI3, "<|system|>"),
        (MISTRAL, "[INST]"),
    ],
    ids=lambda value: value.name if isinstance(value, ChatFormat) else value,
)
def test_auto_refuses_a_family_whose_markers_the_vocabulary_lacks(
    tmp_path: Path, chat_format: ChatFormat, lacking: str
) -> None:
    tags = set(chat_format.markers) - {lacking}
    model = VocabularyModel(TEMPLATES[chat_format.name], tags)
    refusal = _refusal(_own_model(tmp_path), model)
    assert f"{chat_format.name} marker {lacking}:" in refusal
    assert "set [model] template in loopd.toml" in refusal
    assert refusal.endswith(SELFTEST_POINTER)


def test_a_llama2_template_reads_as_mistral_and_its_vocabulary_refuses_it(
    tmp_path: Path,
) -> None:
    model = VocabularyModel(LLAMA2_TEMPLATE, ["<s>", "</s>"])  # [INST] is plain text there
    refusal = _refusal(_own_model(tmp_path), model)
    assert "mistral markers [INST], [/INST]:" in refusal


@pytest.mark.parametrize("name", list(KNOWN_FORMATS))
def test_a_named_format_is_used_whatever_the_template_when_the_vocabulary_has_it(
    tmp_path: Path, name: str
) -> None:
    chat_format = KNOWN_FORMATS[name]
    model = VocabularyModel(TEMPLATES["chatml"], chat_format.markers)
    assert choose_format(_own_model(tmp_path, name), model) is chat_format


def test_a_named_format_whose_markers_the_vocabulary_lacks_is_refused(tmp_path: Path) -> None:
    model = VocabularyModel(TEMPLATES["llama3"], LLAMA3.markers)
    refusal = _refusal(_own_model(tmp_path, "mistral"), model)
    assert "mistral markers <s>, [INST], [/INST], </s>:" in refusal
    assert "set [model] template in loopd.toml" in refusal


def test_the_embedded_default_without_a_template_is_gemma(tmp_path: Path) -> None:
    config = _config(tmp_path, {})
    assert choose_format(config, VocabularyModel(None, GEMMA.markers)) is GEMMA
    refusal = _refusal(config, VocabularyModel(None, CHATML.markers))
    assert "gemma markers" in refusal


def test_a_model_of_its_own_without_a_template_is_refused(tmp_path: Path) -> None:
    refusal = _refusal(_own_model(tmp_path), VocabularyModel(None, GEMMA.markers))
    assert "names no chat template loopd knows" in refusal


def test_the_template_key_takes_every_format_name_and_auto(tmp_path: Path) -> None:
    field = ModelSection.model_fields["template"]
    assert set(typing.get_args(field.annotation)) == {"auto", *KNOWN_FORMATS}
    for name in KNOWN_FORMATS:
        assert _own_model(tmp_path, name).model.template == name
    with pytest.raises((ConfigError, ValidationError), match="template"):
        _own_model(tmp_path, "llama2")
