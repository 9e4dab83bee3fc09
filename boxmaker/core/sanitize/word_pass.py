"""The flag rules' fixed pass: a text folded, and which words of a vocabulary it holds. No I/O.

`WordPass.of(vocabulary)(text)` gives `Folded(fold(text), words, shadow)`: the
text as the flag rules read it (`normalisation.fold`), the vocabulary's words
among its words (`flag_literals.tokens_of`: its maximal runs of a-z), and (the C
way) the folded text's ASCII shadow, where the patterns' ASCII strings and keys
are looked for at the same places. brokerd runs it over every
tool result (`flagging.flag_rule`), where it is most of the cost of a result that
nothing fires on (bench/sanitize.py's taint line).

Two ways, with one answer (tests/core/sanitize/test_word_pass.py holds them to each other):

    in C      `_fold.c`, built with boxmaker (setup.py): both in one loop over the
              text, with no object made for a word the vocabulary lacks; about a
              fifth of the time of the Python way over 64 KiB
    Python    `fold`, then `tokens_of` and a set intersection: where the C module
              was not built (no compiler or no Python headers when boxmaker was
              installed); `compiled()` says which, and brokerd logs it at start

The C module reads only what this module hands it: the folding table (`folding()`,
each non-ASCII entry None or one ASCII character, checked there) and the
vocabulary (words of 1 to `WORD_MAX` letters a-z, checked there). A vocabulary
with a longer word takes the Python way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import NamedTuple

from boxmaker.core.sanitize.flag_literals import tokens_of
from boxmaker.core.sanitize.normalisation import fold, folding

WORD_MAX = 64  # the longest word the C module's table holds (its WORD_MAX)


def _compiled_module() -> ModuleType | None:
    try:
        from boxmaker.core.sanitize import _fold
    except ImportError:
        return None
    return _fold


_FOLD = _compiled_module()


def compiled() -> bool:
    """Whether the C module was built (else every pass takes the Python way)."""
    return _FOLD is not None


@cache
def _c_folding() -> object:
    assert _FOLD is not None
    rules = folding()
    other = {code: folded for code, folded in rules.table.items() if code >= 0x80}
    return _FOLD.folding(rules.ascii_bytes[:0x80], other)


class Folded(NamedTuple):
    """What the pass gives for a text."""

    text: str  # fold(text)
    words: frozenset[bytes]  # the vocabulary's words that are words of it
    # `text` as bytes, one a character: an ASCII one as itself, any other as 0x80, so
    # that an ASCII string is at the same places in both (and found faster: `text`
    # is often four bytes a character); None: the Python way, which makes none
    shadow: bytes | None


@dataclass(frozen=True, slots=True)
class WordPass:
    """The pass over one vocabulary (`of`); call it on a text."""

    words: tuple[bytes, ...]  # the vocabulary, in a fixed order
    vocabulary: frozenset[bytes]
    table: object | None  # the C module's table of `words`; None: the Python way

    @staticmethod
    @cache
    def of(vocabulary: frozenset[bytes], use_c: bool = True) -> WordPass:
        words = tuple(sorted(vocabulary))
        fits = all(0 < len(word) <= WORD_MAX for word in words)
        table = _FOLD.vocabulary(words) if use_c and _FOLD is not None and fits else None
        return WordPass(words, vocabulary, table)

    @property
    def in_c(self) -> bool:
        return self.table is not None

    def __call__(self, text: str) -> Folded:
        """`fold(text)`, the words of `vocabulary` that are words of it, and (the C way
        only) its ASCII shadow."""
        if self.table is None or _FOLD is None:
            folded = fold(text)
            return Folded(folded, self.vocabulary.intersection(tokens_of(folded)), None)
        folded, indexes, shadow = _FOLD.fold_words(text, _c_folding(), self.table)
        return Folded(folded, frozenset(self.words[index] for index in indexes), shadow)
