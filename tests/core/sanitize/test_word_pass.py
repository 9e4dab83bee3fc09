"""The flag rules' word pass: the C module gives what the Python way gives, and refuses
what its contract does not allow (boxmaker/core/sanitize/word_pass.py, _fold.c).

The text is the least trusted input there is (any tool result), so the property
draws every kind of character: the folding table's, ASCII, lone surrogates, the
whole of Unicode, runs of spaces and the vocabulary's own words, cut and joined.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.skips import skip_or_fail

from boxmaker.core.sanitize import word_pass
from boxmaker.core.sanitize.flagging import _all_needs
from boxmaker.core.sanitize.normalisation import folding
from boxmaker.core.sanitize.word_pass import WORD_MAX, Folded, WordPass

VOCABULARY = _all_needs().vocabulary
WORDS = sorted(VOCABULARY)
TABLE_CHARS = sorted(chr(code) for code in folding().table)


def passes(vocabulary: frozenset[bytes] = VOCABULARY) -> tuple[WordPass, WordPass]:
    """The C way and the Python way over `vocabulary`."""
    if not word_pass.compiled():
        skip_or_fail(
            "boxmaker's C module (boxmaker/core/sanitize/_fold.c) is not built: the word"
            " pass tests did NOT run; install build-essential and python3-dev, then"
            " reinstall boxmaker (pip install -e .)"
        )
    in_c = WordPass.of(vocabulary)
    assert in_c.in_c
    return in_c, WordPass.of(vocabulary, use_c=False)


def shadow_of(text: str) -> bytes:
    """`text` as bytes, an ASCII character as itself and any other as 0x80."""
    return bytes(ord(char) if ord(char) < 0x80 else 0x80 for char in text)


def same(in_c: WordPass, in_python: WordPass, text: str) -> Folded:
    """The C way's answer, checked against the Python way's and the shadow's reference."""
    answer, reference = in_c(text), in_python(text)
    assert (answer.text, answer.words) == (reference.text, reference.words)
    assert answer.shadow == shadow_of(answer.text)
    assert reference.shadow is None
    return answer


pieces = st.one_of(
    st.sampled_from(TABLE_CHARS),
    st.sampled_from([w.decode() for w in WORDS]),
    st.sampled_from([w.decode().upper() for w in WORDS]),
    st.sampled_from(["\ud800", "\udcff", "\U0001d400"]),
    st.sampled_from([" ", "  ", "\t", "\n", "\u200b", "\u3000", "\N{BRAILLE PATTERN BLANK}"]),
    st.characters(exclude_categories=()),  # every code point, surrogates too
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", max_size=80),
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(pieces, max_size=60).map("".join))
def test_the_c_way_is_the_python_way(text: str) -> None:
    in_c, in_python = passes()
    same(in_c, in_python, text)


def test_the_production_vocabulary_takes_the_c_way() -> None:
    in_c, _ = passes()
    assert in_c.words == tuple(WORDS)
    assert max(len(word) for word in WORDS) <= WORD_MAX


def test_a_word_is_found_only_as_a_whole_run_of_letters() -> None:
    in_c, in_python = passes(frozenset({b"ignore", b"system"}))
    for text, found in [
        ("IGNORE the rest", {b"ignore"}),
        ("ign\u200bore", {b"ignore"}),  # a dropped character joins the word
        ("ignores", set()),
        ("xsystem", set()),
        ("ignore" + "s" * 100_000, set()),  # a run far past WORD_MAX
        ("s" * 100_000 + " system", {b"system"}),
        ("\udcff system\ud800ignore", {b"system", b"ignore"}),  # lone surrogates part words
    ]:
        assert same(in_c, in_python, text).words == found, text


def test_a_word_of_word_max_letters_is_found_and_a_longer_one_takes_python() -> None:
    longest = b"a" * WORD_MAX
    in_c, in_python = passes(frozenset({longest}))
    text = f"x {longest.decode()} y {longest.decode()}a"
    assert same(in_c, in_python, text)[:2] == (text, frozenset({longest}))
    assert not WordPass.of(frozenset({longest + b"a"})).in_c


def test_a_large_text_of_every_kind_is_the_same_both_ways() -> None:
    in_c, in_python = passes()
    text = "".join(TABLE_CHARS) * 20 + " ".join(w.decode() for w in WORDS) * 10
    text += "".join(chr(code) for code in range(0x80, 0x3000)) + "\U0001f600" * 1000
    same(in_c, in_python, text)


def test_the_c_module_refuses_what_its_contract_does_not_allow() -> None:
    passes()
    from boxmaker.core.sanitize import _fold

    ascii_table = folding().ascii_bytes[:0x80]
    with pytest.raises(ValueError, match="a-z only"):
        _fold.vocabulary((b"Ignore",))
    with pytest.raises(ValueError, match="1 to 64"):
        _fold.vocabulary((b"",))
    with pytest.raises(TypeError):
        _fold.vocabulary(("ignore",))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _fold.vocabulary([b"ignore"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="128 bytes"):
        _fold.folding(ascii_table[:100], {})
    with pytest.raises(ValueError, match="ASCII folds to ASCII"):
        _fold.folding(ascii_table[:127] + b"\xff", {})
    for bad in ({0x41: "a"}, {0x430: "\u0430"}, {0x430: "ab"}, {0x430: 7}, {"x": "a"}):
        with pytest.raises(ValueError, match="None or one ASCII character"):
            _fold.folding(ascii_table, bad)  # type: ignore[arg-type]
    table = _fold.folding(ascii_table, {0x430: "a"})
    words = _fold.vocabulary((b"a",))
    assert _fold.fold_words("\u0430 A\u0431", table, words) == ("a a\u0431", [0], b"a a\x80")
    with pytest.raises(ValueError, match="incorrect name"):
        _fold.fold_words("a", words, table)  # the two tables swapped
    with pytest.raises(ValueError, match="invalid PyCapsule"):
        _fold.fold_words("a", object(), words)
    with pytest.raises(TypeError):
        _fold.fold_words(b"a", table, words)  # type: ignore[arg-type]
