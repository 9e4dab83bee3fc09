"""The tag pattern as a prefix tree matches exactly what an alternation of the tags,
longest first, matches."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.sanitize.tags import trie_pattern

ALPHABET = "<>[]/|_ab"
words = st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=1, max_size=12)


def alternation(tags: list[str]) -> re.Pattern[str]:
    longest_first = sorted(set(tags), key=lambda tag: (-len(tag), tag))
    return re.compile("|".join(map(re.escape, longest_first)))


@settings(max_examples=1000, deadline=None)
@given(words, st.text(ALPHABET + "xyz.", max_size=40))
def test_the_trie_finds_what_the_alternation_finds(tags: list[str], text: str) -> None:
    trie = re.compile(trie_pattern(tags))
    expected = [(m.start(), m.group()) for m in alternation(tags).finditer(text)]
    assert [(m.start(), m.group()) for m in trie.finditer(text)] == expected


def test_a_longer_tag_wins_and_a_shorter_one_is_fallen_back_to() -> None:
    trie = re.compile(trie_pattern(["<a>", "<a", "<ab>"]))
    assert [m.group() for m in trie.finditer("<ab> <a> <ac")] == ["<ab>", "<a>", "<a"]
