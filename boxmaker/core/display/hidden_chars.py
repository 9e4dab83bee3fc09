"""Which characters a terminal must never be handed raw: the one rule. No I/O.

A character is hidden when a terminal would act on it, show nothing for it, or show
something other than what it is. That is:

- its general category (Python's `unicodedata`, Unicode 14.0 on Python 3.11) is
  control `Cc`, format `Cf`, line separator `Zl`, paragraph separator `Zp`,
  surrogate `Cs`, private use `Co` (a font may draw anything there) or unassigned
  `Cn` (noncharacters included; a later Unicode may make it invisible); or
- it is a `Default_Ignorable_Code_Point`: the sanitizer's generated table
  (`boxmaker.core.sanitize.unicode_tables`, checked against the Unicode data
  by a test), which adds fillers and variation selectors that are letters or
  marks by category (U+115F, U+3164, U+FE0F, ...); or
- it draws as a blank though it is neither a space nor ignorable: U+2800 BRAILLE
  PATTERN BLANK (category `So`), used to fake an empty line or a gap.

Spaces (`Zs`) and visible combining marks are not hidden.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right

from boxmaker.core.sanitize.unicode_tables import DEFAULT_IGNORABLE

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
BLANK_SYMBOLS = frozenset("\u2800")  # symbols that draw nothing

_FIRSTS = tuple(first for first, _ in DEFAULT_IGNORABLE)


def is_default_ignorable(code: int) -> bool:
    """True when code point `code` is a Default_Ignorable_Code_Point."""
    index = bisect_right(_FIRSTS, code) - 1
    return index >= 0 and code <= DEFAULT_IGNORABLE[index][1]


def is_hidden(char: str) -> bool:
    """True when the one character `char` must be escaped before a terminal sees it."""
    if " " <= char <= "~":
        return False  # printable ASCII, the common case
    return (
        unicodedata.category(char) in HIDDEN_CATEGORIES
        or char in BLANK_SYMBOLS
        or is_default_ignorable(ord(char))
    )
