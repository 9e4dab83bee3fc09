"""The marker list and the self-test, on small fake vocabularies (no model)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import cast

import pytest

from boxmaker.core.errors import StartupError
from boxmaker.core.model.chat_format import GEMMA
from boxmaker.core.model.dialect import from_format
from boxmaker.core.sanitize import neutralise
from boxmaker.loopd.markers import (
    CONTROL,
    USER_DEFINED,
    Marker,
    build_markers,
    check_markers,
    describe,
    format_markers,
    plain_user_defined,
)
from boxmaker.loopd.model import LlamaModel
from boxmaker.loopd.startup import check_tags

L, R = "<", ">"
NORMAL = 1 << 2
TURN_OPEN, TURN_CLOSE = L + "start_of_turn" + R, L + "end_of_turn" + R
BOS, EOS = L + "bos" + R, L + "eos" + R
IMAGE = L + "start_of_image" + R
TABLE = L + "table" + R
SECRET = L + "|secret|" + R  # named by a key, user-defined


class FakeVocabulary:
    """Tokens with types; greedy longest match, control tokens only with special
    parsing, user-defined always, any other character its own token (1000 + code)."""

    def __init__(
        self,
        tokens: list[tuple[str, int]],
        metadata: Mapping[str, str] | None = None,
        *,
        fold: bool = False,
    ) -> None:
        self.tokens = tokens
        self.metadata: Mapping[str, str] = metadata or {}
        self.fold = fold  # a tokenizer that folds look-alikes back (built to fail)

    def n_tokens(self) -> int:
        return len(self.tokens)

    def token_text(self, token: int) -> str:
        return self.tokens[token][0]

    def token_attr(self, token: int) -> int:
        return self.tokens[token][1]

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        if self.fold:
            text = text.translate({0x2039: "<", 0x203A: ">", 0x2045: "[", 0x2046: "]"})
            text = unicodedata.normalize("NFKC", text)
        out: list[int] = []
        at = 0
        while at < len(text):
            best = max(
                (
                    (len(t), i)
                    for i, (t, attr) in enumerate(self.tokens)
                    if t
                    and text.startswith(t, at)
                    and (attr & USER_DEFINED or (special and attr & CONTROL))
                ),
                default=None,
            )
            if best is None:
                out.append(1000 + ord(text[at]))
                at += 1
            else:
                out.append(best[1])
                at += best[0]
        return out


def _vocabulary(*, fold: bool = False) -> FakeVocabulary:
    tokens = [
        ("", CONTROL),  # an empty control token: text cannot produce it
        (BOS, CONTROL),
        (EOS, CONTROL),
        (TURN_OPEN, CONTROL),
        (TURN_CLOSE, CONTROL),
        (IMAGE, USER_DEFINED),
        (TABLE, USER_DEFINED),
        ("\n\n", USER_DEFINED),
        (SECRET, USER_DEFINED),
        ("[INST]", USER_DEFINED),
        ("hello", NORMAL),
    ]
    return FakeVocabulary(tokens, {"tokenizer.ggml.eos_token_id": "8"}, fold=fold)


def test_the_list_holds_control_named_and_shaped_tokens_and_no_plain_text() -> None:
    markers = build_markers(_vocabulary())
    assert [(m.id, m.text) for m in markers] == [
        (1, BOS),
        (2, EOS),
        (3, TURN_OPEN),
        (4, TURN_CLOSE),
        (5, IMAGE),
        (8, SECRET),
        (9, "[INST]"),
    ]
    by_text = {m.text: m.why for m in markers}
    assert by_text[BOS] == "control; marker-shaped"
    assert by_text[IMAGE] == "user-defined; marker-shaped"
    assert by_text[SECRET] == "user-defined; named by tokenizer.ggml.eos_token_id; marker-shaped"
    assert plain_user_defined(_vocabulary(), markers) == [TABLE, "\n\n"]


def test_a_token_used_by_the_chat_template_is_listed() -> None:
    plain_looking = L + "turn" + R
    vocab = FakeVocabulary(
        [(plain_looking, USER_DEFINED), ("\n", USER_DEFINED)],
        {"tokenizer.chat_template": "{{ '" + plain_looking + "' }}\n"},
    )
    assert build_markers(vocab) == (Marker(0, plain_looking, "user-defined; in the chat template"),)


def test_a_token_used_only_by_a_named_template_is_listed() -> None:
    """A Hermes-style file: the `tool_use` template loopd renders writes a token that the
    default template does not."""
    plain_looking = L + "turn" + R
    vocab = FakeVocabulary(
        [(plain_looking, USER_DEFINED)],
        {
            "tokenizer.chat_template": "{{ 'plain' }}",
            "tokenizer.chat_template.tool_use": "{{ '" + plain_looking + "' }}",
        },
    )
    assert build_markers(vocab) == (Marker(0, plain_looking, "user-defined; in the chat template"),)


def test_a_user_defined_token_its_text_does_not_produce_is_not_listed() -> None:
    vocab = FakeVocabulary([(IMAGE, USER_DEFINED), (L + "start", USER_DEFINED)])
    # the longer token wins for the text, so the second one is never produced by it
    assert [m.text for m in build_markers(vocab)] == [IMAGE]


def test_the_self_test_passes_on_an_honest_vocabulary() -> None:
    vocab = _vocabulary()
    markers = build_markers(vocab)
    plain = plain_user_defined(vocab, markers)
    assert check_markers(vocab, markers, [TURN_OPEN, TURN_CLOSE, BOS, EOS], plain) == []


def test_the_self_test_fails_on_a_vocabulary_built_to_fail() -> None:
    vocab = _vocabulary(fold=True)
    markers = build_markers(vocab)
    problems = check_markers(vocab, markers)
    assert len(problems) == 2 * len(markers)  # single token again, and a marker id in it
    assert any("neutralised still holds marker ids" in p for p in problems)


def test_the_self_test_fails_when_a_format_marker_is_missing() -> None:
    vocab = FakeVocabulary([(BOS, CONTROL), (TURN_OPEN, CONTROL)])
    problems = check_markers(vocab, build_markers(vocab), format_markers(from_format(GEMMA)))
    missing = [m for m in GEMMA.markers if m not in (BOS, TURN_OPEN)]
    assert missing
    assert problems == [
        f"the chat format's marker {m!r} is not in the marker list" for m in missing
    ]


def test_the_self_test_fails_when_a_listed_text_is_not_one_token() -> None:
    vocab = _vocabulary()
    wrong = (*build_markers(vocab), Marker(99, L + "nowhere" + R, "control"))
    problems = check_markers(vocab, wrong)
    assert any("nowhere" in p and "not one marker" in p for p in problems)


def test_the_self_test_fails_when_a_marker_cannot_be_disarmed() -> None:
    vocab = FakeVocabulary([("ENDTURN", CONTROL)])
    problems = check_markers(vocab, build_markers(vocab))
    assert problems == ["'ENDTURN' (id 0) has no bracket neutralise can disarm"]


def test_the_self_test_fails_when_plain_text_would_be_changed() -> None:
    vocab = _vocabulary()
    markers = build_markers(vocab)
    assert check_markers(vocab, markers, plain=[IMAGE]) == [
        f"plain-text token {IMAGE!r} is changed by neutralise"
    ]


def test_neutralising_the_list_disarms_every_marker() -> None:
    vocab = _vocabulary()
    markers = build_markers(vocab)
    text = "".join(m.text + " " for m in markers)
    ids = {m.id for m in markers}
    assert ids <= set(vocab.tokenize(text, special=True))
    disarmed = neutralise(text, [m.text for m in markers]).text
    assert not ids & set(vocab.tokenize(disarmed, special=True))


class _FakeLoaded:
    """What loopd's startup reads of a loaded model: its markers and tokenizer."""

    def __init__(self, vocab: FakeVocabulary) -> None:
        self.vocab = vocab
        self.markers = build_markers(vocab)
        self.plain_tokens = tuple(plain_user_defined(vocab, self.markers))

    def tokenize(self, text: str, *, special: bool) -> list[int]:
        return self.vocab.tokenize(text, special=special)


def test_loopd_refuses_to_start_on_a_vocabulary_built_to_fail() -> None:
    loaded = cast(LlamaModel, _FakeLoaded(_vocabulary(fold=True)))
    with pytest.raises(StartupError) as raised:
        check_tags(loaded, from_format(GEMMA))
    message = str(raised.value)
    assert message.startswith("marker self-test failed: ")
    assert message.endswith("see runbook.md#loopd-tags-unexpected")
    assert "\n" not in message


def test_loopd_starts_on_an_honest_vocabulary() -> None:
    vocab = FakeVocabulary(
        [(m, CONTROL) for m in GEMMA.markers] + [(IMAGE, USER_DEFINED), (TABLE, USER_DEFINED)]
    )
    check_tags(cast(LlamaModel, _FakeLoaded(vocab)), from_format(GEMMA))


def test_tags_lines_escape_the_text_as_data() -> None:
    lines = describe([Marker(7, "a\n\u001b[1m" + IMAGE, "control")])
    assert lines == ['7\t"a\\n\\u001b[1m' + IMAGE + '"\tcontrol']
