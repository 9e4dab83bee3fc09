"""The flag rules' fast path (`flag_rule`: the text folded at once, a pattern skipped
where its `Needs` are not met) against the full scan (`flag`), on texts built from the
pieces of the attack and code-work corpora, disguised as the normalisation undoes.

The contract: `flag_rule(text)` is the rule of the first pattern, in `PATTERNS`
order, that `flag` finds (the patterns of one rule stand together), or None.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from boxmaker.core.sanitize import flag
from boxmaker.core.sanitize.flag_literals import Needs, words_of
from boxmaker.core.sanitize.flag_patterns import PATTERNS
from boxmaker.core.sanitize.flagging import flag_rule, spans
from boxmaker.core.sanitize.normalisation import fold, normalise

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sanitize"
TEXTS = [
    json.loads(line)["text"]
    for name in ("attack.jsonl", "code_work.jsonl")
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    if line.strip()
]
WORDS = sorted({word for text in TEXTS for word in text.split()})
DISGUISES = ["\u200b", "\u00a0", "\u3000", "\uff29", "\u0430", "\u0456", "\u2028", "\U0001f600"]
SEPARATORS = st.sampled_from([" ", "  ", "\n", "\t", "", *DISGUISES])

PIECES = st.one_of(
    st.sampled_from(TEXTS),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join),
)
GENERATED = st.lists(st.tuples(PIECES, SEPARATORS), max_size=8).map(
    lambda parts: "".join(piece + separator for piece, separator in parts)
)


def _full_scan_rule(text: str) -> str | None:
    rules = {finding.rule for finding in flag(text)}
    return next((pattern.rule for pattern in PATTERNS if pattern.rule in rules), None)


def test_the_rules_of_one_rule_stand_together() -> None:
    seen: list[str] = []
    for rule in (pattern.rule for pattern in PATTERNS):
        if not seen or seen[-1] != rule:
            assert rule not in seen, rule  # a rule's patterns are contiguous
            seen.append(rule)


def test_every_corpus_text_gets_the_full_scans_rule() -> None:
    for text in TEXTS:
        assert flag_rule(text) == _full_scan_rule(text), text


@settings(max_examples=300, deadline=None)
@given(GENERATED)
def test_the_fast_path_agrees_with_the_full_scan(text: str) -> None:
    assert flag_rule(text) == _full_scan_rule(text)


@settings(max_examples=300, deadline=None)
@given(GENERATED)
def test_a_pattern_that_fires_has_its_needs_met(text: str) -> None:
    folded = fold(text)
    assert folded == normalise(text).text  # the whole text at once folds as the chunks do
    words = words_of(folded)
    for pattern in PATTERNS:
        if spans(pattern, folded):
            assert Needs.of(pattern).met(folded, words), pattern.name


def test_needs_rule_out_what_is_not_there() -> None:
    """The checks can fail: each pattern is skipped on a text of plain code."""
    text = fold("def parse(self, n: int) -> list[str]:\n    return [x for x in self.items]\n")
    words = words_of(text)
    skipped = [p.name for p in PATTERNS if not Needs.of(p).met(text, words)]
    assert len(skipped) == len(PATTERNS), sorted({p.name for p in PATTERNS} - set(skipped))
