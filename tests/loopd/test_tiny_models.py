"""Tiny Qwen models that the tests build themselves load and generate.

For each architecture of `support.tiny_gguf.ARCHITECTURES` (dense Qwen3,
and Qwen3.5 MoE with its Gated DeltaNet layers), a model is written into a
temporary directory from a real vocabulary (`scripts/fetch-vocabularies`; a failure
to fetch fails the tests) and the real chat template kept in
tests/fixtures/chat_templates/; then the pinned llama-cpp-python loads it, reads
the template back, tokenizes each ChatML marker to one token with special parsing
and to several without, and generates a few tokens. The weights are random, so
this proves the path, never what the model says. The same seed gives the same
bytes, and the reader agrees with gguf's own.

Then loopd's own production path runs on each: a loopd.toml naming the file,
`load_model`, `choose_dialect` (the model's own template, not a hand-written
format, with the call syntax and reasoning markers of its family), both
self-tests, and one turn through `TurnLoop`, whose prompt opens with the
template's own scaffolding. Both vocabularies are Qwen2's base one (151,936 tokens,
the ChatML markers its only special ones): `<think>` and `<tool_call>` are plain
text here, several tokens each, where a released Qwen3 has each as one token.

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
import tomli_w
from gguf import GGUFReader
from support.llama import fetch_vocabularies, require_llama_cpp
from support.tiny_gguf import (
    ARCHITECTURES,
    VocabularyField,
    read_vocabulary,
    write_tiny_model,
)

from boxmaker.core.model.dialect import Dialect
from boxmaker.core.model.reasoning import ReasoningMarkers
from boxmaker.core.model.tool_calls import CallSyntax
from boxmaker.core.wire.loop import Event, TurnDone
from boxmaker.loopd.config import LoopdConfig, load_config
from boxmaker.loopd.dialects import choose_dialect, self_test
from boxmaker.loopd.limits import TurnLimits
from boxmaker.loopd.model import LlamaModel
from boxmaker.loopd.session_log import ModelEntry, SessionLogs, UserEntry
from boxmaker.loopd.startup import check_tags, load_model
from boxmaker.loopd.turn import TurnLoop
from boxmaker.testing.homes import make_home
from boxmaker.testing.recording_model import RecordingModel

require_llama_cpp("the tiny model tests")

pytestmark = [pytest.mark.model, pytest.mark.slow]

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
MARKERS = ("<|im_start|>", "<|im_end|>")
PROMPT = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
IM_START = 151644  # <|im_start|> in every Qwen vocabulary here
THINK = ReasoningMarkers("<think>", "</think>")
LIMITS = TurnLimits(max_tool_calls=0, max_tokens=16, reply_tokens=16, reasoning_tokens=8)


@dataclass(frozen=True)
class Case:
    """An architecture, the vocabulary file it is built with, and its template; and
    what loopd must read from that template: how the family writes a tool call, and
    whether its prompt opens the reply's reasoning block."""

    arch: str
    vocabulary: str
    template: str
    syntax: CallSyntax
    opens_reasoning: bool


CASES = [
    Case("qwen3", "ggml-vocab-qwen2.gguf", "Qwen-Qwen3-0.6B.jinja", CallSyntax.TAGGED_JSON, False),
    Case("qwen35moe", "ggml-vocab-qwen35.gguf", "Qwen3.5-4B.jinja", CallSyntax.XML, True),
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


@dataclass(frozen=True)
class Loaded:
    """A tiny model as loopd loads it: its config, the model and the dialect chosen."""

    built: Built
    config: LoopdConfig
    model: LlamaModel
    dialect: Dialect
    why: str


@pytest.fixture(scope="module")
def loaded(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Loaded:
    directory = tmp_path_factory.mktemp(f"loopd-{built.case.arch}")
    settings = {
        "paths": {"home": str(make_home(directory))},
        "model": {"path": str(built.path), "threads": 1, "seed": 1},
    }
    path = directory / "loopd.toml"
    path.write_text(tomli_w.dumps(settings), encoding="utf-8")
    config = load_config(path, {})
    model = load_model(config)
    dialect, why = choose_dialect(config, model)
    return Loaded(built, config, model, dialect, why)


def test_loopd_speaks_the_models_own_template(loaded: Loaded) -> None:
    dialect = loaded.dialect
    assert loaded.model.chat_template == loaded.built.template
    assert (dialect.name, loaded.why) == (
        "template",
        "the model's own chat template: default (tokenizer.chat_template)",
    )
    assert loaded.model.template_choice is not None
    assert loaded.model.template_choice.others == ()  # no named templates in the file
    assert dialect.syntax is loaded.built.case.syntax
    assert dialect.opens_reasoning is loaded.built.case.opens_reasoning
    assert dialect.reasoning == THINK
    assert {"<|im_start|>", "<|im_end|>"} <= set(dialect.markers)
    assert "<|im_end|>" in dialect.stop


def test_loopds_self_tests_pass(loaded: Loaded) -> None:
    assert loaded.model.markers
    assert self_test(loaded.model, loaded.dialect) == []
    check_tags(loaded.model, loaded.dialect)  # StartupError when it fails


def test_one_turn_through_loopds_turn_loop(loaded: Loaded, tmp_path: Path) -> None:
    model = RecordingModel(loaded.model)
    home = make_home(tmp_path)
    markers = tuple(m.text for m in loaded.model.markers)
    turns = TurnLoop(model, loaded.dialect, SessionLogs(home), None, LIMITS, markers=markers)
    events: list[Event] = []

    done = turns.run("s1", "Hello", False, events.append)

    assert isinstance(done, TurnDone)
    assert done.session == "s1"
    entries = SessionLogs(home).open("s1").entries
    assert entries[0] == UserEntry(text="Hello")
    replies = [entry for entry in entries if isinstance(entry, ModelEntry)]
    assert replies
    assert replies[0].ids
    prompt = model.calls[0].prompt  # the first prompt the model was given
    opening = loaded.model.tokenize("<|im_start|>system\n", special=True)
    assert opening[0] == IM_START
    assert prompt[: len(opening)] == opening
    opened = "<think>\n" if loaded.built.case.opens_reasoning else ""
    ending = loaded.model.tokenize(f"<|im_start|>assistant\n{opened}", special=True)
    assert prompt[-len(ending) :] == ending
