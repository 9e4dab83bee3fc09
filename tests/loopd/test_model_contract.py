"""The `Model` contract, held to the fakes the turn loop's tests use and to the real
model alike (issue 40): a fake that drifted from `LlamaModel` would let those tests
pass against behaviour loopd never sees. Each case runs against the scripted model,
the recording wrapper around it, and the embedded model loaded as loopd loads it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.llama import require_llama_cpp

from boxmaker.core.model.named_templates import ChosenTemplate
from boxmaker.loopd.model import LlamaModel, Model, Sampling, embedded_model_path
from boxmaker.testing.recording_model import RecordingModel
from boxmaker.testing.scripted_model import ScriptedModel

TEXT = "The file says: the gate code is 4417."
REPLY = "Done: I wrote 12 bytes to notes.md."


def _scripted() -> Model:
    return ScriptedModel([REPLY] * 8)


def _recording() -> Model:
    return RecordingModel(ScriptedModel([REPLY] * 8))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Model:
    require_llama_cpp("the Model contract against the real model")
    home = tmp_path_factory.mktemp("model-home")
    return LlamaModel(
        embedded_model_path(home), context=1024, threads=2, seed=1234, sampling=Sampling()
    )


MAKERS: dict[str, Callable[[], Model] | None] = {
    "scripted": _scripted,
    "recording": _recording,
    "llama": None,  # the module's fixture: loaded once
}


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.model] if make is None else [], id=name)
        for name, make in MAKERS.items()
    ]
)
def model(request: pytest.FixtureRequest) -> Model:
    make = MAKERS[request.param]
    if make is None:
        real: Model = request.getfixturevalue("llama")
        return real
    return make()


def _prompt(model: Model, text: str) -> list[int]:
    return model.tokenize(text, special=False)


def test_plain_text_tokenizes_and_back(model: Model) -> None:
    ids = model.tokenize(TEXT, special=False)
    assert ids
    assert model.detokenize(ids) == TEXT


def test_the_streamed_pieces_are_the_reply_and_within_its_bound(model: Model) -> None:
    pieces: list[str] = []
    prompt = _prompt(model, TEXT)
    made = model.generate("s1", prompt, max_tokens=6, stop=set(), on_text=pieces.append)
    assert "".join(pieces) == made.text
    assert 0 < len(made.ids) <= 6
    assert made.finished or len(made.ids) == 6
    assert made.text == model.detokenize(made.ids)
    assert made.prompt_tokens == len(prompt)
    assert 0 <= made.evaluated <= made.prompt_tokens


def test_a_grown_prompt_of_the_same_session_reuses_its_prefix(model: Model) -> None:
    prompt = _prompt(model, TEXT)
    first = model.generate("s2", prompt, max_tokens=4, stop=set(), on_text=lambda _: None)
    grown = prompt + list(first.ids) + _prompt(model, " And then?")
    second = model.generate("s2", grown, max_tokens=4, stop=set(), on_text=lambda _: None)
    assert second.prompt_tokens == len(grown)
    assert second.evaluated < len(grown) - len(prompt)  # the prompt and the reply were kept


def test_the_vocabulary_parts_have_their_types(model: Model) -> None:
    assert isinstance(model.bos_text, str)
    assert isinstance(model.eos_text, str)
    assert isinstance(model.add_bos, bool)
    assert all(isinstance(m.text, str) and m.text for m in model.markers)
    assert model.template_choice is None or isinstance(model.template_choice, ChosenTemplate)
    assert model.chat_template is None or isinstance(model.chat_template, str)


def test_the_scripted_models_parts_are_those_of_a_model_with_no_vocabulary() -> None:
    # what the fakes answer where the real model has a file behind it
    scripted = _scripted()
    assert (scripted.bos_text, scripted.eos_text, scripted.markers) == ("", "", ())
