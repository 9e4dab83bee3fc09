"""The chat formats against real vocabularies: llama.cpp's vocabulary-only GGUF files.

Each format's markers must be single tokens in the vocabulary of its family, and
`choose_format` must pick the family from the file's own template where the file
carries one, and refuse a format whose markers the vocabulary lacks. The files
are those of the pinned llama-cpp-python's source package
(`vendor/llama.cpp/models/ggml-vocab-*.gguf`), which `scripts/fetch-vocabularies`
fetches once into a cache (as for test_marker_vocabularies.py); none of them is a
Mistral vocabulary with `[INST]` as a token, so mistral is checked only as
refused (on Llama 2's, whose templates spell `[INST]` as plain text).

Without llama-cpp-python these tests are skipped, loudly; with CI set they fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.llama import fetch_vocabularies, require_llama_cpp

from boxmaker.core.errors import StartupError
from boxmaker.core.model.chat_format import KNOWN_FORMATS, missing_markers
from boxmaker.loopd.config import LoopdConfig
from boxmaker.loopd.dialects import choose_format
from boxmaker.loopd.model_check import VocabularyModel  # loopd's own, as model check uses it

require_llama_cpp("the vocabulary tests")

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def vocabulary_dir() -> Path:
    return fetch_vocabularies()


@pytest.fixture(scope="module")
def vocabularies(vocabulary_dir: Path) -> dict[str, VocabularyModel]:
    return {name: VocabularyModel(vocabulary_dir / f"ggml-vocab-{name}.gguf") for name in SINGLE}


def _config(template: str) -> LoopdConfig:
    return LoopdConfig.model_validate(
        {"paths": {"home": "/nonexistent"}, "model": {"path": "own.gguf", "template": template}}
    )


# which formats' markers are all single tokens in each vocabulary
SINGLE = {
    "llama-bpe": {"llama3"},  # Llama 3
    "phi-3": {"phi3"},
    "qwen2": {"chatml"},
    "qwen35": {"chatml"},
    "llama-spm": set(),  # Llama 2: [INST] is plain text
    "gemma-4": {"gemma4"},  # Gemma 4's turn markers are not Gemma 3's
}


@pytest.mark.parametrize("vocabulary", list(SINGLE))
def test_each_format_is_whole_only_in_the_vocabulary_of_its_family(
    vocabularies: dict[str, VocabularyModel], vocabulary: str
) -> None:
    model = vocabularies[vocabulary]
    whole = {
        name
        for name, chat_format in KNOWN_FORMATS.items()
        if not missing_markers(chat_format, lambda tag: model.tokenize(tag, special=True))
    }
    assert whole == SINGLE[vocabulary]


@pytest.mark.parametrize(
    ("vocabulary", "expected"),
    [("phi-3", "phi3"), ("qwen2", "chatml"), ("qwen35", "chatml"), ("gemma-4", "gemma4")],
)
def test_auto_picks_the_family_from_the_files_own_template(
    vocabularies: dict[str, VocabularyModel], vocabulary: str, expected: str
) -> None:
    assert choose_format(_config("auto"), vocabularies[vocabulary]) is KNOWN_FORMATS[expected]


def test_a_named_format_is_taken_where_the_vocabulary_has_it(
    vocabularies: dict[str, VocabularyModel],
) -> None:
    assert choose_format(_config("llama3"), vocabularies["llama-bpe"]).name == "llama3"


@pytest.mark.parametrize(
    ("vocabulary", "template"),
    [
        ("llama-spm", "mistral"),
        ("llama-spm", "auto"),
        ("gemma-4", "gemma"),
        ("qwen2", "llama3"),
        ("llama-bpe", "auto"),
    ],
)
def test_a_format_the_vocabulary_or_template_does_not_carry_is_refused(
    vocabularies: dict[str, VocabularyModel], vocabulary: str, template: str
) -> None:
    with pytest.raises(StartupError, match=r"set \[model\] template in loopd.toml"):
        choose_format(_config(template), vocabularies[vocabulary])
