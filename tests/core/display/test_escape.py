"""Escaping model text: nothing hidden survives, and JSON arguments keep their meaning.

The oracle here is written out by hand (the categories and the Default_Ignorable
ranges of Unicode's DerivedCoreProperties.txt), not imported from the code.
"""

from __future__ import annotations

import itertools
import json
import unicodedata
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from boxmaker.core.display.escape import escape_arguments, escape_model_text
from boxmaker.core.display.hidden_chars import is_default_ignorable

CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}
IGNORABLE = [
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]


BLANKS = {0x2800}  # BRAILLE PATTERN BLANK: a symbol that draws nothing


def hidden(char: str) -> bool:
    code = ord(char)
    return (
        unicodedata.category(char) in CATEGORIES
        or code in BLANKS
        or any(a <= code <= b for a, b in IGNORABLE)
    )


ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
HIDDEN_CHAR = st.one_of(
    st.characters(categories=("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")),
    *(st.integers(a, b).map(chr) for a, b in IGNORABLE),
    st.sampled_from(sorted(chr(code) for code in BLANKS)),
)
TEXT = st.text(st.one_of(ANY_CHAR, HIDDEN_CHAR))


# One of each named character or range end, with how it is spelled once escaped
NAMED = [
    pytest.param("\u00ad", "\\u00ad", id="soft-hyphen"),
    pytest.param("\u034f", "\\u034f", id="combining-grapheme-joiner"),
    pytest.param("\u061c", "\\u061c", id="arabic-letter-mark"),
    pytest.param("\u115f", "\\u115f", id="hangul-choseong-filler"),
    pytest.param("\u1160", "\\u1160", id="hangul-jungseong-filler"),
    pytest.param("\u17b4", "\\u17b4", id="khmer-vowel-inherent-aq"),
    pytest.param("\u180e", "\\u180e", id="mongolian-vowel-separator"),
    pytest.param("\u200b", "\\u200b", id="zero-width-space"),
    pytest.param("\u202e", "\\u202e", id="right-to-left-override"),
    pytest.param("\u2065", "\\u2065", id="reserved-2065"),
    pytest.param("\u206f", "\\u206f", id="nominal-digit-shapes"),
    pytest.param("\u3164", "\\u3164", id="hangul-filler"),
    pytest.param("\ufe0f", "\\ufe0f", id="variation-selector-16"),
    pytest.param("\ufeff", "\\ufeff", id="byte-order-mark"),
    pytest.param("\uffa0", "\\uffa0", id="halfwidth-hangul-filler"),
    pytest.param("\ufff0", "\\ufff0", id="reserved-fff0"),
    pytest.param("\U0001bca0", "\\ud82f\\udca0", id="shorthand-letter-overlap"),
    pytest.param("\U0001d173", "\\ud834\\udd73", id="musical-begin-beam"),
    pytest.param("\U000e0000", "\\udb40\\udc00", id="tag-reserved-e0000"),
    pytest.param("\U000e0001", "\\udb40\\udc01", id="language-tag"),
    pytest.param("\U000e0041", "\\udb40\\udc41", id="tag-latin-capital-a"),
    pytest.param("\U000e007f", "\\udb40\\udc7f", id="cancel-tag"),
    pytest.param("\U000e0100", "\\udb40\\udd00", id="variation-selector-17"),
    pytest.param("\U000e0fff", "\\udb43\\udfff", id="reserved-e0fff"),
    pytest.param("\x1b", "\\u001b", id="escape-cc"),
    pytest.param("\x85", "\\u0085", id="next-line-cc"),
    pytest.param("\x9b", "\\u009b", id="csi-cc"),
    pytest.param("\u0600", "\\u0600", id="arabic-number-sign-cf"),
    pytest.param("\U000110bd", "\\ud804\\udcbd", id="kaithi-number-sign-cf"),
    pytest.param("\u2028", "\\u2028", id="line-separator-zl"),
    pytest.param("\u2029", "\\u2029", id="paragraph-separator-zp"),
    pytest.param("\ud800", "\\ud800", id="lone-surrogate-cs"),
    pytest.param("\ue000", "\\ue000", id="private-use-co"),
    pytest.param("\U0010fffd", "\\udbff\\udffd", id="plane-16-private-use-co"),
    pytest.param("\u0378", "\\u0378", id="unassigned-cn"),
    pytest.param("\uffff", "\\uffff", id="noncharacter-cn"),
    pytest.param("\u2800", "\\u2800", id="braille-pattern-blank"),
]


@pytest.mark.parametrize(("char", "spelled"), NAMED)
def test_each_hidden_character_is_spelled_as_in_json(char: str, spelled: str) -> None:
    assert hidden(char)
    assert escape_arguments(f"a{char}b") == f"a{spelled}b"
    assert escape_model_text(f"a{char}b") == f"a{spelled}b"
    assert json.loads(f'"{spelled}"') == char


@pytest.mark.parametrize(
    "text",
    ["plain ascii ~!@#", "é ü ß 漢字 😀 👍🏽", "a\u00a0b c", "combining e\u0301", "\\u00ad"],
    ids=["ascii", "letters-and-emoji", "spaces", "visible-combining-mark", "a-real-backslash"],
)
def test_visible_text_passes_unchanged(text: str) -> None:
    assert escape_arguments(text) == text
    assert escape_model_text(text) == text


def test_newline_and_tab_pass_in_prose_only() -> None:
    assert escape_model_text("a\nb\tc\rd") == "a\nb\tc\\u000dd"
    assert escape_arguments("a\nb\tc\rd") == "a\\u000ab\\u0009c\\u000dd"


def test_the_table_agrees_with_the_oracle_at_every_range_edge() -> None:
    for first, last in IGNORABLE:
        for code in (first - 1, first, last, last + 1):
            inside = any(a <= code <= b for a, b in IGNORABLE)
            assert is_default_ignorable(code) is inside, hex(code)
    assert not is_default_ignorable(0)
    assert not is_default_ignorable(0x10FFFF)


@given(TEXT)
def test_nothing_hidden_survives(text: str) -> None:
    for escaped in (escape_arguments(text), escape_model_text(text)):
        assert not [c for c in escaped if hidden(c) and c not in "\n\t"], escaped
    assert not [c for c in escape_arguments(text) if hidden(c)]


def _no_pair_split(value: Any) -> bool:
    """False when a string holds a lone high surrogate then a lone low one (JSON joins them)."""
    if isinstance(value, str):
        return not any(
            "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff"
            for a, b in itertools.pairwise(value)
        )
    if isinstance(value, list):
        return all(_no_pair_split(v) for v in value)
    if isinstance(value, dict):
        return all(_no_pair_split(k) and _no_pair_split(v) for k, v in value.items())
    return True


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_json_arguments_keep_their_meaning(value: Any) -> None:
    assume(_no_pair_split(value))
    for original in (json.dumps(value, ensure_ascii=False), json.dumps(value)):
        escaped = escape_arguments(original)
        assert json.loads(escaped) == json.loads(original) == value
        assert not [c for c in escaped if hidden(c)]
