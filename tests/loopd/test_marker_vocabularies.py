"""The marker list proven on real vocabularies (issue 15's first Done-when line).

For the embedded model and every vocabulary-only GGUF of the pinned
llama-cpp-python's source package (`scripts/fetch-vocabularies` fetches them once
into a cache directory; a failure to fetch fails the tests, it never skips them):
build the list, neutralise a text holding every listed marker, and re-tokenize it
with special parsing to none of them, while the same text un-neutralised does
produce every one (so the test can fail); the code-work corpus passes through
neutralise unchanged; the self-test passes. Vocabulary-only loads take about a
second each; the embedded model's case assembles the model, so it is marked
`model`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.llama import fetch_vocabularies

from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.sanitize import neutralise
from boxmaker.loopd.markers import (
    LOOKALIKES,
    LlamaVocabulary,
    Marker,
    build_markers,
    check_markers,
    format_markers,
    load_vocabulary,
    plain_user_defined,
)
from boxmaker.loopd.model import embedded_model_path

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FETCH = ROOT / "scripts" / "fetch-vocabularies"
CODE_WORK = ROOT / "tests" / "fixtures" / "sanitize" / "code_work.jsonl"
VOCABULARIES = [
    "aquila",
    "baichuan",
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "gpt-neox",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "nomic-bert-moe",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
]
EMBEDDED = "embedded"
ANGLE = "<", ">"


def _angle(name: str) -> str:
    return ANGLE[0] + name + ANGLE[1]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable}  # pip of the environment under test


@pytest.fixture(scope="module")
def vocabulary_dir() -> Path:
    return fetch_vocabularies()


@pytest.fixture(scope="module")
def embedded_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedded_model_path(tmp_path_factory.mktemp("model-home"))


def _load(name: str, request: pytest.FixtureRequest) -> LlamaVocabulary:
    if name == EMBEDDED:
        path: Path = request.getfixturevalue("embedded_path")
    else:
        path = request.getfixturevalue("vocabulary_dir") / f"ggml-vocab-{name}.gguf"
    assert path.is_file(), f"{path} is missing"
    return load_vocabulary(path)  # as loopd loads it: loopd.llama_load


def _code_work() -> list[str]:
    return [json.loads(line)["text"] for line in CODE_WORK.read_text().splitlines() if line]


CASES = [
    pytest.param(EMBEDDED, marks=[pytest.mark.model], id=EMBEDDED),
    *[pytest.param(name, id=name) for name in VOCABULARIES],
]


def test_the_source_package_holds_the_vocabularies_named_here(vocabulary_dir: Path) -> None:
    found = sorted(
        p.name[len("ggml-vocab-") : -len(".gguf")] for p in vocabulary_dir.glob("*.gguf")
    )
    assert found == sorted(VOCABULARIES)


@pytest.mark.parametrize("name", CASES)
def test_neutralised_text_holds_no_marker(name: str, request: pytest.FixtureRequest) -> None:
    vocab = _load(name, request)
    markers = build_markers(vocab)
    assert markers, "every vocabulary has at least its control tokens"
    texts = [m.text for m in markers]
    ids = {m.id for m in markers}
    stand_ins = ids.intersection(vocab.tokenize(LOOKALIKES, special=True))

    text = "".join(f" x{m.text}y " for m in markers)
    raw = vocab.tokenize(text, special=True)
    assert sum(1 for token in raw if token in ids) == len(markers), "the test could not fail"

    disarmed = neutralise(text, texts)
    assert disarmed.count == len(markers)
    assert not ids.intersection(vocab.tokenize(disarmed.text, special=True)) - stand_ins
    assert not ids.intersection(vocab.tokenize(disarmed.text, special=False)) - stand_ins

    for line in _code_work():
        assert neutralise(line, texts).text == line

    assert check_markers(vocab, markers, plain=plain_user_defined(vocab, markers)) == []


@pytest.mark.model
def test_the_embedded_model_lists_its_format_and_image_markers(
    request: pytest.FixtureRequest,
) -> None:
    vocab = _load(EMBEDDED, request)
    markers = build_markers(vocab)
    texts = {m.text for m in markers}
    assert set(format_markers(from_format(GEMMA))) <= texts
    assert {_angle("start_of_image"), _angle("end_of_image"), "[multimodal]"} <= texts
    plain = set(plain_user_defined(vocab, markers))
    assert {_angle("table"), _angle("code"), "\n\n", "  "} <= plain
    assert not plain & texts
    assert check_markers(vocab, markers, format_markers(from_format(GEMMA)), plain) == []


def _by_text(markers: tuple[Marker, ...]) -> dict[str, Any]:
    return {m.text: m for m in markers}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("command-r", ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"]),
        ("gemma-4", ["<|tool_call>", "<tool_call|>", "<|channel>", "<|turn>", "<turn|>"]),
        ("qwen2", ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]),
        ("llama-bpe", ["<|start_header_id|>", "<|eot_id|>"]),
        ("bert-bge", ["[CLS]", "[SEP]", "[MASK]"]),
    ],
)
def test_known_markers_are_listed(
    name: str, expected: list[str], request: pytest.FixtureRequest
) -> None:
    listed = _by_text(build_markers(_load(name, request)))
    assert [text for text in expected if text not in listed] == []


def test_the_fetch_is_idempotent(vocabulary_dir: Path) -> None:
    again = subprocess.run([str(FETCH)], capture_output=True, text=True, check=True, env=_env())
    assert Path(again.stdout.strip()) == vocabulary_dir
