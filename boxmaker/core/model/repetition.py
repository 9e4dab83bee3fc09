"""Whether a reply only repeats itself: a base model that has lost its way writes the
same run of tokens again and again (the embedded Gemma 3 270M repeats its system
prompt) until its budget runs out. The turn loop (`loopd.turn`) asks this after each
stretch of generation and, when it says so, ends the reply with a notice. Pure: token
ids in, a value out.

Rules, in the order they are applied:

1. Only the tail counts. A reply repeats itself when its last tokens are one block
   of `period` ids written again and again, back to back: every one of those tokens
   equals the one `period` places before it. The repeated stretch is the longest
   such tail (its first copy included).
2. Legitimate text repeats too (a list's markers, a table's rules, code with the
   same line twice, a row of dashes), but in short runs. So a tail counts only when
   it is both long and many times its block: at least MIN_TOKENS tokens (512) and
   at least MIN_COPIES copies of the block (4). A block of 512 ids written 4 times
   is thus 2,048 tokens; one id written 512 times is a repetition.
3. Blocks of 1 to MAX_PERIOD ids (1,024) are tried, shortest first; the first that
   satisfies rule 2 is the answer. A text periodic in `p` is periodic in `2p` too,
   so the shortest is the block itself.
4. Nothing else is judged: a reply that wanders through different words is never
   a repetition, however long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_TOKENS = 512  # rule 2: the repeated tail's length, at least
MIN_COPIES = 4  # rule 2: copies of the block in it, at least
MAX_PERIOD = 1024  # rule 3: the longest block tried


@dataclass(frozen=True)
class Repetition:
    period: int  # the block's length in ids
    tokens: int  # the repeated tail's length, its first copy included

    @property
    def copies(self) -> int:
        return self.tokens // self.period


def find_repetition(
    ids: Sequence[int],
    *,
    min_tokens: int = MIN_TOKENS,
    min_copies: int = MIN_COPIES,
    max_period: int = MAX_PERIOD,
) -> Repetition | None:
    """The tail of `ids` that only repeats itself (the rules above), or None."""
    n = len(ids)
    if n < min_tokens:
        return None
    for period in range(1, min(max_period, n // min_copies) + 1):
        needed = max(min_tokens, period * min_copies)
        if needed > n:
            break  # longer blocks need more still
        matched = _periodic_tail(ids, period)
        if matched >= needed:
            return Repetition(period, matched)
    return None


def _periodic_tail(ids: Sequence[int], period: int) -> int:
    """The length of the tail periodic in `period` (rule 1): the last tokens that equal
    the one `period` before, plus the first copy; 0 when the last token does not."""
    n = len(ids)
    i = n - 1
    while i >= period and ids[i] == ids[i - period]:
        i -= 1
    matched = n - 1 - i
    return matched + period if matched else 0
