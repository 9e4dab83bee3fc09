"""Tiny Qwen models that the tests build themselves load and generate.

For each architecture of `boxmaker.testing.tiny_gguf.ARCHITECTURES` (dense Qwen3,
and Qwen3.5 MoE with its Gated DeltaNet layers), a model is written into a
temporary directory from a real vocabulary (`scripts/fetch-vocabularies`; a failure
to fetch fails the tests) and the real chat template kept in
tests/fixtures/chat_templates/; then the pinned llama-cpp-python loads it, reads
the template back, tokenizes each ChatML marker to one token with special parsing
and to several without, and generates a few tokens. The weights are random, so
this proves the path, never what the model says. The same seed gives the same
bytes, and the reader agrees with gguf's own.

Reading a vocabulary takes a few seconds, writing a model one or two, loading one
about a second. Without llama-cpp-python these tests are skipped, loudly; with CI
set they fail.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFReader

from boxmaker.testing.llama import fetch_vocabularies, require_llama_cpp
from boxmaker.testing.tiny_gguf import (
    ARCHITECTURES,
    VocabularyField,
    read_vocabulary,
    write_tiny_model,
)

require_llama_cpp("the tiny model tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
MARKERS = ("<|im_start|>", "<|im_end|>")
PROMPT = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


@dataclass(frozen=True)
class Case:
    """An architecture, the vocabulary file it is built with, and its template."""

    arch: str
    vocabulary: str
    template: str


CASES = [
    Case("qwen3", "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja"),
    Case("qwen35moe", "ggml-vocab-qwen35.gguf", "Qwen3.5-4B.jinja"),
]


@dataclass(frozen=True)
class Built:
    """A tiny model written for one case, with what it was built from."""

    case: Case
    path: Path
    template: str
    fields: Sequence[VocabularyField]


def test_every_architecture_has_a_case() -> None:
    assert sorted(case.arch for case in CASES) == sorted(ARCHITECTURES)


@pytest.fixture(scope="module")
def vocabularies() -> Path:
    return fetch_vocabularies()


@pytest.fixture(scope="module", params=CASES, ids=[case.arch for case in CASES])
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, vocabularies: Path
) -> Built:
    case: Case = request.param
    fields = read_vocabulary(vocabularies / case.vocabulary)
    template = (TEMPLATES / case.template).read_text(encoding="utf-8")
    path = write_tiny_model(
        tmp_path_factory.mktemp(case.arch) / f"tiny-{case.arch}.gguf",
        arch=case.arch,
        vocabulary=fields,
        chat_template=template,
    )
    return Built(case, path, template, fields)


@pytest.fixture(scope="module")
def llama(built: Built) -> Iterator[Any]:
    from llama_cpp import Llama  # after require_llama_cpp: may be absent

    model = Llama(model_path=str(built.path), n_ctx=512, seed=1, verbose=False)
    yield model
    model.close()


def test_loads_with_its_architecture_and_template(llama: Any, built: Built) -> None:
    assert llama.metadata["general.architecture"] == built.case.arch
    assert llama.metadata["tokenizer.chat_template"] == built.template


@pytest.mark.parametrize("marker", MARKERS)
def test_marker_is_one_token_only_with_special_parsing(
    llama: Any, built: Built, marker: str
) -> None:
    special = llama.tokenize(marker.encode(), add_bos=False, special=True)
    plain = llama.tokenize(marker.encode(), add_bos=False, special=False)
    assert len(special) == 1
    assert llama.detokenize(special, special=True) == marker.encode()
    assert len(plain) > 1


def test_generates_tokens(llama: Any) -> None:
    prompt = llama.tokenize(PROMPT.encode(), add_bos=False, special=True)
    tokens = list(itertools.islice(llama.generate(prompt, temp=0.0), 4))
    assert len(tokens) == 4
    assert all(0 <= token < llama.n_vocab() for token in tokens)


def test_same_seed_gives_same_bytes(built: Built, tmp_path: Path) -> None:
    def write(name: str, seed: int) -> bytes:
        path = write_tiny_model(
            tmp_path / name,
            arch=built.case.arch,
            vocabulary=built.fields,
            chat_template=built.template,
            seed=seed,
        )
        return path.read_bytes()

    assert write("again.gguf", 0) == built.path.read_bytes()
    assert write("other.gguf", 1) != built.path.read_bytes()


def test_reader_reads_what_gguf_reads(vocabularies: Path) -> None:
    path = vocabularies / "ggml-vocab-bert-bge.gguf"  # the smallest: gguf's own is slow
    expected = {
        field.name: field.contents()
        for field in GGUFReader(path).fields.values()
        if field.name.startswith("tokenizer.") and field.name != "tokenizer.chat_template"
    }
    assert {field.name: field.value for field in read_vocabulary(path)} == expected
